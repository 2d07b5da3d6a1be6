"""What the service tells a caller when something goes wrong, and what it says about itself.

* A backend's answer outside its documented range (1e308, NaN) fails that request with 502 and
  a generic body; the clients check the same ranges again (a server's "huge" fault).
* 5xx bodies name the backend and nothing else: no exception text, no judge URL; the details
  are in the server's log.
* The identity headers (`X-Reward-Model` and the others) come with successful answers only,
  never with a 401, 421 or 4xx.

Every server here is a real `evolve-reward-server --backend mock` process on 127.0.0.1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.video_score_client import VideoScoreClient
from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import free_port, image_bytes, painted, painted_b64

IDENTITY = ("x-reward-backend", "x-reward-model", "x-reward-model-revision", "x-reward-config-hash")


def _requests(video_b64: str) -> dict[str, tuple[str, dict]]:
    frame = painted_b64(40)
    return {
        "/pairwise-critic": ("json", {"task": "t", "image_a": frame, "image_b": frame}),
        "/trajectory-critic": ("json", {"task": "t", "frames": [frame, frame], "skip": 1}),
        "/done": (
            "json",
            {"task": "t", "first_frame": frame, "prev_frame": frame, "curr_frame": frame},
        ),
        "/score": ("json", {"task_text": "t", "video_b64": video_b64, "nframes": 2}),
        "/pickle": ("pickle", {"images": [image_bytes(40)], "prompts": ["t"]}),
    }


def _send(http: httpx.Client, route: str, kind: str, body: dict) -> httpx.Response:
    if kind == "pickle":
        headers = {"content-type": "application/octet-stream", "accept": "application/json"}
        return http.post(route, content=safe_pickle_dumps(body), headers=headers)
    return http.post(route, json=body)


@pytest.fixture(scope="module")
def video_b64() -> str:
    import base64

    from tests.fuzz.hostile import tiny_mp4

    return base64.b64encode(tiny_mp4()).decode()


@pytest.mark.parametrize("answer", [1e308, -101.0, math.nan])
def test_a_backend_answer_out_of_range_is_a_generic_502(answer: float, video_b64: str) -> None:
    with EmbeddedService("mock", {"answer_override": answer}) as svc:
        with httpx.Client(base_url=svc.url, timeout=30, trust_env=False) as http:
            for route, (kind, body) in _requests(video_b64).items():
                resp = _send(http, route, kind, body)
                assert resp.status_code == 502, (route, resp.text)
                error = resp.json()["error"]
                assert error.startswith("backend 'mock' gave a value outside"), error
                assert "1e+308" not in resp.text and "nan" not in resp.text.lower()
                assert not any(h in resp.headers for h in IDENTITY)
            assert http.get("/health").status_code == 200
        assert "outside" in svc.log_tail(200)  # the value itself is in the log


def test_answers_within_their_ranges_pass_at_the_ends() -> None:
    """Progress 0 and 100 (critic -100 / +100, prob 0 / 1) are answers, not errors."""
    with EmbeddedService("mock") as svc, ProgressClient(svc.url) as client:
        up = client.pairwise_critic("t", painted(0), painted(100))
        down = client.pairwise_critic("t", painted(100), painted(0))
        assert (up.ok, up.value, down.ok, down.value) == (True, 100.0, True, -100.0)


def test_5xx_bodies_name_the_backend_and_nothing_else() -> None:
    with EmbeddedService("mock", {"fail_marker": "__fail__"}) as svc:
        body = {"task": "__fail__", "image_a": painted_b64(0), "image_b": painted_b64(10)}
        resp = httpx.post(svc.url + "/pairwise-critic", json=body, trust_env=False)
        assert resp.status_code == 500
        assert resp.json() == {
            "error": "backend 'mock' failed (details in the server log)",
            "backend": "mock",
        }
        assert "mock backend failure requested by '__fail__'" in svc.log_tail(200)


def test_a_judge_url_never_reaches_the_caller() -> None:
    pytest.importorskip("openai")
    port = free_port()  # nothing listens there: every chat completion fails
    kwargs = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m", "max_retries": 0}
    with EmbeddedService("openai", kwargs, startup_timeout=60) as svc:
        body = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(10)}
        resp = httpx.post(svc.url + "/pairwise-critic", json=body, trust_env=False, timeout=60)
        assert resp.status_code == 500 and str(port) not in resp.text, resp.text
        assert "openai" in resp.json()["error"]
        assert str(port) in svc.log_tail(200)


@pytest.fixture(scope="module")
def token_service() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", token="s3cret") as svc:
        yield svc


def test_identity_headers_only_on_authorised_successful_answers(
    token_service: EmbeddedService,
) -> None:
    url = token_service.url
    auth = {"authorization": "Bearer s3cret"}
    with httpx.Client(base_url=url, timeout=30, trust_env=False) as http:
        ok = http.get("/capabilities", headers=auth)
        assert ok.status_code == 200 and ok.headers["x-reward-model"] == "mock-intensity"
        refused = {
            401: http.get("/capabilities"),
            421: http.get("/capabilities", headers={**auth, "host": "evil.example"}),
            422: http.post("/trajectory-critic", json={"task": "t", "frames": []}, headers=auth),
            404: http.get("/nothing-here", headers=auth),
        }
    for status, resp in refused.items():
        assert resp.status_code == status, (status, resp.text)
        assert not [h for h in IDENTITY if h in resp.headers], (status, dict(resp.headers))


@pytest.fixture(scope="module")
def faulty_service() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", enable_faults=True, extra_args=["--pickle-at-root"]) as svc:
        yield svc


def _arm_huge(svc: EmbeddedService, route: str) -> None:
    spec = {"mode": "huge", "routes": [route], "count": 1}
    httpx.post(svc.url + "/admin/faults", json=spec, trust_env=False).raise_for_status()


def test_clients_refuse_scores_outside_the_range(faulty_service: EmbeddedService) -> None:
    """A service (here a fault) answering 1e308: the clients count an invalid response and
    never hand the number on (fail-soft: the fallback, or no value)."""
    frames = [painted(10), painted(60)]
    _arm_huge(faulty_service, "/score")
    with VideoScoreClient(faulty_service.url, nframes=2) as video:
        result = video.score("t", frames)
        assert not result.ok and result.value is None and "outside" in result.error
        assert video.stats.snapshot()["errors_by_kind"] == {"invalid_response": 1}
        assert video.score("t", frames).value == pytest.approx(0.6, abs=0.01)  # fault used up
    _arm_huge(faulty_service, "/pickle")
    images = [np.asarray(painted(30))]
    with PickleScorerClient(faulty_service.url, route="/pickle", fallback_score=-1.0) as pickle:
        result = pickle.score(images, ["t"])
        assert not result.ok and result.value == [-1.0] and "outside" in result.error
    _arm_huge(faulty_service, "/pairwise-critic")
    with ProgressClient(faulty_service.url) as progress:
        result = progress.pairwise_critic("t", frames[0], frames[1])
        assert not result.ok and "outside" in result.error
    status = httpx.get(faulty_service.url + "/admin/faults", trust_env=False).json()
    assert status["injected"] == 3 and json.dumps(status["active"]) == "null"
