"""EmbeddedService: lifecycle, kill, token, and the child dying with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService, EmbeddedServiceError
from tests.helpers.svc_helpers import TOKEN


def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split()[2] == "Z":
            return True
        time.sleep(0.05)
    return False


def test_url_before_start_is_an_error() -> None:
    with pytest.raises(EmbeddedServiceError, match="not been started"):
        _ = EmbeddedService().url


def test_context_manager_kill_and_stop() -> None:
    with EmbeddedService("mock", token=TOKEN) as svc:
        assert svc.is_running() and svc.url.startswith("http://127.0.0.1:")
        assert httpx.get(svc.url + "/health", trust_env=False).status_code == 401
        ok = httpx.get(svc.url + "/health", headers=svc.headers(), trust_env=False)
        assert ok.json()["status"] == "ok"
        log_path = svc.log_path
        assert log_path is not None and "backend 'mock'" in svc.log_tail()
        pid = svc.pid
        svc.kill()
        assert not svc.is_running() and _gone(pid)
        assert not log_path.exists()
        with pytest.raises(httpx.ConnectError):
            httpx.get(svc.url + "/health", trust_env=False, timeout=2)


def test_restart_after_stop_serves_again() -> None:
    svc = EmbeddedService("mock")
    svc.start()
    first = svc.url
    svc.stop()
    svc.start()
    try:
        assert httpx.get(svc.url + "/health", trust_env=False).status_code == 200
        assert svc.url.startswith("http://127.0.0.1:") and first
    finally:
        svc.stop()


def test_child_exits_when_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from evolve_envs.reward.service.hosting.embedded import EmbeddedService
            svc = EmbeddedService("mock").start()
            print(svc.pid, svc.url, flush=True)
            time.sleep(600)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child_pid, url = parent.stdout.readline().split()
        assert httpx.get(url + "/health", trust_env=False).status_code == 200
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _gone(int(child_pid)), "server outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
