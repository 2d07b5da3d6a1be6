"""The Ray Serve deployment: replicas, metrics, the handle client, config, the Serve YAMLs."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.ray_handle_pool import RayHandlePool
from evolve_envs.reward.clients.results import CallResult
from evolve_envs.stack.config import RewardModelConfig
from evolve_envs.stack.reward_model import reward_endpoints
from tests.helpers.svc_helpers import painted, painted_b64

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[5]


def _per_replica_metrics(client: httpx.Client, replicas: int = 2) -> dict[int, dict]:
    """The latest `/metrics` snapshot of each replica (asked until every replica answered)."""
    seen: dict[int, dict] = {}
    for _ in range(200):
        snap = client.get("/metrics").json()
        seen[snap["process"]["pid"]] = snap
        if len(seen) == replicas:
            return seen
    raise AssertionError(f"only {len(seen)} of {replicas} replicas answered /metrics")


def _total(snaps: dict[int, dict], *keys: str) -> int:
    out = 0
    for snap in snaps.values():
        node = snap
        for k in keys:
            node = node.get(k, {}) if isinstance(node, dict) else {}
        out += node if isinstance(node, int) else 0
    return out


def test_two_replicas_serve_and_count_every_request(client: httpx.Client) -> None:
    before = _per_replica_metrics(client)
    for _ in range(6):
        assert client.post("/healthcheck").status_code == 200
    resp = client.post("/trajectory-critic", json={"task": "t", "frames": []})
    assert resp.status_code == 422 and resp.json()["error"]
    after = _per_replica_metrics(client)
    assert set(after) == set(before) and len(after) == 2
    assert (
        _total(after, "requests", "/healthcheck") - _total(before, "requests", "/healthcheck") == 6
    )
    errors = _total(after, "errors", "/trajectory-critic")
    assert errors - _total(before, "errors", "/trajectory-critic") == 1
    for snap in after.values():
        assert snap["backend"] == "mock" and snap["batch_window_ms"] == 10
        for lat in snap["latency_ms"].values():
            assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]


def test_long_trajectory_runs_in_bounded_backend_batches(client: httpx.Client) -> None:
    progress = list(range(60))
    frames = [painted_b64(p, size=32) for p in progress]
    before = _per_replica_metrics(client)
    resp = client.post("/trajectory-critic", json={"task": "t", "frames": frames, "skip": 1})
    assert resp.json()["value_list"] == pytest.approx(progress, abs=1e-9)
    after = _per_replica_metrics(client)
    items = _total(after, "batches", "by_kind", "critic", "items")
    assert items - _total(before, "batches", "by_kind", "critic", "items") == 59
    for snap in after.values():
        hist = snap["batches"]["by_kind"].get("critic", {}).get("histogram", {})
        assert max((int(s) for s in hist), default=0) <= 8


def test_handle_client_returns_the_http_clients_results(serve_service, client) -> None:
    frames = [painted(p) for p in (0, 30, 60, 90)]
    with (
        ProgressClient(RayHandlePool("ray://" + serve_service.app_name)) as by_handle,
        ProgressClient(serve_service.url) as by_http,
    ):
        for c in (by_handle, by_http):
            traj = c.trajectory_values("t", frames, skip=1)
            assert isinstance(traj, CallResult) and traj.ok and traj.attempts == 1
            assert traj.value.value_list == pytest.approx([0, 30, 60, 90])
            assert c.pairwise_critic("t", frames[0], frames[2]).value == pytest.approx(60.0)
            done = c.done("t", frames[0], frames[2], painted(97))
            assert (done.value.done, done.value.prob) == (True, pytest.approx(0.97))
        h = by_handle.trajectory_values("t", frames, skip=1)
        w = by_http.trajectory_values("t", frames, skip=1)
        assert type(h.value) is type(w.value) and h.value == w.value
        assert h.endpoint == "ray://reward_test"


def test_handle_errors_are_the_http_errors(serve_service) -> None:
    pool = RayHandlePool("ray://" + serve_service.app_name, max_retries=0)
    with pytest.raises(RewardServiceError) as err:
        pool.request("POST", "/trajectory-critic", json={"task": "t", "frames": []})
    assert err.value.status_code == 422 and err.value.endpoint == "ray://reward_test"
    with ProgressClient(pool, fail_on_request_error=False) as c:
        bad = c.pairwise_critic("__fail__", painted(0), painted(10))
    assert not bad.ok and bad.fallback and "500" in bad.error


def test_ray_actors_call_through_the_handle_and_batches_coalesce(serve_service, client) -> None:
    import ray

    @ray.remote(num_cpus=0)
    class Worker:
        def __init__(self, endpoint: str) -> None:
            from evolve_envs import open_reward_model
            from evolve_envs.stack.config import ProgressModelConfig

            rm = ProgressModelConfig(endpoint=endpoint, enable=True)
            self.client = open_reward_model(rm).client

        def critic(self, level: int) -> tuple[float, str]:
            from evolve_envs.reward.service.backends.mock import paint_level

            a, b = (np.full((64, 64, 3), paint_level(p), np.uint8) for p in (0, level))
            r = self.client.pairwise_critic("t", a, b)
            return r.value, type(self.client.pool).__name__

    # Shipped by value, so the actor works on a Ray started without this folder on its path.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    before = _per_replica_metrics(client)
    workers = [Worker.remote("ray://" + serve_service.app_name) for _ in range(2)]
    out = ray.get([w.critic.remote(i) for i in range(8) for w in workers])
    assert [v for v, _ in out] == [float(i) for i in range(8) for _ in range(2)]
    assert {kind for _, kind in out} == {"RayHandlePool"}
    after = _per_replica_metrics(client)
    key = ("batches", "by_kind", "critic")
    assert _total(after, *key, "items") - _total(before, *key, "items") == 16
    for w in workers:
        ray.kill(w)


def test_concurrent_handle_calls_share_backend_batches(serve_service, client) -> None:
    n = 16
    pool = RayHandlePool("ray://" + serve_service.app_name)
    barrier = threading.Barrier(n)
    results: dict[int, float] = {}
    key = ("batches", "by_kind", "critic")
    before = _per_replica_metrics(client)

    def one(i: int) -> None:
        with ProgressClient(pool) as c:
            barrier.wait()
            results[i] = c.pairwise_critic("t", painted(0), painted(i)).value

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: float(i) for i in range(n)}
    after = _per_replica_metrics(client)
    assert _total(after, *key, "items") - _total(before, *key, "items") == n
    assert _total(after, *key, "count") - _total(before, *key, "count") < n


@pytest.mark.parametrize("name", ["mock.yaml", "vlm.yaml"])
def test_shipped_serve_configs_are_valid(name: str) -> None:
    from ray.serve.schema import ServeDeploySchema

    from evolve_envs.reward.service.hosting.ray_serve import build_app

    cfg = ServeDeploySchema.model_validate(
        yaml.safe_load((ROOT / "evolve_envs/configs/serve" / name).read_text())
    )
    (app,) = cfg.applications
    assert app.import_path == "evolve_envs.reward.service.hosting.ray_serve:build_app"
    built = build_app(app.args)
    assert type(built).__name__ == "Application"


#: run in a Ray of its own: Serve's proxy on every interface (the session's listens on loopback)
PUBLIC_PROXY_SCRIPT = """
import json, os, socket, sys
import httpx, ray
from ray import serve
from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.clients.ray_handle_pool import RayHandlePool
from evolve_envs.reward.service.hosting.ray_serve import build_app

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
serve.start(http_options={"host": "0.0.0.0", "port": port})
out = {}
try:
    serve.run(build_app({"backend": "mock", "num_cpus": 0.25}), name="open", route_prefix="/open")
    out["open"] = "started"
