"""`evolve-reward-server`: serve one reward backend over HTTP with uvicorn.

Usage::

    evolve-reward-server --backend mock --port 8111
    evolve-reward-server --engine ray --replicas 4 --num-gpus 1 --backend vlm --port 8111
    evolve-reward-server --backend vlm --ckpt-path /models/Qwen2.5-VL-7B-Instruct --gpu-ids 0
    python -m evolve_envs.reward.service.server --backend mock --backend-kwargs '{"latency_ms": 20}'

Start-up: the arguments are checked (a `--port` outside 1..65535 or a `--host` this machine cannot
bind is one line, exit status 2), the port is bound (taken: one line, exit status 3), then the
backend loads, and the ready line is printed once the server accepts requests (`--debug` or
`EVOLVE_ENVS_DEBUG=1` adds tracebacks to start-up failures).

Binds 127.0.0.1 unless `--host` says otherwise. A bearer token (`--token-file PATH`,
`EVOLVE_REWARD_TOKEN`, `EVOLVE_REWARD_TOKEN_FILE`, or `--token`, which `ps` shows to every user)
requires `Authorization: Bearer <token>` on every request. Closed by default: a non-loopback
`--host` without a token refuses to start (one line, exit status 2) unless `--insecure-no-token`
says so. `--ckpt-path` (or `VLAC_CKPT_PATH`) names the model directory of the `vlm` and `vlac`
backends. `--backend-kwargs-file PATH` reads backend arguments from a JSON file and a string
argument written `${NAME}` is the environment variable NAME, so an API key need not be on the
command line either. `--backend mock` uses the *change* rule (the rule of the shipped configs'
embedded service, `MOCK_DEFAULTS`) unless `--backend-kwargs` names one. The ready line on
stderr names the backend, its settings and the URL. `--engine ray` serves the same app from
`--replicas` Ray Serve replicas (`evolve_envs.reward.service.ray_serve`) on a local Ray instance,
or on the cluster at `--address`, as the Serve application `--app-name` (Ray actors reach it by
handle).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

from evolve_envs.reward.service.auth import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    TokenError,
    check_exposure,
    expand_env_refs,
    is_loopback_host,
    resolve_token,
)
from evolve_envs.reward.service.backends import BACKENDS
from evolve_envs.reward.service.backends.base import CKPT_ENV
from evolve_envs.reward.service.batching import MAX_WINDOW_S
from evolve_envs.reward.service.limits import (
    ServiceLimits,
    add_limit_arguments,
    limits_from_args,
)

__all__ = ["main", "build_parser", "TOKEN_ENV", "TOKEN_FILE_ENV", "MOCK_DEFAULTS"]

#: Backend kwargs `--backend mock` starts with unless `--backend-kwargs` sets them: the same rule
#: as `reward_model.endpoint: embedded` (`embedded_backend_kwargs`), which scores how far camera
#: frames have moved from the first one -- the intensity rule only reads painted test frames.
MOCK_DEFAULTS: dict[str, Any] = {"rule": "change"}

log = logging.getLogger("evolve_envs.reward.service.server")


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of `evolve-reward-server`."""
    p = argparse.ArgumentParser(
        prog="evolve-reward-server",
        description="Serve a reward model (progress, video score and pickle scorer protocols).",
    )
    p.add_argument("--backend", required=True, choices=sorted(BACKENDS), help="model backend")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8111, help="port (default 8111)")
    p.add_argument(
        "--gpu-ids",
        default=None,
        help="GPU ids this server may use, exported as CUDA_VISIBLE_DEVICES (e.g. 0)",
    )
    p.add_argument(
        "--backend-kwargs",
        default="{}",
        help="JSON object of backend constructor arguments; a string value '${NAME}' is the "
        "environment variable NAME (keep API keys off the command line)",
    )
    p.add_argument(
        "--backend-kwargs-file",
        default=None,
        metavar="PATH",
        help="JSON object file of backend arguments (e.g. a mounted secret holding an API key); "
        "--backend-kwargs overrides its keys",
    )
    p.add_argument("--ckpt-path", default=None, help=f"model path (default ${CKPT_ENV})")
    p.add_argument(
        "--token",
        default=None,
        help=f"bearer token; visible to every user in `ps`: prefer --token-file or ${TOKEN_ENV}",
    )
    p.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help=f"file holding the bearer token, e.g. a mounted Kubernetes Secret "
        f"(default ${TOKEN_FILE_ENV}; ${TOKEN_ENV} holds the token itself)",
    )
    p.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="serve a non-loopback --host without a bearer token (refused otherwise): anyone "
        "who can reach the port can use the model",
    )
    p.add_argument(
        "--video-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="allow /score video_path files inside DIR (repeatable; default: path mode off)",
    )
    add_limit_arguments(p, ServiceLimits.from_env())
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=5.0,
        help="how long a backend batch waits for items of concurrent requests (ms)",
    )
    p.add_argument(
        "--max-batch-window-ms",
        type=float,
        default=MAX_WINDOW_S * 1000.0,
        help="adaptive window cap: while recent bursts of requests were bigger than the batch, "
        "wait for the rest up to 1/4 of the backend's recent call time, at most this long (ms; "
        "<= --batch-window-ms: off)",
    )
    p.add_argument(
        "--pickle-at-root",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also serve the pickle scorer at POST / (default: on)",
    )
    p.add_argument(
        "--allowed-hosts",
        default=None,
        help="comma-separated Host header values served; '*' for any "
        "(default: loopback names; add the name clients use when exposing the server)",
    )
    p.add_argument(
        "--enable-fault-injection",
        action="store_true",
        help="add the /admin/faults routes (tests and failure drills only)",
    )
    grp = p.add_argument_group("Ray Serve (--engine ray)")
    p.add_argument(
        "--engine",
        default="uvicorn",
        choices=["uvicorn", "ray"],
        help="uvicorn: one process (default); ray: Ray Serve replicas behind Serve's proxy",
    )
    grp.add_argument("--replicas", type=int, default=1, help="number of replicas (default 1)")
    grp.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per replica (default 0)")
    grp.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica (default 1)")
    grp.add_argument(
        "--resources",
        default=None,
        help="JSON custom Ray resources per replica, e.g. '{\"reward\": 1}': replicas run only on "
        "nodes that have them",
    )
    grp.add_argument(
        "--autoscaling",
        default=None,
        help="JSON autoscaling_config (min_replicas, max_replicas, ...) instead of --replicas",
    )
    grp.add_argument(
        "--address", default=None, help="Ray cluster address (default: start Ray locally)"
    )
    grp.add_argument("--app-name", default="reward", help="Serve application name")
    grp.add_argument("--route-prefix", default="/", help="HTTP route prefix of the app")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of start-up failures too (or set EVOLVE_ENVS_DEBUG=1)",
    )
    # Used by EmbeddedService: serve on an inherited listening socket, exit with the parent.
    p.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    return p


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def _allowed_hosts(args: argparse.Namespace) -> list[str]:
    """`--allowed-hosts`, else the loopback names plus the bound address (if a specific one)."""
    if args.allowed_hosts:
        return [h.strip() for h in args.allowed_hosts.split(",") if h.strip()]
    hosts = list(LOOPBACK_HOSTS)
    if args.host not in ("0.0.0.0", "::", "") and not is_loopback_host(args.host):
        hosts.append(args.host)
    elif args.host in ("0.0.0.0", "::"):
        log.warning(
            "binding %s: requests whose Host header is not a loopback name answer 421 until "
            "--allowed-hosts lists the names or addresses clients use (this is no access "
            "control: remote callers choose their Host header; the bearer token is)",
            args.host,
        )
    return hosts


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


