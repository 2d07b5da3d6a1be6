"""The console script starts a server whose OpenAPI page lists every route."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.service.svc_helpers import free_port

ROUTES = {
    ("/health", "get"),
    ("/healthcheck", "post"),
    ("/capabilities", "get"),
    ("/trajectory-critic", "post"),
    ("/pairwise-critic", "post"),
    ("/done", "post"),
    ("/score", "post"),
    ("/pickle", "post"),
    ("/", "post"),
    ("/metrics", "get"),
    ("/admin/faults", "post"),
    ("/admin/faults", "delete"),
}


def _script() -> list[str]:
    exe = Path(sys.executable).parent / "evolve-reward-server"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("evolve-reward-server")
    return [found] if found else [sys.executable, "-m", "evolve_envs.reward.service.server"]


def test_console_script_serves_openapi_with_every_route(tmp_path: Path) -> None:
    port = free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        _script()
        + [
            "--backend",
            "mock",
            "--port",
            str(port),
            "--gpu-ids",
            "0",
            "--pickle-at-root",
            "--enable-fault-injection",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        spec = httpx.get(url + "/openapi.json", trust_env=False).json()
        listed = {(path, method) for path, ops in spec["paths"].items() for method in ops}
        assert ROUTES <= listed, ROUTES - listed
        assert httpx.get(url + "/docs", trust_env=False).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        log.close()
    text = (tmp_path / "server.log").read_text()
    assert "backend 'mock' on http://127.0.0.1:" in text
    assert "Finished server process" in text


def test_server_warns_when_exposed_without_token(tmp_path: Path) -> None:
    # --help-like dry check of the safety warning: bind all interfaces without a token.
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "EVOLVE_REWARD_TOKEN"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evolve_envs.reward.service.server",
            "--backend",
            "mock",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if (
                    httpx.get(
                        f"http://127.0.0.1:{port}/health", timeout=1, trust_env=False
                    ).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert b"without a bearer token" in out


@pytest.mark.parametrize("flag", ["--help"])
def test_module_entry_point_help(flag: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.reward.service.server", flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--backend" in proc.stdout and "--ckpt-path" in proc.stdout