except RuntimeError:
    status = serve.status().applications["open"]
    out["open"] = str(status.status)
    out["open_message"] = status.deployments["RewardDeployment"].message.strip().splitlines()[-1]
app = build_app({"backend": "mock", "num_cpus": 0.25, "token_file": sys.argv[1]})
serve.run(app, name="closed", route_prefix="/closed")
url = f"http://127.0.0.1:{port}/closed/health"  # bound on every interface, asked on loopback
auth = {"Authorization": "Bearer " + sys.argv[2]}
out["http"] = [httpx.get(url, headers=h, trust_env=False).status_code for h in ({}, auth)]
out["handle"] = []
for token in ("", sys.argv[2]):
    try:
        RayHandlePool("ray://closed", token=token, max_retries=0).request("GET", "/health")
        out["handle"].append(200)
    except RewardServiceError as exc:
        out["handle"].append(exc.status_code)
os.environ["EVOLVE_REWARD_TOKEN"] = sys.argv[2]  # the pool's default, as EndpointPool's
out["handle_env"] = RayHandlePool("ray://closed").request("GET", "/health").response.status_code
serve.shutdown()
ray.shutdown()
print("RESULT " + json.dumps(out))
"""


def test_a_public_serve_proxy_needs_a_token_and_handles_carry_it(tmp_path: Path) -> None:
    """The Serve app applies the server's rule: on a proxy bound to 0.0.0.0 a replica without a
    token refuses to start (one line, in `serve status`); with a token file it serves, and HTTP
    requests and handle calls need the token alike."""
    import os
    import subprocess

    token = "serve-secret-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOLVE_REWARD_TOKEN")}
    run = subprocess.run(
        [sys.executable, "-c", PUBLIC_PROXY_SCRIPT, str(token_file), token],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, (run.stdout + run.stderr)[-4000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["open"] == "ApplicationStatus.DEPLOY_FAILED", out
    assert out["open_message"].startswith(
        "evolve_envs.reward.protocol.token.TokenError: the Serve HTTP proxy 0.0.0.0 is not a "
        "loopback address and no bearer token is set"
    ), out
    assert "insecure_no_token: true" in out["open_message"]
    assert out["http"] == [401, 200]
    assert out["handle"] == [401, 200] and out["handle_env"] == 200


def test_build_app_takes_token_sources_not_two_at_once() -> None:
    from evolve_envs.reward.service.hosting.ray_serve import build_app

    assert type(build_app({"backend": "mock", "token_file": "/run/secrets/t"})).__name__ == (
        "Application"
    )  # read by the replicas, where the file is: not here
    with pytest.raises(ValueError, match="both token and token_file"):
        build_app({"backend": "mock", "token": "a", "token_file": "/run/secrets/t"})
    with pytest.raises(ValueError, match="insecure_no_token must be true or false"):
        build_app({"backend": "mock", "insecure_no_token": "yes"})


def test_build_app_rejects_unknown_arguments() -> None:
    from evolve_envs.reward.service.hosting.ray_serve import build_app

    with pytest.raises(ValueError, match="unknown Serve application arguments"):
        build_app({"backend": "mock", "replica": 2})
    with pytest.raises(ValueError, match="needs a 'backend'"):
        build_app({})


def test_ray_endpoint_is_not_an_http_url() -> None:
    rm = RewardModelConfig(endpoint="ray://reward", enable=True)
    assert reward_endpoints(rm) == ["ray://reward"]
    with pytest.raises(ValueError, match="ray://<app_name>"):
        RayHandlePool("http://127.0.0.1:1")


def test_server_cli_engine_ray_deploys_on_a_cluster(serve_service, client, tmp_path) -> None:
    """`evolve-reward-server --engine ray --address ...` adds an app, removes it on exit."""
    import subprocess
    import sys
    import time

    import ray

    port = int(serve_service.url.rsplit(":", 1)[1])
    cmd = [
        sys.executable,
        "-m",
        "evolve_envs.cli.serve",
        "--engine",
        "ray",
        "--backend",
        "mock",
    ]
    cmd += ["--address", ray.get_runtime_context().gcs_address, "--app-name", "cli"]
    cmd += ["--route-prefix", "/cli", "--replicas", "1", "--num-cpus", "0.25"]
    cmd += ["--port", str(port), "--exit-on-stdin-eof", "--backend-kwargs", '{"rule": "intensity"}']
    log = tmp_path / "server.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=err, text=True)
    try:
        for _ in range(600):
            if "evolve-reward-server: " in log.read_text() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert "Ray Serve app 'cli', 1 replicas" in log.read_text(), log.read_text()[-2000:]
        assert client.get("/cli/capabilities").json()["backend"] == "mock"
        body = {"task": "t", "image_a": painted_b64(10), "image_b": painted_b64(55)}
        assert client.post("/cli/pairwise-critic", json=body).json()["critic"] == 50.0
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    from ray import serve

    assert "cli" not in serve.status().applications


def test_missing_app_fails_fast_with_a_clear_error(serve_service) -> None:
    import time

    pool = RayHandlePool("ray://no_such_app", timeout=30, max_retries=1)
    t = time.monotonic()
    with pytest.raises(RewardServiceError) as err:
        pool.request("GET", "/capabilities")
    assert time.monotonic() - t < 10
    assert err.value.kind == "connect" and err.value.endpoint == "ray://no_such_app"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--resources", "[1]", "--resources must be a JSON object"),
        ("--resources", "{reward", "--resources is not valid JSON"),
        ("--autoscaling", "3", "--autoscaling must be a JSON object"),
    ],
)
def test_json_options_are_checked_before_ray_starts(option: str, value: str, message: str) -> None:
    import subprocess

    server = Path(sys.executable).parent / "evolve-reward-server"
    run = subprocess.run(
        [str(server), "--engine", "ray", "--backend", "mock", option, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
