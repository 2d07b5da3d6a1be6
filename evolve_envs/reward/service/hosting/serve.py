"""`evolve-reward-server`: serve one reward backend over HTTP with uvicorn (or Ray Serve).

Checks the arguments (exit status 2), binds the port (taken: 3), loads the backend, then prints
the ready line; docs/reward-service.md describes the options and the closed-by-default rule.

Usage::

    evolve-reward-server --backend mock --port 8111
    python -m evolve_envs.reward.service --backend mock --backend-kwargs '{"latency_ms": 20}'
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evolve_envs.reward.service.hosting.serve_options import (
    SERVICE,
    USAGE,
    ServeError,
    app_kwargs,
    backend_kwargs,
    build_parser,
    check_bind_args,
    json_object,
    server_token,
)
from evolve_envs.reward.service.limits import limits_from_args

if TYPE_CHECKING:
    import uvicorn

    from evolve_envs.reward.service.backends.base import Backend

__all__ = ["PROG", "main", "run_program"]

PROG = "evolve-reward-server"
#: Set to 1 (or true/yes/on) to see the traceback of expected failures, as ``--debug`` does.
DEBUG_ENV = "EVOLVE_ENVS_DEBUG"
#: Ctrl-C (128 + SIGINT)
INTERRUPTED = 130

log = logging.getLogger("evolve_envs.reward.service.hosting.serve")


def _watch_stdin_then_exit() -> None:
    """Terminate this process when stdin reaches EOF (the parent process has gone)."""

    def watch() -> None:
        try:
            while os.read(0, 65536):  # raw fd read: no buffer lock held at interpreter exit
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _settings(backend: Backend) -> str:
    """The backend's plain settings (public attributes holding simple values), for the log."""
    simple = (str, int, float, bool, tuple, list, type(None))
    items = {
        k: v
        for k, v in sorted(vars(backend).items())
        if not k.startswith("_") and isinstance(v, simple)
    }
    return "{" + ", ".join(f"{k}={v!r}" for k, v in items.items()) + "}"


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound before any model is loaded; a port that is
    taken or an address this machine does not have is one line
    (:class:`~evolve_envs.reward.service.hosting.serve_options.ServeError`, status 3)."""
    import errno

    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(
                f"port {port} on {host} is taken by another process; pick another --port or "
                f"stop that process (e.g. `lsof -i :{port}` names it)",
                SERVICE,
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ServeError(
                f"--host {host} is not an address of this machine; use 127.0.0.1 (this machine "
                "only) or 0.0.0.0 (every interface)",
                USAGE,
            ) from None
        if exc.errno == errno.EACCES:
            raise ServeError(
                f"no permission to bind port {port} (ports below 1024 need privileges); pick "
                "a --port above 1023",
                USAGE,
            ) from None
        raise ServeError(f"cannot bind {host}:{port}: {exc.strerror or exc}", SERVICE) from None
    sock.set_inheritable(False)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `evolve-reward-server`; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_program(lambda: _run(args, parser), debug=args.debug)


def run_program(fn: Callable[[], int], *, debug: bool = False) -> int:
    """Run ``fn``; an expected start-up failure prints one line and returns its status.

    >>> import contextlib, io
    >>> def taken() -> int:
    ...     raise ServeError("port 8111 on 127.0.0.1 is taken", SERVICE)
    >>> with contextlib.redirect_stderr(io.StringIO()):
    ...     run_program(taken)
    3
    """
    show = debug or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    try:
        return fn()
    except KeyboardInterrupt:
        if show:
            traceback.print_exc()
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (ServeError, ValueError, FileNotFoundError, ImportError) as exc:
        if show:
            traceback.print_exc()
        line = "; ".join(part.strip() for part in str(exc).splitlines() if part.strip())
        print(f"{PROG}: error: {line}", file=sys.stderr)
        return exc.status if isinstance(exc, ServeError) else USAGE


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    check_bind_args(args)
    token = server_token(args)  # before anything binds or loads
    if args.gpu_ids is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu_ids
    kwargs = backend_kwargs(args, parser)
    if args.exit_on_stdin_eof:
        _watch_stdin_then_exit()

    if args.engine == "ray":
        if args.address is None:  # a local Ray: a taken port fails now, not after Ray starts
            _bind(args.host, args.port).close()  # (on a cluster, Serve's proxy may hold it)
        return _serve_on_ray(args, parser, kwargs, token)

    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        sock = _bind(args.host, args.port)  # before the (possibly slow) backend loads

    import uvicorn

    from evolve_envs.reward.service.app import create_app
    from evolve_envs.reward.service.backends import make_backend
    from evolve_envs.reward.service.hosting.connections import (
        bounded_h11_protocol,
        connection_cap,
        listen_backlog,
    )

    try:
        backend = make_backend(args.backend, **kwargs)
    except Exception as exc:  # noqa: BLE001 - report any construction failure plainly
        sock.close()
        print(
            f"evolve-reward-server: cannot start backend {args.backend!r}: {exc}", file=sys.stderr
        )
        return 2
    app = create_app(backend, **app_kwargs(args, token))
    limits = limits_from_args(args)
    max_connections = connection_cap(limits.max_connections, limits.connection_fd_headroom)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        timeout_keep_alive=65,
        lifespan="on",
        http=bounded_h11_protocol(
            read_timeout_s=limits.read_timeout_s,
            header_timeout_s=limits.header_timeout_s,
            max_connections=max_connections,
        ),
        backlog=listen_backlog(max_connections, limits.connection_fd_headroom),
    )
    host, port = sock.getsockname()[:2]
    where = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    ready = f"evolve-reward-server: backend {backend.name!r} on {where} {_settings(backend)}" + (
        " (fault injection enabled)" if args.enable_fault_injection else ""
    )
    if backend.name == "mock":  # it answers every env and task with its one rule
        rule = getattr(backend, "rule", "change")
        ready += (
            f"; a stand-in, not a learned model: the {rule!r} rule judges every env and task "
            '(--backend-kwargs \'{"rule": "reach_place"}\' picks another)'
        )
    _ready_server(config, ready).run(sockets=[sock])
    return 0


def _ready_server(config: uvicorn.Config, ready: str) -> uvicorn.Server:
    """A uvicorn server that prints ``ready`` once start-up is complete (the app's lifespan ran
    and the socket accepts connections), never before and never when start-up failed."""
    import uvicorn

    class ReadyServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                print(ready, file=sys.stderr, flush=True)

    return ReadyServer(config)


def _serve_on_ray(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    kwargs: dict[str, object],
    token: str | None,
) -> int:
    """Run the app as a Ray Serve application until SIGINT/SIGTERM (or stdin EOF)."""
    if args.fd is not None:
        parser.error("--fd is not supported with --engine ray")
    autoscaling = json_object(parser, "--autoscaling", args.autoscaling, '{"max_replicas": 4}')
    resources = json_object(parser, "--resources", args.resources, '{"reward": 1}')
    import ray
    from ray import serve

    from evolve_envs.reward.service.hosting.ray_serve import build_app

    app_args: dict[str, object] = {
        "backend": args.backend,
        "backend_kwargs": kwargs,
        "replicas": args.replicas,
        "num_gpus": args.num_gpus,
        "num_cpus": args.num_cpus,
        "resources": resources,
        "autoscaling": autoscaling,
        **app_kwargs(args, token),
        "insecure_no_token": args.insecure_no_token,  # the replicas apply the same rule
    }
    try:
        app = build_app(app_args)
    except ValueError as exc:
        parser.error(str(exc))
    stop = threading.Event()
    ray.init(address=args.address or "local", include_dashboard=False)  # never a stale cluster
    for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which installs its own
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        try:
            serve.run(app, name=args.app_name, route_prefix=args.route_prefix)
        except Exception as exc:  # noqa: BLE001 - a replica that cannot build its backend
            print(
                f"evolve-reward-server: cannot start backend {args.backend!r} on Ray: {exc}",
                file=sys.stderr,
            )
            return 2
        print(
            f"evolve-reward-server: backend {args.backend!r} on "
            f"http://{args.host}:{args.port}{args.route_prefix.rstrip('/')} "
            f"(Ray Serve app {args.app_name!r}, {args.replicas if not autoscaling else 'auto'} "
            "replicas)",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
        return 0
    finally:
        try:
            serve.delete(args.app_name) if args.address else serve.shutdown()
        finally:
            ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
