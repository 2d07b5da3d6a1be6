"""A dataset in the layout of LeRobot's published LIBERO datasets, built outside this package,
is fitted by ``evolve-envs fit-reward`` as it is: a user who holds LeRobot's LIBERO data needs
no demonstrations of ours.

The layout (written here with pyarrow, pandas and PyAV, nothing of :mod:`evolve_envs.recording`):
two cameras ``observation.images.image`` and ``observation.images.wrist_image``, an 8-float
``observation.state``, a 7-float ``action``, 10 fps, ``robot_type: panda``, one LIBERO
instruction per episode, several tasks, and no success column (every episode is a
demonstration, so the fit is told ``--demonstrations``). The frames are ReachPlace's (64x64),
which keeps the test to seconds; what is checked is that the layout is read, not what is learned.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np

from evolve_envs.cli.main import main as cli_main
from evolve_envs.envs.synthetic import ReachPlaceEnv, scripted_action
from evolve_envs.recording.episodes import open_recording
from tests.helpers.lerobot_checks import doctor, failures
from tests.helpers.lerobot_foreign import write_v3_dataset

KEYS = ("observation.images.image", "observation.images.wrist_image")
TASKS = (
    "pick up the alphabet soup and place it in the basket",
    "pick up the cream cheese and place it in the basket",
)


def _demonstration(seed: int, max_steps: int = 16) -> tuple[list, list, list, None]:
    env = gym.wrappers.TimeLimit(ReachPlaceEnv(), max_steps)
    obs, _ = env.reset(seed=seed)
    frames, states, actions = [obs["image"]], [], []
    while True:
        action = scripted_action(env.unwrapped, "task")
        states.append(np.resize(obs["state"], 8).astype(np.float32))  # LIBERO's 8 floats
        actions.append(np.resize(action, 7).astype(np.float32))  # and 7 action dims
        obs, _, terminated, truncated, _ = env.step(action)
        frames.append(obs["image"])
        if terminated or truncated:
            break
    states.append(np.resize(obs["state"], 8).astype(np.float32))
    actions.append(np.zeros(7, np.float32))
    return frames, states, actions, None


def test_a_dataset_in_lerobots_libero_layout_fits_as_it_is(tmp_path: Path) -> None:
    episodes = [_demonstration(seed) for seed in range(8)]
    tasks = [TASKS[i % 2] for i in range(len(episodes))]
    root = write_v3_dataset(tmp_path / "libero", episodes, key=KEYS, task=tasks,
                            robot_type="panda")  # fmt: skip
    assert failures(doctor(root)[1]) == []
    data = open_recording(root)
    assert len(data) == 8 and {ep.meta["task"] for ep in data} == set(TASKS)
    out = tmp_path / "model"
    argv = ["fit-reward", str(root), "--out", str(out), "--demonstrations", "--camera",
            KEYS[0], "--epochs", "2", "--input-size", "32", "--channels", "8",
            "--batch-size", "16", "--held-out", "0.25", "--no-progress"]  # fmt: skip
    assert cli_main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["episodes"] == 8
    assert report["train"]["successes"] + report["held_out"]["successes"] == 8
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