def backend_kwargs_file(path: str) -> dict[str, Any]:
    """The JSON object a `--backend-kwargs-file` holds; anything else is one line
    (:class:`~evolve_envs.cli.errors.CliError`, status 2)."""
    from evolve_envs.cli.errors import CliError, ExitStatus

    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)  # arguments, not data: 1 MiB is plenty
    except OSError as exc:
        raise CliError(
            f"--backend-kwargs-file {path!r}: cannot read it ({exc.strerror or exc})",
            ExitStatus.USAGE,
        ) from None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(
            f"--backend-kwargs-file {path!r} is not valid JSON ({exc}); write one JSON object",
            ExitStatus.USAGE,
        ) from None
    if not isinstance(value, dict):
        raise CliError(
            f'--backend-kwargs-file {path!r} must hold a JSON object, e.g. {{"api_key": "..."}}',
            ExitStatus.USAGE,
        )
    return value


def _backend_kwargs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    from evolve_envs.cli.errors import CliError, ExitStatus

    try:
        kwargs = json.loads(args.backend_kwargs)
    except json.JSONDecodeError as exc:
        parser.error(f"--backend-kwargs is not valid JSON: {exc}")
    if not isinstance(kwargs, dict):
        parser.error("--backend-kwargs must be a JSON object")
    if args.backend_kwargs_file:
        kwargs = {**backend_kwargs_file(args.backend_kwargs_file), **kwargs}
    try:
        kwargs = expand_env_refs(kwargs)
    except TokenError as exc:
        raise CliError(str(exc), ExitStatus.USAGE) from None
    if args.backend == "mock":
        kwargs = {**MOCK_DEFAULTS, **kwargs}
    if args.ckpt_path and args.backend != "mock":  # else the backend reads $VLAC_CKPT_PATH
        kwargs.setdefault("ckpt_path", args.ckpt_path)
    elif args.ckpt_path and args.backend == "mock":
        log.warning("--ckpt-path is ignored by the mock backend")
    return kwargs


