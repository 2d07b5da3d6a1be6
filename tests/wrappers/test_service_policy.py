"""No silent zero rewards: token end to end, the start-up check, loud fallbacks, strict-mode
consistency and the call budget, against real token-protected / faulty / foreign servers."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from evolve_envs import make_env, open_reward_model
from evolve_envs.integrations.rlinf.stack import build_progress_stack
from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.errors import ErrorKind, RewardServiceError
from evolve_envs.reward.clients.service_check import ServiceUnavailableError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.frame_cache import FrameCache
from evolve_envs.wrappers.progress_reward import ProgressReward
from tests.helpers.synthetic_env import SyntheticProgressEnv

TOKEN = "s3cret-token"
SCRIPT = [0, 5, 10, 20, 40, 30, 20, 25, 30, 40, 50, 60, 70, 80, 90]  # ends at 90 %
SCHEDULE = {"start_step": 4, "call_every": 2, "milestone_every": 4}


@pytest.fixture(scope="module")
def token_service() -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity"}, token=TOKEN).start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def faulty_service() -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity"}, enable_faults=True).start()
    try:
        yield svc
    finally:
        svc.kill()  # requests held by a delay fault would make a graceful stop wait
        svc.stop()


@pytest.fixture()
def faults(faulty_service: EmbeddedService) -> Iterator[str]:
    url = faulty_service.url
    yield url
    httpx.delete(url + "/admin/faults", timeout=5)


@pytest.fixture(scope="module")
def foreign_server() -> Iterator[str]:
    """A real HTTP server that is not a reward service (404 everywhere, HTML body)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = b"<html>not here</html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def build(url: str, kind: str = "progress", pool: EndpointPool | None = None, **rm):
    return make_env(
        env_factory=SyntheticProgressEnv,
        endpoint_pool=pool,
        scripts=[SCRIPT],
        max_episode_steps=14,
        reward_model={
            "enable": True,
            "endpoint": url,
            "kind": kind,
            "timeout": 5.0,
            "max_retries": 0,
            **(SCHEDULE if kind == "progress" else {}),  # the schedule keys are progress keys
            **rm,
        },
    )


def run_episode(env) -> tuple[list[float], list[dict]]:
    env.reset(seed=0)
    rewards, infos = [], []
    while True:
        _, r, term, trunc, info = env.step(env.action_space.sample())
        rewards.append(float(r))
        infos.append(info)
        if term or trunc:
            return rewards, infos


def acc(value: float, critic: float) -> float:
    """Progress accumulation for a non-negative critic (see docs/ARCHITECTURE.md)."""
    return value + (100 - value) * critic / 100


