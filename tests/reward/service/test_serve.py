"""`evolve-reward-launch` with the mock backend and two "GPU ids" on loopback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from evolve_envs.reward.protocol.token import TOKEN_ENV, TOKEN_FILE_ENV
from tests.helpers.svc_helpers import free_port, painted_b64


def _read_exports(proc: subprocess.Popen[str], timeout: float = 90) -> dict[str, str]:
    exports: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(exports) < 2:
        assert time.monotonic() < deadline, "launcher did not report its endpoints"
        line = proc.stdout.readline()
        assert line, f"launcher exited early with {proc.wait()}"
        if line.startswith("export "):
            key, _, value = line[len("export ") :].strip().partition("=")
            exports[key] = value
    return exports


def _base_port() -> int:
    for _ in range(20):
        port = free_port()
        if port < 65000:
            import socket

            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    pytest.skip("no two consecutive free ports")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_launcher_two_servers_pinned_and_stopped(tmp_path: Path, stop_signal: int) -> None:
    base = _base_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evolve_envs.cli.launch",
            "--backend",
            "mock",
            "--base-port",
            str(base),
            "--gpu-ids",
            "3,5",
            "--backend-kwargs",  # painted frames: the intensity rule (the CLI default is change)
            '{"rule": "intensity"}',
            "--log-dir",
            str(tmp_path),
            "--",
            "--batch-window-ms",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        exports = _read_exports(proc)
        assert exports == {"VLAC_SERVICE_URL": f"http://127.0.0.1:{base}", "VLAC_SERVICE_NUM": "2"}
        pids = []
        for i, gpu in enumerate(("3", "5")):
            url = f"http://127.0.0.1:{base + i}"
            assert httpx.get(url + "/health", trust_env=False).json()["backend"] == "mock"
            body = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(25)}
            assert httpx.post(url + "/pairwise-critic", json=body, trust_env=False).json() == {
                "critic": 25.0
            }
            metrics = httpx.get(url + "/metrics", trust_env=False).json()
            assert metrics["batch_window_ms"] == 1.0  # arguments after -- reached the server
            # Each server was pinned to its own GPU id.
            assert metrics["process"]["cuda_visible_devices"] == gpu
            pid = metrics["process"]["pid"]
            pids.append(pid)
        proc.send_signal(stop_signal)
        assert proc.wait(timeout=60) == 0
        stderr = proc.stderr.read()
        assert "2 mock server(s) ready" in stderr and "stopping 2 server(s)" in stderr
        for pid in pids:
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (
                not Path(f"/proc/{pid}").exists()
                or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
            )
        assert (tmp_path / f"server-{base}.log").exists()
        assert (tmp_path / f"server-{base + 1}.log").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_launcher_reports_a_server_that_cannot_start(tmp_path: Path) -> None:
    base = _base_port()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolve_envs.cli.launch",
            "--backend",
            "mock",
            "--base-port",
            str(base),
            "--gpu-ids",
            "0,1",
            "--backend-kwargs",
            '{"rule": "bogus"}',
            "--log-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert proc.returncode == 1
    assert "startup failed" in proc.stderr and "exited with status 2" in proc.stderr
    # it names the log of the server that died first (either one: both are refused, and the
    # launcher stops the other, which may not have written its error yet)
    named = re.search(r"server-(\d+)\.log", proc.stderr)
    assert named is not None and int(named.group(1)) in (base, base + 1)
    assert "bogus" in (tmp_path / named.group(0)).read_text()


def test_launcher_rejects_bad_gpu_ids() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolve_envs.cli.launch",
            "--backend",
            "mock",
            "--gpu-ids",
            "0,0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "duplicates" in proc.stderr


def _env_without_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}


def test_launcher_refuses_a_public_host_without_a_token_before_starting_servers() -> None:
    base = _base_port()
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.cli.launch", "--backend", "mock",
         "--host", "0.0.0.0", "--base-port", str(base), "--gpu-ids", "0,1"],
        capture_output=True, text=True, timeout=60, env=_env_without_token(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evolve-reward-launch: error: --host 0.0.0.0")
    assert "--insecure-no-token" in lines[0] and "--token-file" in lines[0]
    assert proc.stdout == ""  # no endpoints: no server was started


def test_launcher_token_file_reaches_the_servers_off_their_command_lines(tmp_path: Path) -> None:
    token = "launch-secret-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    base = _base_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evolve_envs.cli.launch", "--backend", "mock",
         "--base-port", str(base), "--gpu-ids", "0", "--token-file", str(token_file),
         "--log-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env_without_token(),
    )  # fmt: skip
    try:
        exports = _read_exports(proc)
        url = exports["VLAC_SERVICE_URL"]
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(url + "/health", trust_env=False).status_code == 401
        metrics = httpx.get(url + "/metrics", headers=auth, trust_env=False).json()
        server_pid = metrics["process"]["pid"]
        for pid in (proc.pid, server_pid):
            assert token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert token not in (tmp_path / f"server-{base}.log").read_text()
