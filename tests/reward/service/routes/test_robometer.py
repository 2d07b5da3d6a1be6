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
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted

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


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _post_form(url: str, data: dict, files: dict) -> httpx.Response:
    return httpx.post(url + "/evaluate_batch_npy", files=files, data=data, trust_env=False)


def test_json_frames_are_held_to_the_decoded_body_budget(mock_service: EmbeddedService) -> None:
    """Nested-list frames become one Python object per value: more values than the budget
    (100,000) are refused before parsing, and the error says to send `.npy` parts instead."""
    frames = np.zeros((4, 100, 100, 3), np.uint8)  # 120,000 values
    sample = {"sample_type": "progress", "trajectory": {"task": "t", "frames": frames.tolist()}}
    resp = httpx.post(mock_service.url + "/evaluate_batch", json=[sample], trust_env=False)
    error = resp.json()["error"]
    assert resp.status_code == 413 and "100000 values" in error and "/evaluate_batch_npy" in error
    sample["trajectory"]["frames"] = frames
    files, data = _npy_payload([sample])
    assert _post_form(mock_service.url, data, files).status_code == 200  # the same, as .npy


def test_multipart_parts_are_capped_before_any_is_read(mock_service: EmbeddedService) -> None:
    files, data = _npy_payload([_sample()])
    data.update({f"extra_{i}": "x" for i in range(600)})  # 602 parts, over the 512 default
    resp = _post_form(mock_service.url, data, files)
    assert resp.status_code == 413 and "more than 512 parts" in resp.json()["error"]


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        (b"--B\r\nContent-Disposition: form-data; name=\"sample_0\"\r\n\r\n{}", "B", 400,
         "without a closing boundary"),
        (b"no boundary at all", "B", 400, "no opening boundary"),
        (b"--B--\r\n", "", 400, "boundary parameter"),
        (b"--B\r\nContent-Disposition: form-data; name=\"sample_0\"\r\n\r\n[1]\r\n--B--\r\n",
         "B", 422, "sample objects"),
        (b"--B\r\nContent-Disposition: form-data; name=\"sample_0\"\r\n\r\n"
         + b"x" * (1 << 20 | 1) + b"\r\n--B--\r\n", "B", 413, "send arrays as .npy"),
    ],
)  # fmt: skip
def test_malformed_multipart_bodies_are_4xx(
    mock_service: EmbeddedService, body: bytes, content_type: str, status: int, words: str
) -> None:
    ctype = "multipart/form-data" + (f"; boundary={content_type}" if content_type else "")
    resp = httpx.post(
        mock_service.url + "/evaluate_batch_npy",
        content=body,
        headers={"content-type": ctype},
        trust_env=False,
    )
    assert resp.status_code == status and words in resp.json()["error"], resp.text
    assert httpx.get(mock_service.url + "/health", trust_env=False).status_code == 200


def test_npy_parts_in_any_layout_are_read_and_broken_ones_refused(
    mock_service: EmbeddedService,
) -> None:
    frames = _frames()
    sample = {
        "sample_type": "progress",
        "trajectory": {"task": "t", "frames": {"__numpy_file__": "f"}},
    }
    data = {"sample_0": json.dumps(sample)}
    expected = [[p / 100 for p in LEVELS]]
    for array in (frames, np.asfortranarray(frames), frames.astype(">i4")):
        resp = _post_form(mock_service.url, data, {"f": ("f.npy", _npy(array), "x/y")})
        assert resp.status_code == 200, resp.text
        assert resp.json()["outputs_progress"]["progress_pred"] == expected
    truncated = _npy(frames)[:-10]
    resp = _post_form(mock_service.url, data, {"f": ("f.npy", truncated, "x/y")})
    assert resp.status_code == 422 and "fewer bytes than its shape" in resp.json()["error"]
