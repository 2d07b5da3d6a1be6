"""How `create_app` assembles the service: one router per protocol, shared state, middlewares."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from evolve_envs.reward.service.app import create_app
from evolve_envs.reward.service.state.service_state import RequestLimits, ServiceState

TOKEN = "s3cret"
BASE = "http://127.0.0.1:8111"


def _b64_jpeg(value: int) -> str:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), value, np.uint8)).save(buf, "JPEG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture()
def client() -> Iterator[TestClient]:
    app = create_app("mock", backend_kwargs={"latency_ms": 0}, batch_window_ms=0)
    with TestClient(app, base_url=BASE) as c:
        yield c


@pytest.fixture()
def guarded() -> Iterator[TestClient]:
    app = create_app("mock", backend_kwargs={"latency_ms": 0}, token=TOKEN, max_body_bytes=1000)
    with TestClient(app, base_url=BASE) as c:
        yield c


def test_routers_serve_every_protocol(client: TestClient) -> None:
    paths = set(client.app.openapi()["paths"])
    assert paths == {
        "/health",
        "/capabilities",
        "/metrics",
        "/healthcheck",
        "/trajectory-critic",
        "/pairwise-critic",
        "/done",
        "/score",
        "/pickle",
        "/",
        "/evaluate_batch",
        "/evaluate_batch_npy",
        "/v1/chat/completions",
    }
    state = client.app.state.service
    assert isinstance(state, ServiceState) and state.backend is client.app.state.backend


def test_pickle_at_root_false_drops_root() -> None:
    app = create_app("mock", pickle_at_root=False)
    assert "/" not in app.openapi()["paths"] and "/pickle" in app.openapi()["paths"]


def test_metrics_count_router_routes_by_path(client: TestClient) -> None:
    client.get("/health")
    client.post("/healthcheck")
    frames = [_b64_jpeg(0), _b64_jpeg(60)]
    resp = client.post("/trajectory-critic", json={"task": "t", "frames": frames})
    assert resp.status_code == 200
    client.get("/no-such-route")
    requests = client.get("/metrics").json()["requests"]
    assert requests["/health"] == requests["/healthcheck"] == requests["/trajectory-critic"] == 1
    assert requests["other"] == 1


def test_reference_sampling_keeps_ref_num_frames(client: TestClient) -> None:
    body = {
        "task": "t",
        "frames": [_b64_jpeg(0), _b64_jpeg(60)],
        "reference": [_b64_jpeg(v) for v in range(0, 100, 10)],
        "ref_num": 3,
    }
    assert client.post("/trajectory-critic", json=body).status_code == 200
    body["reference"][5] = "AAAA"  # every reference frame is decoded, kept or not
    assert client.post("/trajectory-critic", json=body).status_code == 422


def test_token_is_checked_before_routing_and_body_limits(guarded: TestClient) -> None:
    for method, path, content in (
        ("GET", "/no-such-route", None),
        ("POST", "/done", b"x" * 5000),
    ):
        resp = guarded.request(method, path, content=content)
        assert resp.status_code == 401, path
        assert resp.json() == {"error": "missing bearer token"}
        assert resp.headers["www-authenticate"] == "Bearer"
    wrong = guarded.get("/health", headers={"Authorization": f"Bearer {TOKEN}x"})
    assert wrong.status_code == 401 and wrong.json() == {"error": "invalid bearer token"}
    ok = guarded.get("/health", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200


def test_body_limit_from_header_and_while_reading(guarded: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    resp = guarded.post("/trajectory-critic", content=b"x" * 2000, headers=auth)
    assert resp.status_code == 413
    assert resp.json() == {
        "error": "request body of 2000 bytes is larger than the limit of 1000 bytes",
        "limit": 1000,
    }
    chunked = guarded.post(
        "/trajectory-critic", content=iter([b"x" * 600, b"x" * 600]), headers=auth
    )
    assert chunked.status_code == 413
    assert chunked.json() == {"error": "request body larger than the limit of 1000 bytes"}


def test_host_allow_list_answers_json(client: TestClient) -> None:
    resp = client.get("/health", headers={"Host": "evil.example"})
    assert resp.status_code == 421
    assert resp.json() == {"error": "host 'evil.example' is not served here (see --allowed-hosts)"}
    for origin in ("null", "https://evil.example"):
        resp = client.get("/health", headers={"Origin": origin})
        assert resp.status_code == 403, origin
        assert resp.json() == {"error": "cross-origin requests are not accepted"}
    assert client.get("/health", headers={"Origin": BASE}).status_code == 200


def test_any_host_with_star() -> None:
    app = create_app("mock", allowed_hosts=("*",))
    with TestClient(app, base_url="http://evil.example") as c:
        assert c.get("/health").status_code == 200


@pytest.mark.parametrize("name", ["max_frames", "max_text_chars", "max_body_bytes"])
def test_limits_below_one_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be >= 1, got 0"):
        create_app("mock", **{name: 0})
    with pytest.raises(ValueError, match=name):
        RequestLimits(**{name: 0})
