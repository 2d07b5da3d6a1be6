"""The one config schema per kind, who calls the client on which thread, and the episode
scorers' frame cache taking the configured JPEG quality."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import evolve_envs
from evolve_envs import ConfigError, load_config, make_env
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.stack.config import (
    PickleScorerConfig,
    ProgressModelConfig,
    VideoScoreConfig,
)
from tests.helpers.synthetic_env import SyntheticProgressEnv, paint


def test_one_config_error_class() -> None:
    assert evolve_envs.ConfigError is ConfigError and issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(
    ("kind", "model"),
    [("progress", ProgressModelConfig), ("video_score", VideoScoreConfig),
     ("pickle_scorer", PickleScorerConfig)],
)  # fmt: skip
def test_kind_selects_the_model(kind: str, model: type) -> None:
    rm = load_config({"reward_model": {"kind": kind}}, environ={}).reward_model
    assert type(rm) is model and rm.kind == kind


def test_a_key_of_another_kind_names_both_kinds() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"reward_model": {"kind": "pickle_scorer", "nframes": 8}}, environ={})
    assert str(err.value) == (
        "reward_model.nframes: `nframes` is a video_score key; reward_model.kind is pickle_scorer"
    )
    with pytest.raises(ConfigError, match=r"^reward_model\.kind: expected one of progress, "):
        load_config({"reward_model": {"kind": "video"}}, environ={})
    with pytest.raises(ConfigError, match=r"reward_model\.nframs: unknown key \(did you mean"):
        load_config({"reward_model": {"kind": "video_score", "nframs": 8}}, environ={})


def test_progress_env_vars_leave_episode_scorers_alone() -> None:
    environ = {"VLAC_OFFSET_CALL": "8", "USE_DENSE_REWARD": "no", "EVOLVE_REWARD_TOKEN": "t"}
    rm = load_config({"reward_model": {"kind": "video_score"}}, environ=environ).reward_model
    assert rm.token_value == "t" and not hasattr(rm, "call_every")
    rm = load_config({"reward_model": {}}, environ=environ).reward_model
    assert (rm.call_every, rm.dense_reward, rm.token_value) == (8, False, "t")


class _ThreadRecordingClient(ProgressClient):
    """A real client that notes the thread each pairwise request is encoded and sent on."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.threads: list[int] = []

    def _pairwise(self, task, a, b):  # noqa: ANN001
        self.threads.append(threading.get_ident())
        return super()._pairwise(task, a, b)


@pytest.mark.parametrize("calls", ["sync", "async"])
def test_sync_checks_run_on_the_stepping_thread(mock_service, calls: str) -> None:
    with _ThreadRecordingClient(mock_service.url) as client:
        settings = TrackerConfig(start_step=1, call_every=1, milestone_every=1, calls=calls)
        tracker = ProgressTracker(client, settings)
        tracker.reset("paint the frame", paint(0))
        outs = [tracker.observe(t, paint(10 * t)) for t in (1, 2, 3)]
        outs.append(tracker.observe(4, paint(40), env_truncated=True))
    assert outs[-1].summary["progress"] == pytest.approx(40.0, abs=1.0)
    assert len(client.threads) == 4
    on_caller = [t == threading.get_ident() for t in client.threads]
    assert all(on_caller) if calls == "sync" else not any(on_caller)


def test_episode_scorer_cache_takes_jpeg_quality(mock_service) -> None:
    env = make_env(
        env_factory=SyntheticProgressEnv,
        scripts=[[0, 50]],
        max_episode_steps=2,
        reward_model={"enable": True, "endpoint": mock_service.url, "kind": "pickle_scorer",
                      "jpeg_quality": 60, "binary_reward": False},
    )  # fmt: skip
    try:
        store = env.get_wrapper_attr("frame_store")
        assert store.jpeg_quality == 60 and store.encoding == "jpeg"
        env.reset(seed=0)
        _, _, _, trunc, info = env.step(np.zeros(7, np.float32))
        _, r, _, trunc, info = env.step(np.zeros(7, np.float32))
        assert trunc and r == pytest.approx(0.5, abs=0.011)
    finally:
        env.close()
