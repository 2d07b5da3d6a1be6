"""One config, one wrapper stack: ``evolve-envs rollout``, the training workers and the RLinf
integration all resolve a config through ``make_env`` / ``open_reward_model``, so the same YAML
builds the same classes in the same order with the same settings."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import yaml

from evolve_envs import TrainConfig
from evolve_envs.cli.rollout import _make_vector_env
from evolve_envs.integrations.rlinf.stack import build_progress_stack
from evolve_envs.stack.loading import resolve_config
from evolve_envs.training.worker import RolloutWorker
from evolve_envs.wrappers.progress_reward import ProgressReward


def _layout(env: gym.Env) -> list[tuple[str, Any]]:
    """The stack from the outside in: each layer's class and the settings that shape it."""
    layers: list[tuple[str, Any]] = []
    while True:
        settings: Any = None
        if isinstance(env, ProgressReward):
            settings = (env.settings.model_dump(), env.camera, env.reward_weight)
        elif isinstance(env, gym.wrappers.TimeLimit):
            settings = env._max_episode_steps
        layers.append((type(env).__name__, settings))
        if not isinstance(env, gym.Wrapper):
            return layers
        env = env.env


def test_rollout_train_and_rlinf_build_the_same_stack_from_one_yaml() -> None:
    blocks = yaml.safe_load(resolve_config("reach_place").read_text())
    vec = _make_vector_env(["reach_place"], {}, 1)
    worker = RolloutWorker(TrainConfig(env=blocks["env"], reward_model=blocks["reward_model"]), 0)
    rlinf = build_progress_stack(blocks["reward_model"], num_envs=1)
    try:
        rollout_layout = _layout(vec.unwrapped.envs[0])
        assert [name for name, _ in rollout_layout] == [
            "ProgressReward", "TimeLimit", "ReachPlaceEnv",
        ]  # fmt: skip
        assert _layout(worker.envs[0]) == rollout_layout
        progress = rollout_layout[0][1][0]
        assert rlinf.trackers[0].settings.model_dump() == progress
    finally:
        vec.close()
        worker.close()
        for close in rlinf.on_close:
            close()