def dead_url() -> str:
    """A loopback URL nobody listens on (a port just released by the OS)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ----------------------------------------------------------------------------- pool ownership


@pytest.mark.parametrize("kind", ["progress", "video_score", "pickle_scorer"])
def test_every_env_opens_its_own_pool_and_closes_it(token_service, kind) -> None:
    a = build(token_service.url, kind, token=TOKEN)
    b = build(token_service.url, kind, token=TOKEN)
    pool_a, pool_b = a.client.pool, b.client.pool
    assert pool_a is not pool_b  # no process-wide registry: endpoint marks cannot leak
    a.close()
    assert pool_a.closed and not pool_b.closed
    b.close()
    assert pool_b.closed


@pytest.mark.parametrize("kind", ["progress", "pickle_scorer"])
def test_a_pool_passed_in_is_shared_and_left_open(token_service, kind) -> None:
    with EndpointPool(token_service.url, token=TOKEN, timeout=5.0, max_retries=0) as pool:
        # the pool's endpoints replace the configured one (here a dead URL)
        envs = [build(dead_url(), kind, pool=pool, binary_reward=False) for _ in range(2)]
        try:
            for env in envs:
                assert env.client.pool is pool
                _, infos = run_episode(env)
                assert infos[-1]["reward_model_errors"] == 0
        finally:
            for env in envs:
                env.close()
        assert not pool.closed and pool.endpoint_stats()[0]["successes"] > 2
    assert pool.closed


# ----------------------------------------------------------------------------- token


@pytest.mark.parametrize("kind", ["progress", "video_score", "pickle_scorer"])
def test_token_is_sent_by_every_client(token_service, kind) -> None:
    env = build(token_service.url, kind, token=TOKEN, binary_reward=False)
    try:
        rewards, infos = run_episode(env)
    finally:
        env.close()
    assert infos[-1]["reward_model_errors"] == 0
    assert sum(rewards) == pytest.approx(0.9, abs=0.011)  # the painted 90 %, not a fallback 0


def test_token_from_the_environment_variable(token_service, monkeypatch) -> None:
    monkeypatch.setenv("EVOLVE_REWARD_TOKEN", TOKEN)
    env = build(token_service.url)
    try:
        rewards, infos = run_episode(env)
    finally:
        env.close()
    assert infos[-1]["progress"] == pytest.approx(90.0, abs=1.0)
    assert sum(rewards) == pytest.approx(infos[-1]["progress"] / 100)


@pytest.mark.parametrize("kind", ["progress", "pickle_scorer"])
@pytest.mark.parametrize("token", [None, "wrong"])
def test_missing_or_wrong_token_fails_at_construction(token_service, kind, token) -> None:
    with pytest.raises(ServiceUnavailableError) as err:
        build(token_service.url, kind, token=token)
    assert err.value.reason == "unauthorized" and err.value.status_code == 401
    assert token_service.url in str(err.value) and "EVOLVE_REWARD_TOKEN" in str(err.value)
    assert "wrong" not in str(err.value)  # the token itself is never printed


def test_token_never_printed_by_the_config(token_service) -> None:
    from evolve_envs import ConfigError, load_config

    cfg = load_config({"reward_model": {"token": TOKEN}}, environ={})
    assert TOKEN not in repr(cfg) and TOKEN not in str(cfg.model_dump(mode="json"))
    assert cfg.reward_model.token_value == TOKEN
    with pytest.raises(ConfigError, match=r"reward_model.token: expected str") as err:
        load_config({"reward_model": {"token": 123456789}}, environ={})
    assert "123456789" not in str(err.value)


# ----------------------------------------------------------------------------- start-up policy


def test_dead_service_fails_at_construction_naming_the_endpoint() -> None:
    url = dead_url()
    with pytest.raises(ServiceUnavailableError) as err:
        build(url)
    assert err.value.reason == "unreachable" and url in str(err.value)


def test_foreign_server_is_a_wrong_protocol(foreign_server) -> None:
    with pytest.raises(ServiceUnavailableError) as err:
        build(foreign_server)
    assert err.value.reason == "wrong_protocol" and foreign_server in str(err.value)
    assert "404" in str(err.value)


def test_episode_scorers_accept_a_server_without_capabilities(foreign_server) -> None:
    # Third-party episode scorers need not serve /capabilities: a 404 there is no refusal.
    env = build(foreign_server, "pickle_scorer")
    env.close()


def test_rlinf_stack_shares_the_policy(token_service) -> None:
    block = {"enable": True, "endpoint": token_service.url, "max_retries": 0}
    with pytest.raises(ServiceUnavailableError, match="unauthorized"):
        build_progress_stack(block, 2, environ={})
    stack = build_progress_stack({**block, "token": TOKEN}, 2, environ={})
    try:
        assert len(stack.trackers) == 2
    finally:
        for fn in stack.on_close:
            fn()


def test_opt_out_is_loud_and_counted(caplog) -> None:
    url = dead_url()
    caplog.set_level(logging.WARNING)
    env = build(url, require_service=False)  # warns instead of raising
    try:
        assert any("require_service is false" in r.getMessage() for r in caplog.records)
        rewards, infos = run_episode(env)
    finally:
        env.close()
    assert rewards == [0.0] * 14 and infos[-1]["reward_model_errors"] == 6
    messages = [r.getMessage() for r in caplog.records]
    assert any("calls," in m and "fallbacks" in m and url in m for m in messages)  # periodic
    assert any("6 of 6 answers failed in this episode" in m for m in messages)  # episode end


def test_rlinf_stack_opt_out_warns(caplog) -> None:
    url = dead_url()
    caplog.set_level(logging.WARNING)
    block = {"enable": True, "endpoint": url, "require_service": False, "max_retries": 0}
    stack = build_progress_stack(block, 2, environ={})
    for fn in stack.on_close:
        fn()
    assert len(stack.trackers) == 2
    assert any("require_service is false" in r.getMessage() and url in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_progress_reward_built_by_hand_opens_its_model_the_one_way(caplog) -> None:
    url = dead_url()
    env = FrameCache(SyntheticProgressEnv(), "agentview_image")
    with pytest.raises(TypeError, match="open_reward_model"):  # a URL is not a reward model
        ProgressReward(env, url)
    with pytest.raises(ServiceUnavailableError, match="unreachable"):
        ProgressReward(env, open_reward_model({"enable": True, "endpoint": url}))
    caplog.set_level(logging.WARNING)
    block = {"enable": True, "endpoint": url, "require_service": False, "max_retries": 0}
    wrapped = ProgressReward(env, open_reward_model(block))
    wrapped.close()
    assert any("require_service is false" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- strict mode


@pytest.mark.parametrize("calls", ["sync", "async"])
def test_strict_mode_survives_a_caught_error(faults, calls) -> None:
    env = build(faults, fail_on_request_error=True, calls=calls, max_lag_steps=0)
    try:
        env.reset(seed=0)
        rewards, caught = [], []
        for t in range(1, 15):
            if t == 8:  # the milestone check at step 8 gets one 503
                spec = {"mode": "status", "status": 503, "count": 1, "routes": ["/pairwise-critic"]}
                httpx.post(faults + "/admin/faults", json=spec, timeout=5).raise_for_status()
            try:
                _, r, term, trunc, info = env.step(env.action_space.sample())
            except RewardServiceError as err:
                caught.append((t, err.status_code))
                continue
            rewards.append(float(r))
            if term or trunc:
                break
        assert caught == [(8, 503)]
        assert trunc and info["reward_model_errors"] == 1
        # Later checks work again. The failed milestone at 8 moved the milestone frame (painted
        # 30) with the held progress (20, from step 6) as its value; 12 and 14 accumulate on it.
        v12 = acc(20.0, 100 * (70 - 30) / (100 - 30))
        expected = acc(v12, 100 * (90 - 70) / (100 - 70))
        assert info["progress"] == pytest.approx(expected, abs=1.0)
        assert sum(rewards) == pytest.approx(info["progress"] / 100)
    finally:
        env.close()


# ----------------------------------------------------------------------------- call budget


@pytest.mark.parametrize("strict", [False, True])
def test_a_hung_service_costs_at_most_the_call_budget(faults, strict) -> None:
    budget = 1.5
    env = build(faults, timeout=20.0, max_retries=3, call_budget_s=budget,
                fail_on_request_error=strict)  # fmt: skip
    hang = {"mode": "delay", "delay_s": 8.0, "routes": ["/pairwise-critic"]}
    try:
        env.reset(seed=0)
        for _ in range(3):
            env.step(env.action_space.sample())
        httpx.post(faults + "/admin/faults", json=hang, timeout=5).raise_for_status()
        start = time.monotonic()
        if strict:
            with pytest.raises(RewardServiceError) as err:
                env.step(env.action_space.sample())  # step 4: the first check hangs
            assert err.value.kind == ErrorKind.TIMEOUT and faults in str(err.value)
        else:
            _, r, _, _, info = env.step(env.action_space.sample())
            assert info["reward_model_fallback"] and info["reward_model_errors"] == 1
            assert r == 0.0
        # the budget bounds the wait (without it: the full 8 s hang, 20 s per attempt)
        assert time.monotonic() - start < budget + 4.0
    finally:
        env.close()
