"""Expected failures of the command-line tools, from a user's seat: the real console scripts in
subprocesses against real reward servers (dead, foreign, killed mid-run, port taken). Each
failure is one line on stderr naming the cause and the fix, with its own exit status, and a run
that cannot start writes nothing.

ReachPlace (``--config reach_place``, 50-step episodes) keeps every run to seconds.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.svc_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICE, USAGE, DEGRADED = 3, 2, 4

#: A policy that kills the reward server (pid in $KILL_PID) at its $KILL_AT-th call, then waits
#: until the port refuses connections; it moves the gripper at random otherwise.
KILLER_POLICY = """
import os, signal, socket, time
import numpy as np

calls = 0
rng = np.random.default_rng(0)


def act(obs):
    global calls
    calls += 1
    if calls == int(os.environ["KILL_AT"]):
        os.kill(int(os.environ["KILL_PID"]), signal.SIGKILL)
        port = int(os.environ["KILL_PORT"])
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            except OSError:
                break
            time.sleep(0.02)
    return rng.uniform(-1, 1, 2).astype(np.float32)
"""


def run_cli(
    args: list[str], *, env: dict[str, str] | None = None, module: str = "evolve_envs.cli.main"
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "EVOLVE_ENVS_DEBUG"}
    full_env.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], prog: str, *words: str) -> str:
    """stderr ends with exactly one ``<prog>: error: ...`` line holding ``words``; no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def start_server(log: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """`evolve-reward-server --backend mock` (rule reach_place) on ``port``, answering /health."""
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "evolve_envs.cli.serve", "--backend", "mock",
         "--backend-kwargs", '{"rule": "reach_place"}', "--port", str(port), *extra],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


ROLLOUT = ["rollout", "--config", "reach_place", "--no-video", "--no-progress-bar"]
FAST_FAILURE = ["reward_model.max_retries=0", "reward_model.timeout=5"]


# ------------------------------------------------------------------ 1 + 2: before anything runs


@pytest.fixture(scope="module")
def foreign_url() -> Iterator[str]:
    """A real HTTP server that is not a reward service (every GET is a 404 page)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_dead_service_is_one_line_nothing_written_and_debug_shows_the_traceback(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    dead = f"reward_model.endpoint=http://127.0.0.1:{free_port()}"
    proc = run_cli([*ROLLOUT, "--out", str(out), dead])
    assert proc.returncode == SERVICE
    assert_one_line(proc, "evolve-envs rollout", "unreachable", "is the service running")
    assert not out.exists()
    debug = run_cli([*ROLLOUT, "--out", str(out), dead], env={"EVOLVE_ENVS_DEBUG": "1"})
    assert debug.returncode == SERVICE and "Traceback" in debug.stderr
    assert "ServiceUnavailableError" in debug.stderr and not out.exists()


def test_train_with_a_dead_service_is_one_line_before_ray_starts(tmp_path: Path) -> None:
    run_dir = tmp_path / "train"
    dead = f"reward_model.endpoint=http://127.0.0.1:{free_port()}"
    proc = run_cli(["train", "--config", "reach_place", "--run-dir", str(run_dir), dead])
    assert proc.returncode == SERVICE
    assert_one_line(proc, "evolve-envs train", "unreachable", "is the service running")
    assert not run_dir.exists() and "Ray" not in proc.stderr


def test_foreign_service_is_one_line_and_nothing_written(tmp_path: Path, foreign_url: str) -> None:
    out = tmp_path / "run"
    proc = run_cli([*ROLLOUT, "--out", str(out), f"reward_model.endpoint={foreign_url}"])
    assert proc.returncode == SERVICE
    assert_one_line(proc, "evolve-envs rollout", "wrong_protocol", "check the endpoint")
    assert not out.exists() and not (tmp_path / "runs").exists()
    calibrate = run_cli(
        ["calibrate", "--service", foreign_url, "--threshold", "0.95", str(tmp_path)]
    )
    assert calibrate.returncode == SERVICE
    assert_one_line(calibrate, "evolve-envs calibrate", "wrong_protocol")


def test_bad_input_fails_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cases = [
        (["reward_model.endpoint=gpu-1:8111"], "reward_model.endpoint"),
        (["--task-id", "7"], "env.task_id"),
        (["reward_model.call_evry=3"], "did you mean 'call_every'"),
        (["reward_model.calls=deferred"], "calls: sync or async"),
    ]
    for extra, words in cases:
        proc = run_cli([*ROLLOUT, "--out", str(out), *extra])
        assert proc.returncode == USAGE, (extra, proc.stderr[-2000:])
        assert_one_line(proc, "evolve-envs rollout", words)
        assert not out.exists()


def test_record_without_pyarrow_fails_before_the_first_episode(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    out, rec = tmp_path / "run", tmp_path / "rec"
    proc = run_cli(
        [*ROLLOUT, "--out", str(out), "--record", str(rec)],
        env={"PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT}"},
    )
    assert proc.returncode == USAGE
    assert_one_line(proc, "evolve-envs rollout", "pip install 'evolve-envs[record]'")
    assert not out.exists() and not rec.exists()


# ------------------------------------------------------------------ 3: the service dies mid-run


def killed_mid_run(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Roll out 3 episodes against a real server that is SIGKILLed at step 60 (episode 1)."""
    (tmp_path / "killer.py").write_text(KILLER_POLICY)
    port = free_port()
    server = start_server(tmp_path / "server.log", port)
    out = tmp_path / "run"
    try:
        proc = run_cli(
            [*ROLLOUT, "--episodes", "3", "--policy", "killer:act", "--out", str(out),
             f"reward_model.endpoint=http://127.0.0.1:{port}", *FAST_FAILURE, *extra],
            env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "KILL_PID": str(server.pid),
                 "KILL_AT": "60", "KILL_PORT": str(port)},
        )  # fmt: skip
    finally:
        stop(server)
    return proc, out


