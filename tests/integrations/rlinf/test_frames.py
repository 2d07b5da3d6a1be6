"""The RLinf adapter hands the reward model upright frames, whatever RLinf's env emits.

RLinf's LIBERO env turns every camera image with ``img[::-1, ::-1]``
(``rlinf.envs.libero.utils.get_libero_image``); our LIBERO env's ``upright`` frames are
``raw[::-1]``. The slow test renders one LIBERO scene through RLinf's own env class (real
simulator, RLinf's image pipeline) wrapped in :class:`RLinfProgressReward`, and through our env,
and compares the frame each hands the reward model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evolve_envs.integrations.rlinf.adapter import RLinfProgressReward
from evolve_envs.integrations.rlinf.frames import orientation_of, to_upright
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from tests.integrations.rlinf.standin_env import StandinLiberoEnv, standin_cfg

SETTINGS = TrackerConfig(start_step=1, call_every=1, milestone_every=1, mode="incremental")


class RecordingTracker(ProgressTracker):
    """A real tracker that also keeps the first frame of each episode it is handed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.first_frames: list[np.ndarray] = []

    def reset(self, task: str, first_frame: np.ndarray, **kwargs) -> None:
        self.first_frames.append(np.array(first_frame, copy=True))
        super().reset(task, first_frame, **kwargs)


class Lopsided:
    """One sub-env whose frame is bright on its right half (RLinf's env shape, no simulator)."""

    num_envs, auto_reset, ignore_terminations = 1, False, False

    def reset(self, env_idx=None, reset_state_ids=None):  # noqa: ANN001, ANN201
        frame = torch.zeros((1, 8, 8, 3), dtype=torch.uint8)
        frame[:, :, 4:] = 200
        return {"main_images": frame, "task_descriptions": ["light the left"]}, {}


def test_auto_orientation_is_rot180_only_for_rlinf_libero_envs() -> None:
    rlinf_like = type("LiberoEnv", (), {"__module__": "rlinf.envs.libero.libero_env"})()
    assert orientation_of(rlinf_like) == "rot180"
    wrapped = type("Wrapper", (), {"env": rlinf_like})()  # found through .env
    assert orientation_of(wrapped) == "rot180"
    assert orientation_of(StandinLiberoEnv(standin_cfg(), num_envs=1)) == "upright"
    other = type("ManiskillEnv", (), {"__module__": "rlinf.envs.maniskill.maniskill_env"})()
    assert orientation_of(other) == "upright"


def test_installed_rlinf_libero_emits_rot180_frames_and_is_detected() -> None:
    """Against the installed RLinf: its image function turns frames 180°, and its env class is
    recognised (built without a simulator: only its type is looked at)."""
    utils = pytest.importorskip("rlinf.envs.libero.utils")
    libero_env = pytest.importorskip("rlinf.envs.libero.libero_env")
    raw = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    emitted = utils.get_libero_image({"agentview_image": raw})
    assert np.array_equal(emitted, raw[::-1, ::-1])
    assert np.array_equal(to_upright(emitted, "rot180"), raw[::-1])  # our env's upright
    env = libero_env.LiberoEnv.__new__(libero_env.LiberoEnv)
    assert orientation_of(env) == "rot180"


@pytest.mark.parametrize(("orientation", "bright_side"), [("rot180", "left"), ("upright", "right")])
def test_the_adapter_turns_frames_before_the_tracker_sees_them(
    client, orientation: str, bright_side: str
) -> None:
    tracker = RecordingTracker(client, SETTINGS)
    env = RLinfProgressReward(Lopsided(), [tracker], frame_orientation=orientation)
    obs, _ = env.reset()
    (frame,) = tracker.first_frames
    left, right = frame[:, :4].mean(), frame[:, 4:].mean()
    assert (left > right) == (bright_side == "left")
    assert obs["main_images"][0, 0, 7, 0] == 200  # the policy's frame is RLinf's, unturned
    with pytest.raises(ValueError, match="frame_orientation must be one of"):
        RLinfProgressReward(Lopsided(), [tracker], frame_orientation="mirrored")
    env.close()


@pytest.mark.slow
@pytest.mark.libero
def test_rlinf_libero_and_our_libero_hand_the_reward_model_the_same_frame(client, tmp_path) -> None:
    """One LIBERO scene (RLinf's first reset state: its task and init state) rendered by RLinf's
    ``LiberoEnv`` (its subprocess simulator and image pipeline) and by our ``LiberoEnv``
    (``image_orientation: upright``): the reward model receives the same picture from both."""
    libero_env = pytest.importorskip("rlinf.envs.libero.libero_env")
    from omegaconf import OmegaConf

    from evolve_envs.envs.libero import LiberoEnv

    cfg = OmegaConf.load("tests/integrations/rlinf/rlinf_embodiment/config/env/libero_10.yaml")
    cfg.total_num_envs = 1
    cfg.use_ordered_reset_state_ids = True
    cfg.video_cfg.video_base_dir = str(tmp_path)
    rlinf = libero_env.LiberoEnv(cfg, num_envs=1, seed_offset=0, total_num_processes=1,
                                 worker_info=None)  # fmt: skip
    tracker = RecordingTracker(client, SETTINGS)
    wrapped = RLinfProgressReward(rlinf, [tracker])  # frame_orientation: auto
    try:
        assert wrapped.frame_orientation == "rot180"
        obs, _ = wrapped.reset()
        task_id, trial_id = int(rlinf.task_ids[0]), int(rlinf.trial_ids[0])
        emitted = obs["main_images"][0].numpy().astype(np.float64)
    finally:
        wrapped.close()
    received = tracker.first_frames[0].astype(np.float64)

    ours = LiberoEnv("libero_10", task_id=task_id, init_state=trial_id, image_size=256,
                     cameras=("agentview",))  # fmt: skip
    try:
        ours_obs, _ = ours.reset(seed=0)
        upright = ours_obs["agentview_image"].astype(np.float64)
    finally:
        ours.close()

    assert received.shape == upright.shape == (256, 256, 3)
    same = np.abs(received - upright).mean()
    as_emitted = np.abs(emitted - upright).mean()  # what the model got before the fix
    assert same < 2.0, same  # the same scene, up to the simulator's settling
    assert as_emitted > 10 * same, (as_emitted, same)
