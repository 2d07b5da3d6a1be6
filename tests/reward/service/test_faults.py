"""Fault injection modes, each observed through real HTTP."""

from __future__ import annotations

import json
import math

import httpx
import pydantic
import pytest

from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps, safe_pickle_loads
from evolve_envs.reward.protocol.wire import (
    DoneResponse,
    PairwiseCriticResponse,
    PickleScoreResponse,
    TrajectoryCriticResponse,
)
from tests.helpers.svc_helpers import assert_json_error, image_bytes, painted_b64

TRAJ = {"task": "t", "frames": [painted_b64(p) for p in (0, 30, 60)], "skip": 1}
PAIR = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(40)}


def _arm(c: httpx.Client, **spec: object) -> dict:
    resp = c.post("/admin/faults", json=spec)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _healthy(c: httpx.Client) -> None:
    assert TrajectoryCriticResponse.model_validate(c.post("/trajectory-critic", json=TRAJ).json())


@pytest.mark.parametrize("status", [429, 500, 503])
def test_status_fault(client: httpx.Client, status: int) -> None:
    state = _arm(client, mode="status", status=status, count=2)
    assert state["active"]["mode"] == "status" and state["remaining"] == 2
    for _ in range(2):
        body = assert_json_error(client.post("/trajectory-critic", json=TRAJ), status)
        assert body["fault"] == "status"
    _healthy(client)  # count exhausted
    assert client.get("/admin/faults").json()["active"] is None


def test_delay_fault_trips_client_timeout(client: httpx.Client) -> None:
    _arm(client, mode="delay", delay_s=1.0, count=1)
    with pytest.raises(httpx.ReadTimeout):
        client.post("/pairwise-critic", json=PAIR, timeout=0.2)
    _arm(client, mode="delay", delay_s=0.3, count=1)
    assert client.post("/pairwise-critic", json=PAIR, timeout=10).json() == {"critic": 40.0}
    _healthy(client)


def test_invalid_json_fault(client: httpx.Client) -> None:
    _arm(client, mode="invalid_json", count=1)
    resp = client.post("/trajectory-critic", json=TRAJ)
    assert resp.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(resp.content)
    _healthy(client)


def test_wrong_length_fault(client: httpx.Client) -> None:
    _arm(client, mode="wrong_length", count=4)
    traj = client.post("/trajectory-critic", json=TRAJ).json()
    assert len(traj["value_list"]) == len(traj["critic_list"]) == 2
    with pytest.raises(pydantic.ValidationError, match="len\\(critic_list\\) \\+ 1"):
        TrajectoryCriticResponse.model_validate(traj)
    with pytest.raises(pydantic.ValidationError):
        PairwiseCriticResponse.model_validate(client.post("/pairwise-critic", json=PAIR).json())
    pickled = safe_pickle_dumps({"images": [image_bytes(10)] * 3, "prompts": ["p"] * 3})
    scores = safe_pickle_loads(client.post("/pickle", content=pickled).content)["scores"]
    assert len(scores) == 4
    done = {"task": "t", "first_frame": PAIR["image_a"], "prev_frame": PAIR["image_a"]}
    resp = client.post("/done", json={**done, "curr_frame": PAIR["image_b"]}).json()
    with pytest.raises(pydantic.ValidationError):
        DoneResponse.model_validate(resp)
    _healthy(client)


@pytest.mark.parametrize(
    ("mode", "token", "check"), [("nan", "NaN", math.isnan), ("inf", "Infinity", math.isinf)]
)
def test_non_finite_faults(client: httpx.Client, mode: str, token: str, check) -> None:  # noqa: ANN001
    _arm(client, mode=mode, count=3)
    resp = client.post("/trajectory-critic", json=TRAJ)
    assert token in resp.text
    body = json.loads(resp.text)
    assert all(check(v) for v in body["value_list"] + body["critic_list"])
    with pytest.raises(pydantic.ValidationError):
        TrajectoryCriticResponse.model_validate(body)
    assert check(json.loads(client.post("/pairwise-critic", json=PAIR).text)["critic"])
    pickled = safe_pickle_dumps({"images": [image_bytes(10)], "prompts": ["p"]})
    scores = safe_pickle_loads(client.post("/pickle", content=pickled).content)
    assert check(scores["scores"][0])
    with pytest.raises(pydantic.ValidationError):
        PickleScoreResponse.model_validate(scores)
    _healthy(client)


def test_reset_fault_drops_connection(client: httpx.Client) -> None:
    _arm(client, mode="reset", count=2)
    for _ in range(2):
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            client.post("/trajectory-critic", json=TRAJ)
    _healthy(client)


def test_fault_limited_to_routes_and_persistent_until_cleared(client: httpx.Client) -> None:
    _arm(client, mode="status", status=503, routes=["/pairwise-critic"])
    for _ in range(3):
        assert_json_error(client.post("/pairwise-critic", json=PAIR), 503)
        _healthy(client)  # other routes unaffected
    state = client.get("/admin/faults").json()
    assert state["active"]["routes"] == ["/pairwise-critic"] and state["remaining"] is None
    assert client.delete("/admin/faults").json()["active"] is None
    assert client.post("/pairwise-critic", json=PAIR).json() == {"critic": 40.0}


def test_bad_fault_spec_is_rejected(client: httpx.Client) -> None:
    assert_json_error(client.post("/admin/faults", json={"mode": "explode"}), 422)
    assert client.get("/admin/faults").json()["active"] is None


def test_fault_routes_absent_unless_enabled(restricted_free_url: str) -> None:
    with httpx.Client(base_url=restricted_free_url, trust_env=False) as c:
        assert_json_error(c.post("/admin/faults", json={"mode": "reset"}), 404)
        assert c.get("/health").status_code == 200


@pytest.fixture(scope="module")
def restricted_free_url():  # noqa: ANN201
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    with EmbeddedService("mock") as svc:
        yield svc.url


def test_production_apps_carry_no_fault_injection() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from evolve_envs.reward.service.app import create_app\n"
        "app = create_app('mock', backend_kwargs={'latency_ms': 0})\n"
        "paths = {getattr(r, 'path', '') for r in app.routes}\n"
        "print('evolve_envs.reward.service.middleware.faults' in sys.modules,"
        " any(p.startswith('/admin') for p in paths))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
