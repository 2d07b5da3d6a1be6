"""Bad input: each gets a 4xx (or 501) error and the server keeps serving valid requests."""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps, safe_pickle_loads
from evolve_envs.reward.service.app import create_app
from evolve_envs.reward.service.backends import UnknownBackendError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import TOKEN, assert_json_error, encode, image_bytes, painted_b64

TINY = painted_b64(10, size=8)


def _valid_request_succeeds(c: httpx.Client, headers: dict[str, str] | None = None) -> None:
    body = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(40)}
    resp = c.post("/pairwise-critic", json=body, headers=headers)
    assert resp.status_code == 200 and resp.json() == {"critic": 40.0}


def _traj(**fields: object) -> dict:
    return {"task": "t", "frames": [TINY, TINY], "skip": 1, **fields}


class _SystemCall:
    """Pickles as a call to os.system (what a malicious client would send)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


def _chunks(total: int) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        n = min(1 << 20, total - sent)
        sent += n
        yield b"x" * n


# name -> (method, path, request kwargs, expected status)
JSON_CASES: dict[str, tuple[str, str, Callable[[], dict], int]] = {
    "bad_base64": (
        "POST",
        "/trajectory-critic",
        lambda: {"json": _traj(frames=["@@not-b64!"])},
        422,
    ),
    "non_image_bytes": (
        "POST",
        "/trajectory-critic",
        lambda: {"json": _traj(frames=[base64.b64encode(b"hello, world").decode()] * 2)},
        422,
    ),
    "truncated_png": (
        "POST",
        "/pairwise-critic",
        lambda: {
            "json": {
                "task": "t",
                "image_a": TINY,
                "image_b": base64.b64encode(base64.b64decode(TINY)[:40]).decode(),
            }
        },
        422,
    ),
    "huge_image": (
        "POST",
        "/pairwise-critic",
        lambda: {
            "json": {
                "task": "t",
                "image_a": encode(np.zeros((8, 1500, 3), np.uint8)),
                "image_b": TINY,
            }
        },
        413,
    ),
    "too_many_frames": (
        "POST",
        "/trajectory-critic",
        lambda: {"json": _traj(frames=[TINY] * 257)},
        413,
    ),
    "empty_frames": ("POST", "/trajectory-critic", lambda: {"json": _traj(frames=[])}, 422),
    "frames_wrong_type": ("POST", "/trajectory-critic", lambda: {"json": _traj(frames=TINY)}, 422),
    "frame_item_wrong_type": (
        "POST",
        "/trajectory-critic",
        lambda: {"json": _traj(frames=[1, 2])},
        422,
    ),
    "task_wrong_type": (
        "POST",
        "/pairwise-critic",
        lambda: {"json": {"task": 7, "image_a": TINY, "image_b": TINY}},
        422,
    ),
    "skip_zero": ("POST", "/trajectory-critic", lambda: {"json": _traj(skip=0)}, 422),
    "missing_task": ("POST", "/trajectory-critic", lambda: {"json": {"frames": [TINY]}}, 422),
    "missing_done_frame": (
        "POST",
        "/done",
        lambda: {"json": {"task": "t", "first_frame": TINY, "prev_frame": TINY}},
        422,
    ),
    "body_not_an_object": ("POST", "/pairwise-critic", lambda: {"json": [1, 2, 3]}, 422),
    "invalid_json": (
        "POST",
        "/trajectory-critic",
        lambda: {
            "content": b'{"task": "t", "frames": [',
            "headers": {"content-type": "application/json"},
        },
        400,
    ),
    "oversize_body": ("POST", "/trajectory-critic", lambda: {"content": b"x" * (9 << 20)}, 413),
    "oversize_chunked_body": (
        "POST",
        "/trajectory-critic",
        lambda: {"content": _chunks(9 << 20), "headers": {"content-type": "application/json"}},
        413,
    ),
    "score_without_video": ("POST", "/score", lambda: {"json": {"task_text": "t"}}, 422),
    "score_missing_path": (
        "POST",
        "/score",
        lambda: {"json": {"task_text": "t", "video_path": "/nonexistent/episode.mp4"}},
        422,
    ),
    "score_not_a_video": (
        "POST",
        "/score",
        lambda: {"json": {"task_text": "t", "video_b64": base64.b64encode(b"\x00" * 500).decode()}},
        422,
    ),
    "score_nframes_zero": (
        "POST",
        "/score",
        lambda: {"json": {"task_text": "t", "video_b64": "AAAA", "nframes": 0}},
        422,
    ),
    "unknown_route": ("POST", "/no-such-route", lambda: {"json": {}}, 404),
    "wrong_method": ("GET", "/trajectory-critic", lambda: {}, 405),
    "backend_failure": (
        "POST",
        "/pairwise-critic",
        lambda: {"json": {"task": "__fail__ please", "image_a": TINY, "image_b": TINY}},
        500,
    ),
}


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_bad_json_request_is_rejected_and_server_keeps_serving(
    client: httpx.Client, case: str
) -> None:
    method, path, kwargs, status = JSON_CASES[case]
    resp = client.request(method, path, **kwargs())
    body = assert_json_error(resp, status)
    if case == "backend_failure":
        assert "mock" in body["error"] and body["backend"] == "mock"
    _valid_request_succeeds(client)


def test_a_list_of_wrong_items_is_one_error_with_a_small_answer(client: httpx.Client) -> None:
    # 60k items of the wrong type under the body budget: one error per list, not one per item
    # (pydantic's fail_fast), and at most MAX_DETAIL listed (a fuzzing case once grew the
    # server by 78-108 MB building and answering 60k errors)
    from evolve_envs.reward.service.errors import MAX_DETAIL

    resp = client.post("/trajectory-critic", json={"reference": [0] * 60_000, "frames": [1] * 9})
    body = assert_json_error(resp, 422)
    assert len(resp.content) < 4096 and len(body["detail"]) <= MAX_DETAIL
    assert [e["loc"] for e in body["detail"]] == [["body", "task"], ["body", "frames", "0"],
                                                  ["body", "reference", "0"]]  # fmt: skip
    _valid_request_succeeds(client)


def test_a_body_wrong_in_every_field_names_three_and_counts_the_rest(client: httpx.Client) -> None:
    body = {"task": 1, "frames": 2, "reference": 3, "skip": 0, "ref_num": -1, "batch_size": 0,
            "task_name": 4, "use_server_reference": "x"}  # fmt: skip
    answer = assert_json_error(client.post("/trajectory-critic", json=body), 422)
    assert len(answer["detail"]) == 8  # each field once
    assert answer["error"].endswith("(+5 more)"), answer["error"]
    _valid_request_succeeds(client)


PICKLE_CASES: dict[str, tuple[Callable[[Path], bytes], int]] = {
    "not_a_pickle": (lambda _: b"\x00\x01garbage bytes", 400),
    "empty_body": (lambda _: b"", 400),
    "resolves_a_global": (lambda tmp: pickle.dumps(_SystemCall(tmp / "pwned")), 400),
    # numpy data is accepted (flow_grpo, HPSv2), but a float array is not an encoded image ...
    "numpy_array_as_image": (
        lambda _: pickle.dumps({"images": [np.zeros(3)], "prompts": ["p"]}),
        422,
    ),
    # ... and object arrays (which can hold anything) are never unpickled.
    "numpy_object_array": (
        lambda _: pickle.dumps({"images": [b"x"], "prompts": np.array(["p"], dtype=object)}),
        400,
    ),
    "wrong_shape_list": (lambda _: safe_pickle_dumps([b"img", "prompt"]), 422),
    "length_mismatch": (
        lambda _: safe_pickle_dumps({"images": [image_bytes(10)], "prompts": ["a", "b"]}),
        422,
    ),
    "empty_images": (lambda _: safe_pickle_dumps({"images": [], "prompts": []}), 422),
    "images_wrong_type": (lambda _: safe_pickle_dumps({"images": [1], "prompts": ["a"]}), 422),
    "image_not_decodable": (
        lambda _: safe_pickle_dumps({"images": [b"not an image"], "prompts": ["a"]}),
        422,
    ),
    "too_many_images": (
        lambda _: safe_pickle_dumps({"images": [b"x"] * 257, "prompts": ["a"] * 257}),
        413,
    ),
    "backend_failure": (
        lambda _: safe_pickle_dumps({"images": [image_bytes(10)], "prompts": ["__fail__"]}),
        500,
    ),
}


@pytest.mark.parametrize("case", sorted(PICKLE_CASES))
def test_bad_pickle_request_is_rejected_and_server_keeps_serving(
    client: httpx.Client, case: str, tmp_path: Path
) -> None:
    build, status = PICKLE_CASES[case]
    resp = client.post("/pickle", content=build(tmp_path))
    assert resp.status_code == status, resp.content[:300]
    assert resp.headers["content-type"] == "application/octet-stream"
    error = safe_pickle_loads(resp.content)["error"]
    assert isinstance(error, str) and error
    if case == "resolves_a_global":
        assert "posix.system" in error or "os.system" in error
        assert not (tmp_path / "pwned").exists()
    # The same failure as JSON, for clients that prefer it.
    resp = client.post("/pickle", content=build(tmp_path), headers={"Accept": "application/json"})
    assert_json_error(resp, status)
    ok = client.post(
        "/pickle", content=safe_pickle_dumps({"images": [image_bytes(20)], "prompts": ["p"]})
    )
    assert safe_pickle_loads(ok.content) == {"scores": [0.2]}
    _valid_request_succeeds(client)


# --------------------------------------------------------------- token and unsupported routes


@pytest.fixture(scope="module")
def restricted() -> Iterator[EmbeddedService]:
    """A progress-only mock (like a Robo-Dopamine model) that requires a bearer token."""
    svc = EmbeddedService(
        "mock", {"disabled": ["pairwise", "done", "video", "image_score"]}, token=TOKEN
    )
    svc.start()
    yield svc
    svc.stop()


def test_missing_and_wrong_bearer_token(restricted: EmbeddedService) -> None:
    body = {"task": "t", "frames": [painted_b64(0), painted_b64(30)], "skip": 1}
    with httpx.Client(base_url=restricted.url, trust_env=False) as c:
        resp = c.post("/trajectory-critic", json=body)
        assert assert_json_error(resp, 401)["error"] == "missing bearer token"
        assert resp.headers["www-authenticate"] == "Bearer"
        resp = c.post("/trajectory-critic", json=body, headers={"Authorization": "Bearer nope"})
        assert assert_json_error(resp, 401)["error"] == "invalid bearer token"
        resp = c.post("/trajectory-critic", json=body, headers=restricted.headers())
        assert resp.json()["value_list"] == [0.0, 30.0]


@pytest.mark.parametrize(
    ("path", "capability", "body"),
    [
        ("/pairwise-critic", "pairwise", {"task": "t", "image_a": TINY, "image_b": TINY}),
        (
            "/done",
            "done",
            {"task": "t", "first_frame": TINY, "prev_frame": TINY, "curr_frame": TINY},
        ),
        ("/score", "video", {"task_text": "t", "video_b64": "AAAA"}),
    ],
)
def test_unsupported_route_answers_501_naming_backend(
    restricted: EmbeddedService, path: str, capability: str, body: dict
) -> None:
    with httpx.Client(base_url=restricted.url, headers=restricted.headers(), trust_env=False) as c:
        caps = c.get("/capabilities").json()
        assert caps["progress"] is True and caps[capability] is False
        err = assert_json_error(c.post(path, json=body), 501)
        assert err["backend"] == "mock" and err["capability"] == capability
        assert "mock" in err["error"]
        traj = {"task": "t", "frames": [painted_b64(0), painted_b64(30)], "skip": 1}
        assert c.post("/trajectory-critic", json=traj).status_code == 200


def test_unsupported_pickle_route_answers_501(restricted: EmbeddedService) -> None:
    body = safe_pickle_dumps({"images": [image_bytes(10)], "prompts": ["p"]})
    with httpx.Client(base_url=restricted.url, headers=restricted.headers(), trust_env=False) as c:
        resp = c.post("/pickle", content=body)
        assert resp.status_code == 501
        assert "mock" in safe_pickle_loads(resp.content)["error"]


# ------------------------------------------------------------------------------ unknown backend


def test_unknown_backend_in_create_app() -> None:
    with pytest.raises(UnknownBackendError, match="unknown backend 'nope'.*mock"):
        create_app("nope")


def test_unknown_backend_on_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.cli.serve", "--backend", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "invalid choice: 'nope'" in proc.stderr


def test_bad_backend_kwargs_on_command_line() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolve_envs.cli.serve",
            "--backend",
            "mock",
            "--backend-kwargs",
            '{"rule": "sideways"}',
            "--port",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot start backend 'mock'" in proc.stderr and "sideways" in proc.stderr


def test_embedded_service_reports_startup_failure_with_log() -> None:
    svc = EmbeddedService("mock", {"no_such_knob": 1}, startup_timeout=30)
    with pytest.raises(Exception, match="exited with status 2 during startup") as info:
        svc.start()
    assert "no_such_knob" in str(info.value)
    assert svc.log_path is not None and str(svc.log_path) in str(info.value)
    svc.log_path.unlink()
