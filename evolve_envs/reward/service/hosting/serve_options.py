"""`evolve-reward-server`'s options: :func:`build_parser`, and reading hosts, token and backend
arguments, each bad value refused in one line (:class:`ServeError`) before anything binds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket

from evolve_envs.reward.protocol.token import TOKEN_ENV, TOKEN_FILE_ENV, TokenError, resolve_token
from evolve_envs.reward.service.backends import BACKENDS
from evolve_envs.reward.service.backends.base import CKPT_ENV
from evolve_envs.reward.service.limits import (
    ServiceLimits,
    add_limit_arguments,
    limits_from_args,
)
from evolve_envs.reward.service.middleware.auth import (
    check_exposure,
    check_policy_bind,
    expand_env_refs,
    is_loopback_host,
)
from evolve_envs.reward.service.state.batching import MAX_WINDOW_S

__all__ = [
    "LOOPBACK_HOSTS",
    "SERVICE",
    "USAGE",
    "ServeError",
    "add_token_arguments",
    "MOCK_DEFAULTS",
    "allowed_hosts",
    "app_kwargs",
    "backend_kwargs",
    "backend_kwargs_file",
    "build_parser",
    "check_bind_args",
    "json_object",
    "server_token",
]

#: Backend kwargs `--backend mock` starts with unless `--backend-kwargs` sets them: the same rule
#: as `reward_model.endpoint: embedded` (`embedded_backend_kwargs`), which scores how far camera
#: frames have moved from the first one -- the intensity rule only reads painted test frames.
MOCK_DEFAULTS: dict[str, object] = {"rule": "change"}

#: Exit statuses of the server program (the same numbers as every command line tool's):
#: a bad option, host or token; a port that is taken.
USAGE = 2
SERVICE = 3


class ServeError(Exception):
    """An expected start-up failure: the one line to print, and ``status``, the exit status.

    >>> args = build_parser().parse_args(["--backend", "mock", "--port", "70000"])
    >>> try:
    ...     check_bind_args(args)
    ... except ServeError as exc:
    ...     print(exc.status, exc)
    2 --port 70000 is not a TCP port; give one in 1..65535 (default 8111)
    """

    def __init__(self, message: str, status: int = USAGE) -> None:
        super().__init__(message)
        self.status = status


log = logging.getLogger("evolve_envs.reward.service.hosting.serve")


def add_token_arguments(p: argparse.ArgumentParser) -> None:
    """``--token``, ``--token-file``, ``--insecure-no-token``: the server's and the launcher's."""
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
    add_token_arguments(p)
    p.add_argument(
        "--no-token-behind-network-policy",
        action="store_true",
        help="serve without a bearer token, for clients that cannot send one (RLinf's API reward "
        "worker), only in a Kubernetes pod on a private or wildcard --host, with the shipped "
        "NetworkPolicy admitting only labelled client pods (docs/rlinf.md); refused elsewhere",
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


def allowed_hosts(args: argparse.Namespace) -> list[str]:
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


def backend_kwargs_file(path: str) -> dict[str, object]:
    """The JSON object a `--backend-kwargs-file` holds; anything else is one line
    (:class:`ServeError`, status 2)."""
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)  # arguments, not data: 1 MiB is plenty
    except OSError as exc:
        raise ServeError(
            f"--backend-kwargs-file {path!r}: cannot read it ({exc.strerror or exc})",
            USAGE,
        ) from None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ServeError(
            f"--backend-kwargs-file {path!r} is not valid JSON ({exc}); write one JSON object",
            USAGE,
        ) from None
    if not isinstance(value, dict):
        raise ServeError(
            f'--backend-kwargs-file {path!r} must hold a JSON object, e.g. {{"api_key": "..."}}',
            USAGE,
        )
    return value


def backend_kwargs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, object]:
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
        raise ServeError(str(exc), USAGE) from None
    if args.backend == "mock":
        kwargs = {**MOCK_DEFAULTS, **kwargs}
    if args.ckpt_path and args.backend != "mock":  # else the backend reads $VLAC_CKPT_PATH
        kwargs.setdefault("ckpt_path", args.ckpt_path)
    elif args.ckpt_path and args.backend == "mock":
        log.warning("--ckpt-path is ignored by the mock backend")
    return kwargs


def check_bind_args(args: argparse.Namespace) -> None:
    """Refuse a port outside 1..65535 and a host that is not an address of this machine, in one
    line (:class:`ServeError`, with the exit status), before anything starts."""
    if args.fd is not None:
        return
    if not 1 <= args.port <= 65535:
        raise ServeError(
            f"--port {args.port} is not a TCP port; give one in 1..65535 (default 8111)",
            USAGE,
        )
    try:
        socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ServeError(
            f"--host {args.host!r} is not an address or name this machine can bind ({exc}); "
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
            USAGE,
        ) from None


def server_token(args: argparse.Namespace) -> str | None:
    """The bearer token of `--token`, `--token-file` or the environment, after the
    closed-by-default rule: a non-loopback `--host` without one raises
    :class:`ServeError` (one line, status 2) unless `--insecure-no-token`.
    """
    try:
        token = resolve_token(args.token, args.token_file)
        behind_policy = getattr(args, "no_token_behind_network_policy", False) and token is None
        if behind_policy:
            check_policy_bind(args.host, os.environ)
            log.warning(
                "serving %s without a bearer token: only pods the NetworkPolicy admits must "
                "reach this port (deploy/kuberay/reward-rayservice.yaml)",
                args.host,
            )
        check_exposure(args.host, token, args.insecure_no_token or behind_policy)
    except TokenError as exc:
        raise ServeError(str(exc), USAGE) from None
    if token is None and args.insecure_no_token and not is_loopback_host(args.host):
        log.warning(
            "serving %s without a bearer token (--insecure-no-token): anyone who can reach "
            "this port can use the model",
            args.host,
        )
    return token


def app_kwargs(args: argparse.Namespace, token: str | None) -> dict[str, object]:
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
        "allowed_hosts": list(allowed_hosts(args)),
    }


def json_object(
    parser: argparse.ArgumentParser, option: str, text: str | None, example: str
) -> dict[str, object] | None:
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
