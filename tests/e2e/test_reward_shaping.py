"""The shipped ReachPlace reward pays a placed block more than any near miss (through the real
wrappers and the embedded mock reward service). The training config settles rewards late
(``calls: deferred``), so an episode's return is the sum of its settled rewards."""

from __future__ import annotations

import numpy as np
import pytest

from evolve_envs import load_train_config
from evolve_envs.envs.synthetic import scripted_action
from evolve_envs.training.driver import reward_service_for
from evolve_envs.training.worker_env import make_worker_env
from evolve_envs.wrappers import settled_episodes


def _park_action(base, aim_block: np.ndarray) -> np.ndarray:
    """Grasp the block, then carry it to ``aim_block`` (a point short of the goal)."""
    pos = base.positions()
    aim = pos["block"] if not base._holding else aim_block - base._grasp_offset
    return np.clip((aim - pos["gripper"]) / base.speed, -1.0, 1.0).astype(np.float32)


def _play(env, seed: int, park: float | None) -> tuple[float, dict]:
    """One episode: the scripted expert (``park=None``) or a policy that parks the block
    ``park`` from the goal's centre, on the side it comes from. Returns (return, last info)."""
    env.reset(seed=seed)
    base = env.unwrapped
    pos = base.positions()
    away = pos["block"] - pos["target"]
    aim_block = pos["target"] + (park or 0.0) * away / np.linalg.norm(away)
    info, done = {}, False
    while not done:
        action = scripted_action(base) if park is None else _park_action(base, aim_block)
        _, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    (episode,) = settled_episodes(env, wait=True)
    return float(episode.rewards.sum()), {
        **info,
        "bonus": float(episode.rewards[-1] - episode.model_rewards[-1]),
    }


@pytest.mark.slow
def test_a_placed_block_earns_more_than_a_block_parked_near_the_goal():
    cfg = load_train_config("reach_place")
    with reward_service_for(cfg) as worker_cfg:
        env = make_worker_env(worker_cfg, 0)
        try:
            results = []
            for seed in range(3):
                success, s_info = _play(env, seed, park=None)
                near, n_info = _play(env, seed, park=0.10)
                results.append((seed, success, near))
                assert s_info["is_success"] and not n_info["is_success"]
                gap = np.linalg.norm(
                    env.unwrapped.positions()["block"] - env.unwrapped.positions()["target"]
                )
                assert 0.09 < gap < 0.2, gap  # it really parked short of the goal
                assert s_info["bonus"] == pytest.approx(cfg.reward_model.success_bonus)
                assert n_info["bonus"] == pytest.approx(0.0)
                assert success > near, results
            # every success earns the model's full progress plus the bonus; no near miss does
            assert min(s for _, s, _ in results) >= 1.0 + cfg.reward_model.success_bonus - 1e-6
            assert max(n for _, _, n in results) < 1.0
        finally:
            env.close()
