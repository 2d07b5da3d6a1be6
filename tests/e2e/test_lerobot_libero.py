"""Real LIBERO episodes recorded and exported as a LeRobotDataset v3 like ``lerobot/libero``.

Two short episodes of the session's LIBERO env (both cameras, 128x128) are recorded by
``RecordEpisodes`` (what ``rollout --record`` and the ``record:`` block use) and exported with
``evolve-envs export``; ``lerobot-doctor --ci`` must pass on the dataset. Orientation: LeRobot's
LIBERO datasets hold the simulator's frames rotated 180 degrees (its ``LiberoProcessorStep``
flips height and width of MuJoCo's render "to match the HuggingFaceVLA/libero convention"), so
the dataset's first frame must match the raw MuJoCo render of the recorded initial state turned
``raw[::-1, ::-1]``, and not the raw or the upright one.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from evolve_envs.cli.main import main as cli_main
from evolve_envs.envs.libero import LiberoEnv
from evolve_envs.recording.episodes import open_recording
from evolve_envs.recording.orientation import reorient
from evolve_envs.wrappers.record_episodes import RecordEpisodes
from tests.helpers.lerobot_checks import doctor, episode_video, failures, psnr

pytestmark = pytest.mark.libero

CAMERAS = {
    "agentview_image": "observation.images.image",
    "wrist_image": "observation.images.image2",
}
RAW_KEYS = {"agentview_image": "agentview_image", "wrist_image": "robot0_eye_in_hand_image"}
STEPS = 12


@pytest.fixture(scope="module")
def libero_dataset(
    libero_env: LiberoEnv, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, list[dict]]:
    root = tmp_path_factory.mktemp("libero-rec") / "rec"
    env = RecordEpisodes(gym.wrappers.TimeLimit(libero_env, STEPS), root, camera="agentview_image")
    rng = np.random.default_rng(0)
    played = []
    for seed in (0, 1):  # not closed: the env is the session's
        obs, _ = env.reset(seed=seed)
        states, actions, done = [obs["state"]], [], False
        while not done:
            action = rng.uniform(-1, 1, 7)  # float64
            obs, _, terminated, truncated, _ = env.step(action)
            states.append(obs["state"])
            actions.append(action)
            done = terminated or truncated
        played.append({"states": states, "actions": actions})
    out = root.parent / "lerobot"
    assert cli_main(["export", str(root), "--format", "lerobot", "--out", str(out)]) == 0
    return root, out, played


def test_recording_keeps_both_cameras_the_state_and_the_actions(libero_dataset) -> None:  # noqa: ANN001
    root, _, played = libero_dataset
    rec = open_recording(root)
    for ep, truth in zip(rec, played, strict=True):
        assert ep.cameras == ["agentview_image", "wrist_image"]
        assert ep.meta["orientation"] == {"agentview_image": "upright", "wrist_image": "upright"}
        assert ep.meta["fps"] == 20.0 and ep.meta["suite"] == "libero_10"
        assert ep.frames(camera="wrist_image").shape == (STEPS + 1, 128, 128, 3)
        states = np.asarray(ep.column("state"))
        assert states.shape == (STEPS + 1, 8) and np.array_equal(states, np.stack(truth["states"]))
        assert np.array_equal(np.asarray(ep.column("action")[1:]), np.stack(truth["actions"]))


def test_the_export_passes_lerobot_doctor_with_lerobot_libero_names(libero_dataset) -> None:  # noqa: ANN001
    _, ds, _ = libero_dataset
    status, report = doctor(ds)
    assert status == 0, failures(report)
    info = json.loads((ds / "meta" / "info.json").read_text())
    features = info["features"]
    assert info["robot_type"] == "panda" and info["fps"] == 20
    assert features["observation.state"]["shape"] == [8] and features["action"]["shape"] == [7]
    for obs_key, key in CAMERAS.items():
        video = features[key]["info"]
        assert video["video.codec"] == "av1" and video["video.pix_fmt"] == "yuv420p"
        assert video["image_orientation"] == "rot180" and video["observation_key"] == obs_key


def test_frames_are_turned_as_lerobot_libero_has_them(
    libero_dataset, libero_env: LiberoEnv
) -> None:  # noqa: ANN001
    root, ds, _ = libero_dataset
    rec = open_recording(root)
    raw = libero_env._ensure_sim().regenerate_obs_from_state(
        np.asarray(rec[0].meta["init_sim_state"])
    )  # MuJoCo's own render of the first frame's state, not turned by LiberoEnv
    libero_env.reset(seed=0)  # leave the session's env in a plain state
    for obs_key, key in CAMERAS.items():
        render = np.asarray(raw[RAW_KEYS[obs_key]], np.uint8)
        first = episode_video(ds, key, 0)[0]  # plain PyAV on the dataset's file
        as_lerobot = psnr(first, render[::-1, ::-1])
        assert as_lerobot > 30.0, obs_key
        for wrong in (render, render[::-1], render[:, ::-1]):
            assert psnr(first, wrong) < as_lerobot - 6.0, obs_key
        assert psnr(rec[0].frames([0], camera=obs_key)[0], render[::-1]) > 30.0  # upright
        # this package's reader turns them upright again, as the reward model saw them
        reader = open_recording(ds, camera=key)[0].frames([0])[0]
        assert psnr(reader, render[::-1]) > 30.0


def test_videos_match_the_recording_frame_for_frame(libero_dataset) -> None:  # noqa: ANN001
    root, ds, _ = libero_dataset
    for i, ep in enumerate(open_recording(root)):
        for obs_key, key in CAMERAS.items():
            truth = reorient(ep.frames(camera=obs_key), "upright", "rot180")
            video = episode_video(ds, key, i)
            assert video.shape == truth.shape == (STEPS + 1, 128, 128, 3)
            assert psnr(video, truth) > 30.0  # AV1 at LeRobot's CRF 30 is lossy
            assert psnr(video[1:], truth[:-1]) < psnr(video, truth)
