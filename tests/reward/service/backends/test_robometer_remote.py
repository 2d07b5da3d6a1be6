"""A Robometer evaluation server as the reward model: `RobometerClient` and the
`robometer_remote` backend against a stand-in Robometer server process
(`fake_robometer_server.py`), and the client against this service's own Robometer routes.

The stand-in reads a frame's progress from its grey level (painted frames: progress p reads back
as p / 100) and breaks its answer when the task text asks it to (``[[nan]]``, ``[[short]]``...).
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from evolve_envs.reward.clients.errors import BadResponseError, RequestRejectedError
from evolve_envs.reward.clients.robometer_client import RobometerClient
from evolve_envs.reward.protocol.critic_math import critic_between
from evolve_envs.reward.service.backends import BUILTIN_BACKENDS, ENTRY_POINT_GROUP
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import free_port, painted, painted_b64, wait_until_serving

pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[4]
LEVELS = [0, 20, 60, 100]


@pytest.fixture(scope="module")
def robometer_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("fake_robometer") / "server.log"
    app = "tests.reward.service.backends.fake_robometer_server:app"
    cmd = [sys.executable, "-m", "uvicorn", app]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base + "/requests", proc, log, timeout_s=15, interval_s=0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _seen(url: str) -> list[dict]:
    """What the stand-in server received since the last call, then forget it."""
    seen = httpx.get(url + "/requests", trust_env=False).json()
    httpx.delete(url + "/requests", trust_env=False)
    return seen


def _frames(levels: list[float], size: int = 16) -> np.ndarray:
    return np.stack([painted(p, size) for p in levels])


@pytest.mark.parametrize("encoding", ["npy", "json"])
def test_client_sends_progress_samples_and_reads_the_curves(
    robometer_url: str, encoding: str
) -> None:
    _seen(robometer_url)
    with RobometerClient(robometer_url, encoding=encoding, max_frames=8) as client:
        long = [painted(100 * k / 39, 8) for k in range(40)]  # 40 frames: 8 are sent
        result = client.evaluate([("open the drawer", _frames(LEVELS)), ("close it", long)])
    assert result.ok and not result.fallback
    first, second = result.value
    assert first.progress == tuple(p / 100 for p in LEVELS)
    assert first.success == (0.0, 0.0, 0.0, 1.0) and first.indices == (0, 1, 2, 3)
    assert second.indices == (0, 6, 11, 17, 22, 28, 33, 39) and len(second.progress) == 8
    assert second.progress[0] == 0.0 and second.final_progress == 1.0
    (request,) = _seen(robometer_url)
    samples = request["samples"]
    assert [s["sample_type"] for s in samples] == ["progress", "progress"]
    assert [s["task"] for s in samples] == ["open the drawer", "close it"]
    assert samples[0]["frames_shape"] == samples[0]["declared_shape"] == [4, 16, 16, 3]
    assert samples[1]["frames_shape"] == [8, 8, 8, 3]
    if encoding == "npy":
        assert request["route"] == "/evaluate_batch_npy"
        assert request["content_type"].startswith("multipart/form-data; boundary=")
        assert request["file_parts"] == ["sample_0_trajectory_frames", "sample_1_trajectory_frames"]
        assert samples[0]["frames_dtype"] == "uint8"
    else:
        assert request["route"] == "/evaluate_batch" and request["file_parts"] == []
        assert request["content_type"] == "application/json"


@pytest.mark.parametrize(
    ("script", "cause"),
    [
        ("nan", "progress_pred[0][3] is nan"),
        ("short", "progress_pred[0]: expected 4 values (one per frame sent), got 3"),
        ("range", "progress_pred[0][3] = 1.5 is outside [0.0, 1.0]"),
        ("missing", "no outputs_progress.progress_pred in the answer"),
        ("notjson", "body is not JSON"),
    ],
)
def test_a_malformed_answer_is_a_typed_error_counted_and_never_a_score(
    robometer_url: str, script: str, cause: str
) -> None:
    frames = _frames(LEVELS)
    with RobometerClient(robometer_url, fail_on_request_error=True) as strict:
        with pytest.raises(BadResponseError, match="invalid response") as err:
            strict.progress(f"open the drawer [[{script}]]", frames)
    assert cause in str(err.value) and "/evaluate_batch_npy" in str(err.value)
    with RobometerClient(robometer_url, warn_interval_s=3600) as soft:
        result = soft.progress(f"open the drawer [[{script}]]", frames)
        assert result.value is None and result.fallback and not result.ok
        assert soft.stats.snapshot()["errors_by_kind"] == {"invalid_response": 1}


def test_a_server_without_success_probabilities_gives_none(robometer_url: str) -> None:
    with RobometerClient(robometer_url, fail_on_request_error=True) as client:
        curve = client.progress("t [[nosuccess]]", _frames([0, 100])).value
    assert curve.progress == (0.0, 1.0) and curve.success is None


def test_bad_input_is_refused_before_sending(robometer_url: str) -> None:
    with RobometerClient(robometer_url) as client:
        with pytest.raises(ValueError, match="non-empty"):
            client.progress(" ", _frames([0]))
        with pytest.raises(ValueError, match="differ in shape"):
            client.progress("t", [painted(0, 8), painted(0, 16)])
        with pytest.raises(ValueError, match="dtype uint8"):
            client.progress("t", np.zeros((2, 8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="encoding"):
        RobometerClient(robometer_url, encoding="msgpack")


# --------------------------------------------------------------------------- the backend


@pytest.fixture(scope="module")
def remote(robometer_url: str) -> Iterator[EmbeddedService]:
    kwargs = {"base_url": robometer_url, "max_retries": 0, "model_id": "robometer-standin"}
    with EmbeddedService("robometer_remote", kwargs, startup_timeout=60) as svc:
        yield svc


def _done(url: str, task: str, levels: tuple[float, float, float]) -> httpx.Response:
    first, prev, curr = (painted_b64(p) for p in levels)
    body = {"task": task, "first_frame": first, "prev_frame": prev, "curr_frame": curr}
    return httpx.post(url + "/done", json=body, timeout=30, trust_env=False)


def test_backend_maps_progress_and_success_to_done(
    remote: EmbeddedService, robometer_url: str
) -> None:
    caps = httpx.get(remote.url + "/capabilities", trust_env=False).json()
    assert caps["backend"] == "robometer_remote" and caps["model_id"] == "robometer-standin"
    assert caps["done"] and caps["video"] and not caps["image_score"]
    _seen(robometer_url)
    resp = _done(remote.url, "open the drawer", (0, 20, 60))
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"done": False, "prob": 0.6}
    assert _done(remote.url, "open the drawer", (0, 60, 100)).json() == {"done": True, "prob": 1.0}
    # no success head: done is progress >= done_threshold (0.95)
    assert _done(remote.url, "t [[nosuccess]]", (0, 20, 100)).json()["done"] is True
    assert _done(remote.url, "t [[nosuccess]]", (0, 20, 80)).json()["done"] is False
    sent = _seen(robometer_url)
    assert {r["route"] for r in sent} == {"/evaluate_batch_npy"}
    # the service's frames (first, previous, current), at the service's working size
    assert sent[0]["samples"][0]["frames_shape"] == [3, 448, 448, 3]


def test_backend_critics_are_progress_changes(remote: EmbeddedService) -> None:
    body = {"task": "t", "image_a": painted_b64(20), "image_b": painted_b64(60)}
    resp = httpx.post(remote.url + "/pairwise-critic", json=body, timeout=30, trust_env=False)
    assert resp.status_code == 200, resp.text
    assert resp.json()["critic"] == pytest.approx(critic_between(20.0, 60.0))
    body = {"task": "t", "frames": [painted_b64(p) for p in (0, 20, 60, 100)], "skip": 1}
    resp = httpx.post(remote.url + "/trajectory-critic", json=body, timeout=30, trust_env=False)
    assert resp.status_code == 200, resp.text
    assert resp.json()["value_list"] == pytest.approx([0.0, 20.0, 60.0, 100.0])


def test_backend_malformed_answer_fails_the_request_and_is_counted(
    remote: EmbeddedService,
) -> None:
    count = lambda m: m.get("malformed_answers", {}).get("done", 0)  # noqa: E731
    before = count(httpx.get(remote.url + "/metrics", trust_env=False).json())
    for script in ("nan", "short", "missing"):
        resp = _done(remote.url, f"t [[{script}]]", (0, 20, 60))
        assert resp.status_code == 502 and resp.json()["malformed_answer"] is True
        assert "robometer answer does not match" not in resp.text  # in the log only
    after = count(httpx.get(remote.url + "/metrics", trust_env=False).json())
    assert after == before + 3
    assert "robometer answer does not match" in remote.log_tail(400)


def test_a_dead_robometer_server_is_a_backend_error() -> None:
    kwargs = {"base_url": f"http://127.0.0.1:{free_port()}", "max_retries": 0}
    with EmbeddedService("robometer_remote", kwargs, startup_timeout=60) as svc:
        resp = _done(svc.url, "t", (0, 20, 60))
    assert resp.status_code == 500 and "robometer_remote" in resp.json()["error"]


def test_every_built_in_backend_is_declared_in_setup_cfg() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options.entry_points"][ENTRY_POINT_GROUP].strip().splitlines()
    declared = dict(line.replace(" ", "").split("=", 1) for line in lines)
    assert declared == BUILTIN_BACKENDS


# --------------------------------------------------------------------------- protocol fidelity


@pytest.fixture(scope="module")
def own_service() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", {"rule": "intensity"}, startup_timeout=60) as svc:
        yield svc


@pytest.mark.parametrize("encoding", ["npy", "json"])
def test_client_round_trip_through_this_services_robometer_routes(
    own_service: EmbeddedService, encoding: str
) -> None:
    """The client and this service's Robometer routes agree on every field."""
    with RobometerClient(own_service.url, encoding=encoding, fail_on_request_error=True) as c:
        (curve,) = c.evaluate([("open the drawer", _frames(LEVELS, 32))]).value
        assert curve.progress == curve.success == tuple(p / 100 for p in LEVELS)
        with pytest.raises(RequestRejectedError, match="HTTP 413"):
            c.progress("t", np.zeros((2, 4097, 8, 3), np.uint8))  # a side over 4096


def test_backend_scores_an_episode_video_by_its_last_frame(robometer_url: str) -> None:
    from evolve_envs.reward.service.backends import make_backend
    from evolve_envs.reward.service.backends.base import MalformedAnswerError, VideoItem

    backend = make_backend("robometer_remote", base_url=robometer_url, encoding="json")
    try:
        frames = tuple(painted(p, 16) for p in (0, 20, 60))
        assert backend.score_video(VideoItem("open the drawer", frames)) == (0.6, None)
        with pytest.raises(MalformedAnswerError, match="outside"):
            backend.score_video(VideoItem("t [[range]]", frames))
    finally:
        backend.close()
