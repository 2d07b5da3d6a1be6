"""A LeRobotDataset v3 built outside this package fits, serves and calibrates end to end.

The dataset is written here from the published v3 layout with plain pyarrow, pandas and PyAV
(nothing of :mod:`evolve_envs.recording`): scripted ReachPlace episodes that reach the zone
(``next.success`` true on the last frame) and ones that push the distractor or wander (false),
all in one H.264 file addressed by timestamps, checked by ``lerobot-doctor``. Then:
``evolve-envs fit-reward`` on it, the model served by a real uvicorn server (the ``fitted``
backend in an embedded service), ``calibrate`` and ``relabel`` taking the model by its path.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import httpx
import numpy as np
import pytest

from evolve_envs.cli.calibrate import calibrate
from evolve_envs.cli.main import main as cli_main
from evolve_envs.envs.synthetic import TASK, ReachPlaceEnv, scripted_action
from evolve_envs.recording.episodes import open_recording
from evolve_envs.reward.service.backends.progress_net import content_hash, load_model
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.lerobot_checks import doctor, failures
from tests.helpers.lerobot_foreign import write_v3_dataset

KEY = "observation.images.top"
FPS = 10
#: (reset seed, behaviour): 6 successes, 4 failures
PLAN = [(s, "task") for s in range(6)] + [(6, "distractor"), (7, "distractor"), (8, "random"),
                                          (9, "random")]  # fmt: skip


def _episode(seed: int, goal: str, max_steps: int = 16) -> tuple[list, list, list, list]:
    env = gym.wrappers.TimeLimit(ReachPlaceEnv(), max_steps)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    frames, states, actions, success = [obs["image"]], [obs["state"]], [], [False]
    while True:
        if goal == "random":
            action = rng.uniform(-1, 1, 2).astype(np.float32)
        else:
            action = scripted_action(env.unwrapped, goal)
        obs, _, terminated, truncated, info = env.step(action)
        actions.append(action)
        frames.append(obs["image"])
        states.append(obs["state"])
        success.append(bool(info["is_success"]))
        if terminated or truncated:
            break
    actions.append(np.zeros(2, np.float32))  # the last frame's action (none was taken)
    return frames, states, actions, success


def build_dataset(root: Path) -> Path:
    """The episodes of ``PLAN`` in the v3 layout, written with pyarrow, pandas and PyAV only."""
    episodes = [_episode(seed, goal) for seed, goal in PLAN]
    return write_v3_dataset(root, episodes, key=KEY, task=TASK, fps=FPS)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_dataset(tmp_path_factory.mktemp("foreign") / "reach-place")
    status, report = doctor(root)
    assert failures(report) == [], report
    return root


@pytest.fixture(scope="module")
def model(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fit") / "rp-foreign"
    argv = ["fit-reward", str(dataset), "--out", str(out), "--epochs", "4", "--input-size",
            "32", "--channels", "8", "--batch-size", "16", "--held-out", "0.3",
            "--failure-cap", "0.6", "--no-progress"]  # fmt: skip
    assert cli_main(argv) == 0
    return out


def test_the_fit_reads_the_foreign_dataset_by_episode(dataset: Path, model: Path) -> None:
    report = json.loads((model / "report.json").read_text())
    assert report["episodes"] == len(PLAN)
    assert report["train"]["successes"] + report["held_out"]["successes"] == 6
    assert not set(report["held_out_ids"]) & set(report["train_ids"])
    assert report["content_hash"] == content_hash(model)
    assert report["failure_cap"] == 0.6 and "at or below 0.6" in (model / "README.md").read_text()


def test_the_model_is_served_with_its_identity_in_every_answer(dataset: Path, model: Path) -> None:
    net = load_model(model)
    episode = open_recording(dataset)[0]
    frames = episode.frames([0, len(episode)])
    with EmbeddedService("fitted", {"ckpt_path": str(model), "device": "auto"},
                         startup_timeout=120) as svc:  # fmt: skip
        caps = httpx.get(svc.url + "/capabilities", timeout=30).json()
        assert caps["backend"] == "fitted" and caps["model_id"] == "rp-foreign"
        assert caps["model_revision"] == content_hash(model)
        assert caps["progress"] and caps["pairwise"] and caps["done"]
        from evolve_envs.reward.clients.endpoint_pool import EndpointPool
        from evolve_envs.reward.clients.progress_client import ProgressClient

        pool = EndpointPool([svc.url])
        client = ProgressClient(pool, max_workers=1)
        try:
            done = client.done(TASK, frames[0], frames[0], frames[1])
            values = client.trajectory_values(TASK, list(frames), skip=1)
        finally:
            client.close()
            pool.close()
        answer = httpx.get(svc.url + "/health", timeout=30)
    assert done.ok and values.ok
    assert answer.headers["x-reward-model-revision"] == content_hash(model)
    # what the service says is what the model says (after JPEG and the service's resize)
    local = float(net.predict(frames[1:], [TASK])[0])
    served = local if local < net.config.done_threshold else 1.0
    assert done.value.prob == pytest.approx(served, abs=0.05)


def test_calibrate_and_relabel_take_the_model_by_path(
    dataset: Path, model: Path, tmp_path: Path
) -> None:
    report = calibrate([dataset], [str(model), "mock:reach_place"], max_frames=8)
    ours = report["services"][str(model)]["overall"]
    assert ours["scored"] == len(PLAN) and ours["failed_calls"] == 0 and ours["successes"] == 6
    assert report["services"]["mock:reach_place"]["overall"]["scored"] == len(PLAN)
    assert ours["backend_done"]["episodes"] == len(PLAN)  # /done asked too
    out = tmp_path / "relabelled"
    argv = ["relabel", str(dataset), "--service", str(model), "--every-frame", "--out", str(out)]
    assert cli_main(argv) == 0
    table = open_recording(out, label="fitted")[0].table()
    revisions = set(table.column("reward_model.fitted.revision").to_pylist())
    assert revisions == {content_hash(model)}
    progress = table.column("reward_model.fitted.progress").to_pylist()
    assert len(progress) == table.num_rows and all(0 <= p <= 100 for p in progress)