def test_service_killed_mid_run_degrades_the_run_and_says_so(tmp_path: Path) -> None:
    proc, out = killed_mid_run(tmp_path)
    assert proc.returncode == DEGRADED, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("degraded: 2 of 3 episode(s) got fallback rewards"), last
    assert "because the reward service failed" in last
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["stop_reason"] == "completed"
    deg = summary["degraded"]
    assert deg["episodes"] == 2 and deg["of_episodes"] == 3 and deg["fallback_steps"] > 0
    assert deg["reason"] and f"{deg['fallback_steps']} step(s)" in last
    eps = summary["episodes"]
    assert [e["stop_reason"] for e in eps] == ["time_limit"] * 3 or all(
        e["stop_reason"] in ("time_limit", "terminated", "model_done") for e in eps
    )
    assert eps[0]["fallback_steps"] == 0 and eps[1]["fallback_steps"] > 0


def test_service_killed_mid_run_in_strict_mode_stops_with_one_line(tmp_path: Path) -> None:
    proc, out = killed_mid_run(tmp_path, "reward_model.fail_on_request_error=true")
    assert proc.returncode == SERVICE, proc.stderr[-3000:]
    line = assert_one_line(
        proc, "evolve-envs rollout", "failed mid-run (strict mode)", "fail_on_request_error=false"
    )
    assert "1 finished episode(s) kept" in line
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["complete"] and summary["stop_reason"] == "reward_service_failed"
    assert [e["stop_reason"] for e in summary["episodes"]] != []
    unfinished = summary["unfinished_episodes"]
    assert [e["episode"] for e in unfinished] == [1]
    assert unfinished[0]["stop_reason"] == "reward_service_failed"


def test_strict_mode_stop_with_subprocess_envs_is_one_line_too(tmp_path: Path) -> None:
    # AsyncVectorEnv reports a worker's error with its traceback before re-raising it here
    proc, out = killed_mid_run(
        tmp_path, "--num-envs", "2", "reward_model.fail_on_request_error=true"
    )
    assert proc.returncode == SERVICE, proc.stderr[-3000:]
    assert_one_line(proc, "evolve-envs rollout", "failed mid-run (strict mode)")
    assert "ERROR:" not in proc.stderr and "Worker-" not in proc.stderr, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "reward_service_failed"
    assert [e["episode"] for e in summary["unfinished_episodes"]] == [0, 1]  # 30 steps each


def test_ctrl_c_is_a_stop_reason(tmp_path: Path) -> None:
    (tmp_path / "ctrl_c.py").write_text(
        "import numpy as np\ncalls = 0\n\n\ndef act(obs):\n    global calls\n    calls += 1\n"
        "    if calls == 70:\n        raise KeyboardInterrupt\n"
        "    return np.zeros(2, np.float32)\n"
    )
    out = tmp_path / "run"
    args = [*ROLLOUT, "--episodes", "3", "--policy", "ctrl_c:act", "--out", str(out)]
    proc = run_cli(
        [*args, "reward_model.call_every=5"],
        env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
    )
    assert proc.returncode == 130 and "Traceback" not in proc.stderr
    assert "interrupted; 1 finished episode(s) kept" in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and summary["stop_reason"] == "interrupted"
    assert summary["config"]["reward_model"]["call_every"] == 5  # the KEY=VALUE override
    assert summary["episodes"][0]["reward_model_calls"] == 10  # a check every 5 of 50 steps
    assert [e["stop_reason"] for e in summary["episodes"]] == ["time_limit"]
    assert [(e["episode"], e["stop_reason"]) for e in summary["unfinished_episodes"]] == [
        (1, "interrupted")
    ]


# ------------------------------------------------------------------ 4: the server starts cleanly


def test_server_refuses_bad_port_and_host_in_one_line() -> None:
    prog = "evolve-reward-server"
    mod = "evolve_envs.cli.serve"
    for args, words in [
        (["--port", "99999"], "--port 99999 is not a TCP port"),
        (["--host", "no-such-host.invalid"], "--host 'no-such-host.invalid'"),
    ]:
        proc = run_cli(["--backend", "mock", *args], module=mod)
        assert proc.returncode == USAGE, proc.stderr[-2000:]
        assert_one_line(proc, prog, words)


def test_server_port_taken_fails_before_loading_the_backend() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # a backend that cannot load: the port is checked first, so the port is what is reported
        proc = run_cli(
            ["--backend", "vlm", "--ckpt-path", "/nonexistent/model", "--port", str(port)],
            module="evolve_envs.cli.serve",
        )
    assert proc.returncode == SERVICE, proc.stderr[-2000:]
    assert_one_line(proc, "evolve-reward-server", f"port {port} on 127.0.0.1 is taken")
    assert "startup complete" not in proc.stderr and "cannot start backend" not in proc.stderr


def test_server_ready_line_means_it_serves(tmp_path: Path) -> None:
    import httpx

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evolve_envs.cli.serve", "--backend", "mock",
         "--port", str(port)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("evolve-reward-server: backend 'mock' on"):
                break
        else:
            pytest.fail("".join(seen))
        # no retry loop: the line is printed once the server answers
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        assert f"http://127.0.0.1:{port}" in seen[-1]
    finally:
        stop(proc)  # type: ignore[arg-type]
