"""The server's limits live in one settings object (``ServiceLimits``): the CLI's flags and
``--help``, the environment variables, ``create_app``'s defaults, the Ray Serve application's
arguments and the docs table all come from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from evolve_envs.reward.service.hosting.serve_options import build_parser
from evolve_envs.reward.service.limits import (
    APP_LIMITS,
    DEFAULT_LIMITS,
    ServiceLimits,
    add_limit_arguments,
    limits_from_args,
    markdown_table,
)
from evolve_envs.reward.service.state.service_state import RequestLimits
from tests.helpers.svc_helpers import free_port, painted_b64, wait_until_serving

ROOT = Path(__file__).resolve().parents[3]


def test_the_docs_table_is_the_settings_object() -> None:
    readme = (ROOT / "evolve_envs" / "reward" / "service" / "README.md").read_text()
    assert markdown_table() in readme


def test_help_shows_every_limit_with_its_default() -> None:
    text = build_parser().format_help()
    for name in ServiceLimits.model_fields:
        assert f"$EVOLVE_REWARD_{name.upper()}" in text.replace("\n", " ").replace("  ", " ")


def test_the_request_checks_default_to_the_settings_object() -> None:
    checks = RequestLimits()
    for name in APP_LIMITS:
        if hasattr(checks, name):
            assert getattr(checks, name) == DEFAULT_LIMITS[name], name


def test_flags_beat_the_environment_which_beats_the_defaults() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    environ = {"EVOLVE_REWARD_MAX_FRAMES": "7", "EVOLVE_REWARD_MAX_BODY_BYTES": "2048"}
    add_limit_arguments(parser, ServiceLimits.from_env(environ))
    env_only = limits_from_args(parser.parse_args([]))
    assert (env_only.max_frames, env_only.max_body_bytes) == (7, 2048)
    flagged = limits_from_args(parser.parse_args(["--max-frames", "9", "--max-body-mb", "1"]))
    assert (flagged.max_frames, flagged.max_body_bytes) == (9, 2**20)
    assert flagged.max_image_side == DEFAULT_LIMITS["max_image_side"]


def test_a_bad_environment_value_is_refused() -> None:
    with pytest.raises(ValueError, match="max_frames"):
        ServiceLimits.from_env({"EVOLVE_REWARD_MAX_FRAMES": "0"})


def test_the_real_server_reads_the_environment(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "EVOLVE_REWARD_MAX_FRAMES": "2"}
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "evolve_envs.cli.serve", "--backend", "mock",
         "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url + "/health", proc, tmp_path / "server.log", timeout_s=30)
        frames = [painted_b64(10 * i) for i in range(3)]
        over = httpx.post(url + "/trajectory-critic", json={"task": "t", "frames": frames})
        assert over.status_code == 413 and "2" in over.json()["error"]
        ok = httpx.post(url + "/trajectory-critic", json={"task": "t", "frames": frames[:2]})
        assert ok.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_the_serve_application_takes_every_app_limit() -> None:
    pytest.importorskip("ray.serve")
    from evolve_envs.reward.service.hosting.ray_serve import APP_KEYS

    assert set(APP_LIMITS) <= set(APP_KEYS)
