"""`evolve-reward-launch`: one reward server per GPU on consecutive ports, supervised until
SIGINT or SIGTERM (docs/reward-service.md); the token reaches the servers through their
environment, never their command lines.

Usage::

    evolve-reward-launch --backend mock --gpu-ids 0,1 -- --batch-window-ms 10

starts two servers (a :class:`ServerProcess` each), on ports 8111 and 8112:

>>> args = build_parser().parse_args(["--backend", "mock", "--gpu-ids", "0,1", "--", "-q"])
>>> args.base_port, args.gpu_ids, args.server_args
(8111, '0,1', ['-q'])
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from evolve_envs.reward.protocol.token import TOKEN_ENV, TOKEN_FILE_ENV, TokenError, resolve_token
from evolve_envs.reward.service.backends import BACKENDS
from evolve_envs.reward.service.hosting.serve_options import add_token_arguments
from evolve_envs.reward.service.limits import admission_for
from evolve_envs.reward.service.middleware.auth import check_exposure

__all__ = ["main", "build_parser", "ServerProcess"]


@dataclass
class ServerProcess:
    """One launched server: its GPU, port, process and log file."""

    gpu_id: str
    port: int
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path | None
    reported_dead: bool = False


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of `evolve-reward-launch`."""
    p = argparse.ArgumentParser(
        prog="evolve-reward-launch",
        description="Start one reward server per GPU on consecutive ports and supervise them.",
    )
    p.add_argument("--backend", required=True, choices=sorted(BACKENDS))
    p.add_argument("--base-port", type=int, default=8111, help="port of the first server")
    p.add_argument("--gpu-ids", default="0", help="comma-separated GPU ids, one server each")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--ckpt-path", default=None, help="model path (default $VLAC_CKPT_PATH)")
    p.add_argument(
        "--backend-kwargs",
        default="{}",
        help="JSON backend arguments ('${NAME}' values: the environment variable NAME)",
    )
    p.add_argument(
        "--backend-kwargs-file",
        default=None,
        metavar="PATH",
        help="JSON file of backend arguments (e.g. an API key), passed to the servers by path",
    )
    add_token_arguments(p)
    p.add_argument(
        "--startup-timeout", type=float, default=900.0, help="seconds to wait for all servers"
    )
    p.add_argument(
        "--log-dir", default=None, help="write each server's output to LOG_DIR/server-PORT.log"
    )
    p.add_argument("--stop-timeout", type=float, default=15.0, help="grace period on shutdown")
    p.add_argument(
        "--for-envs",
        type=int,
        default=None,
        metavar="N",
        help="size each server's admission limit for N rollout envs in all: its share of what "
        "they can send at once (docs/sizing.md); an explicit --max-concurrent-requests after -- "
        "wins",
    )
    p.add_argument("server_args", nargs="*", help="after --: extra evolve-reward-server args")
    return p


def _parse_gpu_ids(text: str) -> list[str]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not ids:
        raise ValueError("--gpu-ids needs at least one id")
    if len(set(ids)) != len(ids):
        raise ValueError(f"--gpu-ids has duplicates: {text}")
    return ids


def _admission_args(args: argparse.Namespace, servers: int) -> list[str]:
    """``--max-concurrent-requests K`` for ``--for-envs N`` (none when the server args set it).

    >>> _admission_args(build_parser().parse_args(["--backend", "mock", "--for-envs", "96"]), 2)
    ['--max-concurrent-requests', '384']
    """
    if args.for_envs is None or any(
        a.startswith("--max-concurrent-requests") for a in args.server_args
    ):
        return []
    if args.for_envs < 1:
        raise ValueError(f"--for-envs must be >= 1, got {args.for_envs}")
    return ["--max-concurrent-requests", str(admission_for(args.for_envs, servers))]


def _say(message: str) -> None:
    print(f"evolve-reward-launch: {message}", file=sys.stderr, flush=True)


