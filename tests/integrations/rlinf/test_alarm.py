"""The alarm and the termination audit in the RLinf integration's episode block (the keys RLinf
logs as ``env/<key>`` metrics), on the RLinf-shaped stand-in env against a real reward server
(mock backend, intensity rule)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evolve_envs.integrations.rlinf.adapter import RLinfProgressReward
from evolve_envs.progress.hacking import RewardHackingWarning
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.integrations.rlinf.standin_env import StandinLiberoEnv, standin_cfg

STEPS, CHUNK = 12, 4


def build(url: str, alarm: bool, success_at: int = 101) -> RLinfProgressReward:
    # By default the simulator never succeeds (success_at 101); episodes are truncated at 12 steps.
    cfg = standin_cfg(success_at=success_at, max_episode_steps=STEPS)
    inner = StandinLiberoEnv(cfg, num_envs=2)
    inner.is_start = False  # every reset takes the given reset state ids: one task throughout
    block = {
        "enable": True, "endpoint": url, "mode": "incremental", "start_step": 1,
        "call_every": 1, "alarm": {"enable": alarm, "window": 2, "baseline": 2},
    }  # fmt: skip
    return RLinfProgressReward.from_config(inner, block, environ={})


def episode(env: RLinfProgressReward, push: float | torch.Tensor) -> dict[str, torch.Tensor]:
    """One episode of both sub-envs (same task); each action adds ``10 * push`` progress
    (``push``: one value, or ``[2, STEPS]`` per sub-env and step)."""
    push = torch.as_tensor(push, dtype=torch.float32).expand(2, STEPS)
    env.reset(reset_state_ids=np.zeros(2, dtype=np.int64))
    for k in range(STEPS // CHUNK):
        actions = torch.zeros((2, CHUNK, 7))
        actions[:, :, 0] = push[:, k * CHUNK : (k + 1) * CHUNK]
        *_, infos_list = env.chunk_step(actions)
    return infos_list[-1]["episode"]


def test_episode_block_carries_alarm_and_audit(intensity_service: EmbeddedService) -> None:
    env = build(intensity_service.url, alarm=True)
    try:
        first = episode(env, 0.3)  # progress 36, truncated: the model judges nothing done
        assert first["model_done"].tolist() == [False, False]
        assert first["alarm_firing"].tolist() == [False, False]
        with pytest.warns(RewardHackingWarning, match=r"0\.36 -> 1\.00"):
            # progress 100 at step 10: the model ends both episodes, the env never succeeded
            second = episode(env, 1.0)
        assert second["model_done"].tolist() == [True, True]
        assert second["model_done_success"].tolist() == [False, False]
        # one audit for both sub-envs: running counts 1 and 2 for the task (the sub-envs'
        # trackers settle in parallel, in either order)
        assert sorted(second["model_done_total"].tolist()) == [1, 2]
        assert second["model_done_success_total"].tolist() == [0, 0]
        # the 4th episode of the task fills both windows (2 + 2): sub-env 1's end fires
        assert second["alarm_firing"].tolist() == [False, True]
        assert second["alarm_triggers"].tolist() == [0, 1]
        assert second["alarm_progress_rise"][1].item() == pytest.approx(0.64, abs=0.011)
        assert second["alarm_success_rise"].tolist() == [0.0, 0.0]
        assert second["alarm_high_failure_rise"][1].item() == pytest.approx(1.0)
        # running numbers survive the restart of the sub-envs
        env.reset(reset_state_ids=np.zeros(2, dtype=np.int64))
        *_, infos_list = env.chunk_step(torch.zeros((2, CHUNK, 7)))
        running = infos_list[-1]["episode"]
        assert running["model_done"].tolist() == [False, False]
        assert running["model_done_total"].tolist() == second["model_done_total"].tolist()
        assert running["alarm_triggers"].tolist() == [0, 1]
    finally:
        env.close()


def test_without_alarm_the_block_has_the_audit_only(intensity_service: EmbeddedService) -> None:
    env = build(intensity_service.url, alarm=False)
    try:
        block = episode(env, 1.0)
        assert block["model_done"].tolist() == [True, True]
        assert not any(key.startswith("alarm_") for key in block)
    finally:
        env.close()


def test_episode_block_carries_the_running_precision_of_model_termination(
    intensity_service: EmbeddedService,
) -> None:
    """``model_done_precision``: model-terminated episodes the env judged successful / model-
    terminated episodes, over all tasks of the env; NaN until the model has ended one."""
    env = build(intensity_service.url, alarm=False, success_at=100)
    try:
        first = episode(env, 0.3)  # progress 36: the model ends nothing
        assert first["model_done"].tolist() == [False, False]
        assert torch.isnan(first["model_done_precision"]).all()
        # sub-env 0 reaches 100 at step 10: the env succeeds as the model judges it done;
        # sub-env 1 is at 95 then (done for the model at 0.95), and succeeds only a step later
        push = torch.ones((2, STEPS))
        push[1, 0] = 0.5
        second = episode(env, push)
        assert second["model_done"].tolist() == [True, True]
        assert second["model_done_success"].tolist() == [True, False]
        assert second["model_done_precision"].tolist() == [0.5, 0.5]
        third = episode(env, 1.0)  # both right: 3 of 4
        assert third["model_done_success"].tolist() == [True, True]
        assert third["model_done_precision"].tolist() == [0.75, 0.75]
        # running: kept when the sub-envs restart
        env.reset(reset_state_ids=np.zeros(2, dtype=np.int64))
        *_, infos_list = env.chunk_step(torch.zeros((2, CHUNK, 7)))
        assert infos_list[-1]["episode"]["model_done_precision"].tolist() == [0.75, 0.75]
    finally:
        env.close()