def _settings(backend: Any) -> str:
    """The backend's plain settings (public attributes holding simple values), for the log."""
    simple = (str, int, float, bool, tuple, list, type(None))
    items = {
        k: v
        for k, v in sorted(vars(backend).items())
        if not k.startswith("_") and isinstance(v, simple)
    }
    return "{" + ", ".join(f"{k}={v!r}" for k, v in items.items()) + "}"


def _check_bind_args(args: argparse.Namespace) -> None:
    """Refuse a port outside 1..65535 and a host that is not an address of this machine, in one
    line (:class:`~evolve_envs.cli.errors.CliError`), before anything starts."""
    from evolve_envs.cli.errors import CliError, ExitStatus

    if args.fd is not None:
        return
    if not 1 <= args.port <= 65535:
        raise CliError(
            f"--port {args.port} is not a TCP port; give one in 1..65535 (default 8111)",
            ExitStatus.USAGE,
        )
    try:
        socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise CliError(
            f"--host {args.host!r} is not an address or name this machine can bind ({exc}); "
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
            ExitStatus.USAGE,
        ) from None


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound before any model is loaded; a port that is
    taken or an address this machine does not have is one line
    (:class:`~evolve_envs.cli.errors.CliError`, status 3)."""
    import errno

    from evolve_envs.cli.errors import CliError, ExitStatus

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
            raise CliError(
                f"port {port} on {host} is taken by another process; pick another --port or "
                f"stop that process (e.g. `lsof -i :{port}` names it)",
                ExitStatus.SERVICE,
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise CliError(
                f"--host {host} is not an address of this machine; use 127.0.0.1 (this machine "
                "only) or 0.0.0.0 (every interface)",
                ExitStatus.USAGE,
            ) from None
        if exc.errno == errno.EACCES:
            raise CliError(
                f"no permission to bind port {port} (ports below 1024 need privileges); pick "
                "a --port above 1023",
                ExitStatus.USAGE,
            ) from None
        raise CliError(
            f"cannot bind {host}:{port}: {exc.strerror or exc}", ExitStatus.SERVICE
        ) from None
    sock.set_inheritable(False)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `evolve-reward-server`; returns the exit status.

    Start-up order: check the arguments (port, host), bind the port, load the backend, serve;
    the ready line (`evolve-reward-server: backend ... on http://...`) is printed once the server
    accepts requests. Expected failures print one line (`evolve-reward-server: error: ...`;
    `--debug` or `EVOLVE_ENVS_DEBUG=1` adds the traceback).
    """
    from evolve_envs.cli.errors import run_command

    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command("evolve-reward-server", lambda: _run(args, parser), debug=args.debug)


