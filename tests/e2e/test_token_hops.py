"""A bearer token reaches a token-protected service on every path, and is never written in clear.

The service here refuses any request without ``Authorization: Bearer <token>`` (401), and every
stack checks the service at start-up (``require_service``), so a token lost on the way fails the
path at once instead of quietly paying fallback rewards. Sources: a YAML ``reward_model.token``,
``reward_model.token_file``, ``$EVOLVE_REWARD_TOKEN_FILE``; paths: ``gym.make``, ``make_vec`` (every
sub-env), ``evolve-envs rollout``, ``calibrate``, a training worker's env, the RLinf adapter's stack
and an env re-made from its spec.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from evolve_envs import TrainConfig, make_env, make_vec
from evolve_envs.cli.main import main as cli_main
from evolve_envs.integrations.rlinf.stack import build_progress_stack
from evolve_envs.reward.clients.service_check import ServiceUnavailableError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.training.worker_env import make_worker_env

TOKEN = "hop-s3cret-token"


@pytest.fixture(scope="module")
def protected() -> Iterator[EmbeddedService]:
    with EmbeddedService("mock", {"rule": "reach_place"}, token=TOKEN) as svc:
        yield svc


@pytest.fixture(autouse=True)
def no_ambient_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVOLVE_REWARD_TOKEN", raising=False)
    monkeypatch.delenv("EVOLVE_REWARD_TOKEN_FILE", raising=False)


def block(url: str, **extra) -> dict:
    return {"endpoint": url, "calls": "sync", "start_step": 0, "call_every": 1, "max_retries": 0,
            **extra}  # fmt: skip


def yaml_file(tmp_path: Path, url: str, **extra) -> Path:
    path = tmp_path / "over.yaml"
    path.write_text(yaml.safe_dump({"reward_model": block(url, **extra)}))
    return path


def served(env: gym.Env, steps: int = 4) -> dict:
    """Steps ``env``; the info of the last step (checks answered, no failed call)."""
    env.reset(seed=0)
    for _ in range(steps):
        _, _, _, _, info = env.step(env.action_space.sample())
    assert info["progress_calls"] >= steps - 1 and info["reward_model_errors"] == 0, info
    return info


def test_without_the_token_the_stack_refuses_at_start(protected, tmp_path) -> None:
    with pytest.raises(ServiceUnavailableError, match="401|token"):
        make_env(["reach_place", str(yaml_file(tmp_path, protected.url))])


def test_gym_make_and_its_spec(protected, tmp_path) -> None:
    over = yaml_file(tmp_path, protected.url, token=TOKEN)
    env = gym.make("evolve_envs/ReachPlace-v0", config=["reach_place", str(over)])
    try:
        served(env)
    finally:
        env.close()
    built = make_env(["reach_place", str(over)])  # make_env's own spec
    try:
        served(built)
        assert TOKEN not in repr(built.spec) and TOKEN not in str(built.spec.kwargs)
        again = gym.make(built.spec)  # re-made from its spec: the same service, the same token
        try:
            served(again)
        finally:
            again.close()
    finally:
        built.close()


def test_make_vec_every_sub_env(protected, tmp_path) -> None:
    over = yaml_file(tmp_path, protected.url, token=TOKEN)
    vec = make_vec(["reach_place", str(over)], num_envs=2)
    try:
        vec.reset(seed=0)
        for _ in range(3):
            _, _, _, _, infos = vec.step(vec.action_space.sample())
        assert list(infos["reward_model_errors"]) == [0, 0]
        assert min(infos["progress_calls"]) >= 2
    finally:
        vec.close()


def test_rollout_command_writes_no_token(protected, tmp_path) -> None:
    over = yaml_file(tmp_path, protected.url, token=TOKEN)
    out = tmp_path / "run"
    status = cli_main(["rollout", "--config", "reach_place", "--config", str(over),
                       "--episodes", "1", "--max-steps", "6", "--out", str(out),
                       "--no-video"])  # fmt: skip
    assert status == 0
    written = [p for p in out.rglob("*") if p.is_file() and p.suffix in {".json", ".csv", ".md"}]
    assert written and all(TOKEN not in p.read_text(errors="replace") for p in written)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"][0]["reward_model_errors"] == 0


def test_token_file_from_the_environment_for_calibrate(protected, tmp_path, monkeypatch) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    monkeypatch.setenv("EVOLVE_REWARD_TOKEN_FILE", str(secret))
    out = tmp_path / "calib"
    status = cli_main(["calibrate", "shipped", "--service", protected.url, "--out", str(out)])
    assert status == 0
    assert json.loads((out / "report.json").read_text())["episodes"] == 10


def test_training_worker_env_and_stored_config(protected, tmp_path) -> None:
    cfg = TrainConfig(
        env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 8},
        reward_model={"enable": True, "camera": "image", **block(protected.url, token=TOKEN)},
    )
    env = make_worker_env(cfg, 0)
    try:
        served(env)
    finally:
        env.close()
    assert TOKEN not in yaml.safe_dump(cfg.stored())


def test_rlinf_stack_with_a_token_file(protected, tmp_path) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN)
    stack = build_progress_stack(
        {"enable": True, **block(protected.url, token_file=str(secret))}, 1, environ={}
    )
    try:
        tracker = stack.trackers[0]
        frame = np.zeros((64, 64, 3), np.uint8)
        tracker.reset("put the block on the target", frame)
        step = tracker.observe(1, lambda: frame, env_terminated=False, env_truncated=False)
        assert step.info["progress_calls"] == 1 and step.info["reward_model_errors"] == 0
    finally:
        for close in stack.on_close:
            close()