def _start(args: argparse.Namespace, gpu_ids: list[str]) -> list[ServerProcess]:
    host_for_url = f"[{args.host}]" if ":" in args.host else args.host
    if args.host in ("0.0.0.0", "::"):
        host_for_url = "127.0.0.1"
    log_dir = Path(args.log_dir) if args.log_dir else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    servers = []
    for i, gpu_id in enumerate(gpu_ids):
        port = args.base_port + i
        cmd = [
            sys.executable,
            "-m",
            "evolve_envs.reward.service",
            "--backend",
            args.backend,
            "--host",
            args.host,
            "--port",
            str(port),
            "--backend-kwargs",
            args.backend_kwargs,
            "--exit-on-stdin-eof",
        ]
        if args.ckpt_path:
            cmd += ["--ckpt-path", args.ckpt_path]
        if args.backend_kwargs_file:
            cmd += ["--backend-kwargs-file", args.backend_kwargs_file]
        if args.insecure_no_token:
            cmd.append("--insecure-no-token")
        cmd += _admission_args(args, len(gpu_ids))
        cmd += list(args.server_args)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu_id, PYTHONUNBUFFERED="1")
        env.pop(TOKEN_FILE_ENV, None)  # the token goes by value, in the environment only
        if args.token:
            env[TOKEN_ENV] = args.token
        else:
            env.pop(TOKEN_ENV, None)
        log_path = None
        out: IO[bytes] | None = None
        if log_dir is not None:
            log_path = log_dir / f"server-{port}.log"
            out = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                env=env,
                start_new_session=True,
            )
        finally:
            if out is not None:
                out.close()
        servers.append(ServerProcess(gpu_id, port, f"http://{host_for_url}:{port}", proc, log_path))
    return servers


def _stop(servers: Sequence[ServerProcess], timeout: float) -> None:
    for s in servers:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for s in servers:
        try:
            s.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait(timeout=5)
        if s.proc.stdin is not None:
            s.proc.stdin.close()


def _describe_death(s: ServerProcess) -> str:
    where = f"; log: {s.log_path}" if s.log_path else ""
    return f"server on port {s.port} (GPU {s.gpu_id}) exited with status {s.proc.returncode}{where}"


def _wait_healthy(
    servers: Sequence[ServerProcess],
    timeout: float,
    headers: dict[str, str],
    stopping: Callable[[], bool],
) -> str | None:
    """None when all answer /health; else the reason they did not."""
    import httpx

    pending = {s.port: s for s in servers}
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0, headers=headers, trust_env=False) as client:
        while pending:
            if stopping():
                return "interrupted"
            for port, s in list(pending.items()):
                if s.proc.poll() is not None:
                    return _describe_death(s)
                try:
                    if client.get(s.url + "/health").status_code == 200:
                        del pending[port]
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                return f"servers on ports {sorted(pending)} not healthy after {timeout:.0f}s"
            time.sleep(0.1)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `evolve-reward-launch`; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        gpu_ids = _parse_gpu_ids(args.gpu_ids)
        kwargs = json.loads(args.backend_kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("--backend-kwargs must be a JSON object")
    except (ValueError, json.JSONDecodeError) as exc:
        parser.error(str(exc))
    if not 0 < args.base_port <= 65535 - len(gpu_ids) + 1:
        parser.error(f"--base-port {args.base_port} leaves no room for {len(gpu_ids)} ports")
    try:
        token = resolve_token(args.token, args.token_file)
        check_exposure(args.host, token, args.insecure_no_token)
    except TokenError as exc:  # one line, before any server starts
        print(f"evolve-reward-launch: error: {exc}", file=sys.stderr, flush=True)
        return 2
    args.token = token

    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    servers = _start(args, gpu_ids)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        problem = _wait_healthy(servers, args.startup_timeout, headers, lambda: bool(received))
        if problem is not None:
            _say(f"startup failed: {problem}; stopping all servers")
            return 0 if problem == "interrupted" else 1
        lines = [f"{len(servers)} {args.backend} server(s) ready:"]
        for s in servers:
            lines.append(f"  {s.url}  (CUDA_VISIBLE_DEVICES={s.gpu_id}, pid {s.proc.pid})")
        _say("\n".join(lines))
        print(f"export VLAC_SERVICE_URL={servers[0].url}", flush=True)
        print(f"export VLAC_SERVICE_NUM={len(servers)}", flush=True)
        while not received:
            alive = 0
            for s in servers:
                if s.proc.poll() is None:
                    alive += 1
                elif not s.reported_dead:
                    s.reported_dead = True
                    _say(_describe_death(s))
            if alive == 0:
                _say("no server left; exiting")
                return 1
            time.sleep(0.2)
        _say(f"received {signal.Signals(received[0]).name}; stopping {len(servers)} server(s)")
        return 0
    finally:
        _stop(servers, args.stop_timeout)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