def server_token(args: argparse.Namespace) -> str | None:
    """The bearer token of `--token`, `--token-file` or the environment, after the
    closed-by-default rule: a non-loopback `--host` without one raises
    :class:`~evolve_envs.cli.errors.CliError` (one line, status 2) unless `--insecure-no-token`.
    """
    from evolve_envs.cli.errors import CliError, ExitStatus

    try:
        token = resolve_token(args.token, args.token_file)
        check_exposure(args.host, token, args.insecure_no_token)
    except TokenError as exc:
        raise CliError(str(exc), ExitStatus.USAGE) from None
    if token is None and args.insecure_no_token and not is_loopback_host(args.host):
        log.warning(
            "serving %s without a bearer token (--insecure-no-token): anyone who can reach "
            "this port can use the model",
            args.host,
        )
    return token


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _check_bind_args(args)
    token = server_token(args)  # before anything binds or loads
    if args.gpu_ids is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu_ids
    kwargs = _backend_kwargs(args, parser)
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
    from evolve_envs.reward.service.connections import (
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
    app = create_app(backend, **_app_kwargs(args, token))
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
    _ready_server(config, ready).run(sockets=[sock])
    return 0


def _ready_server(config: Any, ready: str) -> Any:
    """A uvicorn server that prints ``ready`` once start-up is complete (the app's lifespan ran
    and the socket accepts connections), never before and never when start-up failed."""
    import uvicorn

    class ReadyServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                print(ready, file=sys.stderr, flush=True)

    return ReadyServer(config)


def _app_kwargs(args: argparse.Namespace, token: str | None) -> dict[str, Any]:
    """`create_app` keyword arguments (limits, paths, hosts) from the command line; one reading
    for both engines."""
    return {
        "token": token,
        **limits_from_args(args).app_kwargs(),
        "video_dirs": list(args.video_dir),
        "batch_window_ms": args.batch_window_ms,
        "max_batch_window_ms": args.max_batch_window_ms,
        "enable_faults": args.enable_fault_injection,
        "pickle_at_root": args.pickle_at_root,
        "allowed_hosts": list(_allowed_hosts(args)),
    }


def _json_object(
    parser: argparse.ArgumentParser, option: str, text: str | None, example: str
) -> dict[str, Any] | None:
    """The JSON object an option holds (None when not given); anything else is a usage error."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        parser.error(f"{option} is not valid JSON: {exc}")
    if not isinstance(value, dict):
        parser.error(f"{option} must be a JSON object, e.g. '{example}'")
    return value


def _serve_on_ray(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    kwargs: dict[str, Any],
    token: str | None,
) -> int:
    """Run the app as a Ray Serve application until SIGINT/SIGTERM (or stdin EOF)."""
    if args.fd is not None:
        parser.error("--fd is not supported with --engine ray")
    autoscaling = _json_object(parser, "--autoscaling", args.autoscaling, '{"max_replicas": 4}')
    resources = _json_object(parser, "--resources", args.resources, '{"reward": 1}')
    import ray
    from ray import serve

    from evolve_envs.reward.service.ray_serve import build_app

    app_args: dict[str, Any] = {
        "backend": args.backend,
        "backend_kwargs": kwargs,
        "replicas": args.replicas,
        "num_gpus": args.num_gpus,
        "num_cpus": args.num_cpus,
        "resources": resources,
        "autoscaling": autoscaling,
        **_app_kwargs(args, token),
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
