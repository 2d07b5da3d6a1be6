"""Progress averaged over cameras: each camera asked separately over HTTP, then averaged.

The mock service (intensity rule) reads a painted frame's grey level as its progress, so each
camera's answer is known and the average can be checked exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from evolve_envs import load_config
from evolve_envs.reward.clients.camera_average import CameraAverageClient
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.protocol.critic_math import critic_between, value_list
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.wrappers.model_handle import lend
from evolve_envs.wrappers.progress_reward import ProgressReward
from tests.helpers.svc_helpers import painted


def views(*levels: float) -> np.ndarray:
    return np.stack([painted(p) for p in levels])


@pytest.fixture()
def client(mock_service: EmbeddedService):
    inner = ProgressClient(mock_service.url, fail_on_request_error=True)
    avg = CameraAverageClient(inner, cameras=2)
    yield avg
    avg.close()


def test_critic_done_and_values_are_camera_means(client: CameraAverageClient) -> None:
    start = views(0, 0)
    critic = client.pairwise_critic("t", start, views(20, 60)).value
    assert critic == pytest.approx((critic_between(0, 20) + critic_between(0, 60)) / 2)
    done = client.submit_done("t", start, start, views(97, 99)).result().value
    assert done.done and done.prob == pytest.approx(0.98)
    split = client.done("t", start, start, views(97, 50)).value
    assert split.done and split.prob == pytest.approx(0.735)  # one of two cameras: half says so
    traj = client.trajectory_values("t", [start, views(20, 40), views(50, 80)], skip=1).value
    per_camera = [[0, 20, 50], [0, 40, 80]]
    critics = [[critic_between(a, b) for a, b in zip(s, s[1:], strict=False)] for s in per_camera]
    expected = np.mean([value_list(c) for c in critics], axis=0)
    assert traj.value_list == pytest.approx(list(expected))


def test_a_failing_camera_fails_the_average(mock_service: EmbeddedService) -> None:
    client = CameraAverageClient(ProgressClient(mock_service.url, fallback_critic=-1.0), 2)
    try:
        result = client.pairwise_critic("__fail__", views(0, 0), views(20, 60))
        assert not result.ok and result.value == -1.0  # the fallback, not a half average
    finally:
        client.close()


def test_progress_reward_stacks_the_cameras(client: CameraAverageClient) -> None:
    from evolve_envs.envs.synthetic import ReachPlaceEnv

    env = ProgressReward(ReachPlaceEnv(), lend(client), camera=("image", "image"), call_every=1,
                         start_step=0, milestone_every=1, task="reach")  # fmt: skip
    obs, _ = env.reset(seed=0)
    assert env._frame(obs).shape == (2, *obs["image"].shape)
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info["reward_model_errors"] == 0 and "progress" in info
    cfg = load_config("libero_spatial", "robometer_libero")
    assert cfg.reward_model.average_cameras == ["agentview_image", "wrist_image"]
