"""Robometer clients against this service: `/evaluate_batch` and `/evaluate_batch_npy`.

The client side is written here from Robometer's published protocol (progress samples as JSON,
or as ``sample_<i>`` form fields whose frames travel as ``.npy`` file parts referenced by
``{"__numpy_file__": key}``) and reads ``outputs_progress.progress_pred`` and
``outputs_success.success_probs`` as Robometer's integrations do. The service is the mock
backend (intensity rule), so each frame's progress is known exactly.
"""

from __future__ import annotations

import io
import json

import httpx
import numpy as np

from evolve_envs.reward.service.embedded import EmbeddedService
from tests.service.svc_helpers import painted

LEVELS = [0, 25, 50, 100]


def _frames() -> np.ndarray:
    return np.stack([painted(p, size=32) for p in LEVELS])


def _npy_payload(samples: list[dict]) -> tuple[dict, dict]:
    """Robometer's multipart form: arrays out of each trajectory into `.npy` file parts."""
    files, data = {}, {}
    for i, sample in enumerate(samples):
        shell = json.loads(json.dumps({**sample, "trajectory": {}}))
        for field, value in sample["trajectory"].items():
            if isinstance(value, np.ndarray):
                key = f"sample_{i}_trajectory_{field}"
                buf = io.BytesIO()
                np.save(buf, value)
                files[key] = (f"{key}.npy", buf.getvalue(), "application/octet-stream")
                shell["trajectory"][field] = {"__numpy_file__": key}
            else:
                shell["trajectory"][field] = value
        data[f"sample_{i}"] = json.dumps(shell)
    data["use_frame_steps"] = "false"
    return files, data


def _sample(task: str = "put the bowl on the plate") -> dict:
    frames = _frames()
    return {
        "sample_type": "progress",
        "trajectory": {"task": task, "frames": frames, "frames_shape": list(frames.shape)},
    }


def test_evaluate_batch_npy_gives_a_progress_curve(mock_service: EmbeddedService) -> None:
    files, data = _npy_payload([_sample(), _sample("open the drawer")])
    resp = httpx.post(
        mock_service.url + "/evaluate_batch_npy", files=files, data=data, trust_env=False
    )
    assert resp.status_code == 200, resp.text
    out = resp.json()
    expected = [p / 100 for p in LEVELS]
    assert out["outputs_progress"]["progress_pred"] == [expected, expected]
    assert out["outputs_success"]["success_probs"][0] == expected
    assert out["outputs_progress"]["metadata"][0]["num_frames"] == len(LEVELS)
    assert out["outputs_preference"] is None


def test_evaluate_batch_json_and_refusals(mock_service: EmbeddedService) -> None:
    sample = _sample()
    sample["trajectory"]["frames"] = sample["trajectory"]["frames"].tolist()
    url = mock_service.url + "/evaluate_batch"
    resp = httpx.post(url, json={"samples": [sample]}, trust_env=False)
    assert resp.status_code == 200, resp.text
    assert resp.json()["outputs_progress"]["progress_pred"] == [[p / 100 for p in LEVELS]]
    bare = httpx.post(url, json=[sample], trust_env=False)
    assert bare.json() == resp.json()  # a bare list of samples is accepted too
    pref = {"sample_type": "preference", "chosen_trajectory": {}, "rejected_trajectory": {}}
    assert httpx.post(url, json=[pref], trust_env=False).status_code == 422
    flat = {"sample_type": "progress", "trajectory": {"task": "t", "frames": [1, 2, 3]}}
    assert httpx.post(url, json=[flat], trust_env=False).status_code == 422


def test_npy_files_are_never_unpickled(mock_service: EmbeddedService) -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    sample = {
        "sample_type": "progress",
        "trajectory": {"task": "t", "frames": {"__numpy_file__": "f"}},
    }
    resp = httpx.post(
        mock_service.url + "/evaluate_batch_npy",
        files={"f": ("f.npy", buf.getvalue(), "application/octet-stream")},
        data={"sample_0": json.dumps(sample)},
        trust_env=False,
    )
    assert resp.status_code == 422 and "npy" in resp.json()["error"]
