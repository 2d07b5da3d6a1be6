"""EmbeddedService: run a reward server in a child process on a free loopback port.

The parent binds the socket and hands it to the child (no race for the port); the child logs to
a file named in every error and exits when the parent dies. Whoever starts one stops it.

Example:
    >>> with EmbeddedService("mock", {"latency_ms": 5}) as svc:  # doctest: +SKIP
    ...     httpx.get(svc.url + "/health").json()
    {'status': 'ok', 'backend': 'mock', 'protocol_version': '1'}
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from evolve_envs.reward.protocol.token import TOKEN_ENV, TOKEN_FILE_ENV

__all__ = ["EmbeddedService", "EmbeddedServiceError"]


class EmbeddedServiceError(RuntimeError):
    """The embedded server could not start (or died); the message names its log file."""


class EmbeddedService:
    """A reward server child process on `host` (loopback by default).

    `backend_kwargs` must be JSON-serialisable (a ``mock`` without ``rule`` keeps ``intensity``);
    `token` goes through the environment, not argv; `log_path` defaults to a temporary file kept
    only when the server failed; `preexec_fn` runs in the child (e.g. `resource.setrlimit`).
    """

    def __init__(
        self,
        backend: str = "mock",
        backend_kwargs: dict[str, object] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        enable_faults: bool = False,
        token: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.backend_kwargs = dict(backend_kwargs or {})
        if backend == "mock":  # the library default (MockBackend's), not the command line's
            self.backend_kwargs.setdefault("rule", "intensity")
        self.host = host
        self.requested_port = port
        self.enable_faults = enable_faults
        self.token = token
        self.extra_args = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self._own_log = log_path is None
        self.log_path = Path(log_path) if log_path is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._keep_log = False
        self.preexec_fn = preexec_fn

    # --- properties -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL, e.g. `http://127.0.0.1:40123` (only after `start()`)."""
        if self._port is None:
            raise EmbeddedServiceError("the embedded reward service has not been started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def is_running(self) -> bool:
        """Whether the child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def headers(self) -> dict[str, str]:
        """Request headers the server needs (the bearer token, if any)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the child's output."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # --- lifecycle ------------------------------------------------------------------------------
    def _command(self, fd: int) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "evolve_envs.reward.service",
            "--backend",
            self.backend,
            "--host",
            self.host,
            "--fd",
            str(fd),
            "--exit-on-stdin-eof",
            "--backend-kwargs",
            json.dumps(self.backend_kwargs),
        ]
        if self.enable_faults:
            cmd.append("--enable-fault-injection")
        cmd.extend(self.extra_args)
        return cmd

    def _fail(self, reason: str) -> EmbeddedServiceError:
        self._keep_log = True
        tail = self.log_tail()
        self._terminate(timeout=2.0)
        return EmbeddedServiceError(
            f"embedded reward service ({self.backend}) {reason}; log: {self.log_path}"
            + (f"\n--- last log lines ---\n{tail}" if tail else "")
        )

    def start(self) -> EmbeddedService:
        """Start the child and wait until `GET /health` answers; returns self."""
        if self.is_running():
            return self
        import httpx

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.requested_port or 0))
            sock.listen(2048)
        except OSError as exc:
            sock.close()
            raise EmbeddedServiceError(
                f"cannot bind {self.host}:{self.requested_port or 0}: {exc}"
            ) from exc
        self._port = sock.getsockname()[1]
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"reward-service-{self._port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env["PYTHONUNBUFFERED"] = "1"
        env.pop(TOKEN_FILE_ENV, None)  # the token goes by value, or not at all
        if self.token:
            env[TOKEN_ENV] = self.token
        else:
            env.pop(TOKEN_ENV, None)
        try:
            with open(self.log_path, "ab") as log_file:
                self._proc = subprocess.Popen(
                    self._command(sock.fileno()),
                    stdin=subprocess.PIPE,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    pass_fds=(sock.fileno(),),
                    env=env,
                    start_new_session=True,
                    preexec_fn=self.preexec_fn,
                )
        finally:
            sock.close()

        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0, headers=self.headers(), trust_env=False) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise self._fail(f"exited with status {code} during startup")
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise self._fail(f"did not answer /health within {self.startup_timeout:.0f}s")
                time.sleep(0.05)

    def _terminate(self, timeout: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5.0)
            except ProcessLookupError:
                pass
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        return proc.returncode

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL after `timeout` seconds)."""
        self._terminate(timeout)
        self._cleanup_log()

    def kill(self) -> None:
        """Kill the child at once (SIGKILL), e.g. to test a service dying mid-run.

        A temporary log is removed as by `stop()`; `start()` may be called again.
        """
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5.0)
        self._terminate(timeout=0.1)
        self._cleanup_log()

    def _cleanup_log(self) -> None:
        if self._own_log and not self._keep_log and self.log_path is not None:
            try:
                self.log_path.unlink()
            except OSError:
                pass

    def __enter__(self) -> EmbeddedService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = self.url if self._port is not None else "-"
        return f"EmbeddedService(backend={self.backend!r}, url={where!r}, {state})"
