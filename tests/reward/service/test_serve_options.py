"""The console script starts a server whose OpenAPI page lists every route; it is closed by
default (a public address needs a token, from a file or the environment)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from evolve_envs.reward.protocol.token import TOKEN_ENV, TOKEN_FILE_ENV
from evolve_envs.reward.service.hosting.serve_options import (
    USAGE,
    ServeError,
    build_parser,
    server_token,
)
from tests.helpers.svc_helpers import free_port

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
    return [found] if found else [sys.executable, "-m", "evolve_envs.cli.serve"]


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


#: the environment of a server that is given no token (none inherited from the test run)
def _env_without_token(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    return {**env, **extra}


def _server(*args: str) -> list[str]:
    return [sys.executable, "-m", "evolve_envs.cli.serve", "--backend", "mock", *args]


@pytest.mark.parametrize("engine", ["uvicorn", "ray"])
def test_a_public_host_without_a_token_refuses_to_start_in_one_line(engine: str) -> None:
    port = free_port()
    proc = subprocess.run(
        _server("--host", "0.0.0.0", "--port", str(port), "--engine", engine),
        capture_output=True, text=True, timeout=60, env=_env_without_token(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("evolve-reward-server: error: --host 0.0.0.0 is not a loopback")
    for fix in ("--token-file", TOKEN_ENV, TOKEN_FILE_ENV, "--insecure-no-token"):
        assert fix in line
    assert "Host allow-list is no access control" in line  # it does not claim to protect
    with socket.socket() as s:  # nothing was left bound
        s.bind(("127.0.0.1", port))


def test_a_token_file_serves_a_public_host_and_nothing_secret_is_on_the_command_line(
    tmp_path: Path,
) -> None:
    token = "k8s-secret-" + "x" * 20
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")  # as `kubectl create secret --from-file` leaves it
    kwargs_file = tmp_path / "backend.json"
    kwargs_file.write_text(json.dumps({"rule": "${MOCK_RULE_FROM_SECRET}"}))
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            _server("--host", "0.0.0.0", "--port", str(port), "--token-file", str(token_file),
                    "--backend-kwargs-file", str(kwargs_file)),
            stdout=out, stderr=subprocess.STDOUT,
            env=_env_without_token(MOCK_RULE_FROM_SECRET="intensity"),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "evolve-reward-server: backend" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"  # bound on every interface, reached on loopback only
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(url + "/health", headers=auth, trust_env=False).status_code == 200
        refused = httpx.get(url + "/health", trust_env=False)
        assert refused.status_code == 401 and refused.json() == {"error": "missing bearer token"}
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline and b"intensity" not in cmdline
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    text = log.read_text()
    ready = next(x for x in text.splitlines() if "evolve-reward-server: backend" in x)
    assert "rule='intensity'" in ready  # ${MOCK_RULE_FROM_SECRET} came from the environment
    assert token not in text
    assert "no access control" in text  # the Host allow-list warning says what it is not


@pytest.fixture()
def token_of(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """`server_token` of a command line, in an environment holding only ``env``'s token vars."""

    def run(*argv: str, **env: str) -> str | None:
        for name in (TOKEN_ENV, TOKEN_FILE_ENV):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return server_token(build_parser().parse_args(["--backend", "mock", *argv]))

    return run


def test_where_the_server_token_comes_from(tmp_path: Path, token_of) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    public = ("--host", "0.0.0.0")
    assert token_of(*public, "--token-file", str(token_file)) == "from-file"
    assert token_of(*public, **{TOKEN_FILE_ENV: str(token_file)}) == "from-file"
    assert token_of(*public, **{TOKEN_ENV: "from-env"}) == "from-env"
    assert token_of(*public, "--token", "from-flag", **{TOKEN_ENV: "from-env"}) == "from-flag"
    assert token_of() is None  # loopback: no token needed
    assert token_of(*public, "--insecure-no-token") is None  # the operator said so


def test_tokenless_behind_the_network_policy_only_in_a_pod(token_of, monkeypatch) -> None:
    """RLinf's worker sends no token: `--no-token-behind-network-policy` lets a pod serve it on
    its private or wildcard address, and is refused outside a pod or on a public address."""
    flag = "--no-token-behind-network-policy"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ServeError, match="not in a Kubernetes pod"):
        token_of("--host", "0.0.0.0", flag)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert token_of("--host", "0.0.0.0", flag) is None
    assert token_of("--host", "10.4.2.7", flag) is None
    with pytest.raises(ServeError, match="34.117.59.81 is not a private address"):
        token_of("--host", "34.117.59.81", flag)
    with pytest.raises(ServeError, match="is not a loopback address"):
        token_of("--host", "0.0.0.0")  # without the flag, still closed
    assert token_of("--host", "0.0.0.0", flag, **{TOKEN_ENV: "t"}) == "t"  # a token still wins


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (("--host", "0.0.0.0"), {}, "--host 0.0.0.0 is not a loopback address"),
        (("--host", "::"), {}, "--host :: is not a loopback address"),
        (("--token", "a", "--token-file", "f"), {}, "both --token and --token-file"),
        (("--token-file", "/no/such/token"), {}, "cannot read it"),
        ((), {TOKEN_FILE_ENV: "/no/such/token"}, "$EVOLVE_REWARD_TOKEN_FILE '/no/such/token'"),
        (("--token", "two words"), {}, "holds spaces, control or non-ASCII"),
        (("--token-file", "EMPTY"), {}, "is empty; write the token into it"),
    ],
)
def test_a_bad_token_source_is_one_line(
    tmp_path: Path, token_of, argv: tuple[str, ...], env: dict[str, str], says: str
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    argv = tuple(str(empty) if a == "EMPTY" else a for a in argv)
    with pytest.raises(ServeError) as err:
        token_of(*argv, **env)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert err.value.status == USAGE


@pytest.mark.parametrize("flag", ["--help"])
def test_module_entry_point_help(flag: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.cli.serve", flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--backend" in proc.stdout and "--ckpt-path" in proc.stdout


def test_the_server_speaks_like_every_command_line_tool() -> None:
    """The server program lives with the service (it never imports the CLI), so its exit
    statuses and debug switch are its own constants: the same as the command line tools'."""
    from evolve_envs.cli.errors import DEBUG_ENV, ExitStatus
    from evolve_envs.reward.service.hosting import serve
    from evolve_envs.reward.service.hosting.serve_options import SERVICE

    assert (USAGE, SERVICE, serve.INTERRUPTED) == (
        ExitStatus.USAGE,
        ExitStatus.SERVICE,
        ExitStatus.INTERRUPTED,
    )
    assert serve.DEBUG_ENV == DEBUG_ENV
