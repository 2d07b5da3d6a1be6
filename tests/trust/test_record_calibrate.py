"""Recorded episodes and the calibration report, with controls on the synthetic task.

Episodes of ReachPlace are recorded from three scripted behaviours — the task done (successes),
the distractor dragged onto the target (failures that a gameable model scores high), random
actions (failures) — and re-scored by three mock reward models served by real local services: a
right one (``reach_place``), one that ignores the scene (``random``) and a gameable one
(``reach_place_hackable``). The report must rank them as they are.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from evolve_envs.calibrate import calibrate, pr_metrics, spearman, write_report
from evolve_envs.cli import main as cli_main
from evolve_envs.factory import make_env
from evolve_envs.synthetic import scripted_action
from wrappers.recording import EpisodeWriter, open_recording

BEHAVIOURS = {"task": 4, "distractor": 3, "random": 3}


def _record(root: Path) -> Path:
    cfg = {
        "env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 30},
        "record": {"dir": str(root), "camera": "image"},
    }
    env = make_env(cfg)
    rng = np.random.default_rng(0)
    seed = 0
    try:
        for goal, count in BEHAVIOURS.items():
            for _ in range(count):
                env.reset(seed=seed)
                seed += 1
                done = False
                while not done:
                    if goal == "random":
                        action = rng.uniform(-1, 1, 2).astype(np.float32)
                    else:
                        action = scripted_action(env.unwrapped, goal)
                    *_, terminated, truncated, _ = env.step(action)
                    done = terminated or truncated
    finally:
        env.close()
    return root


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record(tmp_path_factory.mktemp("rec"))


@pytest.fixture(scope="module")
def report(recording: Path) -> dict:
    services = ["mock:reach_place", "mock:random", "mock:reach_place_hackable"]
    return calibrate([recording], services, threshold=95.0, max_frames=16)


def test_recording_holds_every_episode_with_its_steps(recording: Path) -> None:
    rec = open_recording(recording)
    assert len(rec) == sum(BEHAVIOURS.values())
    assert [ep.meta["success"] for ep in rec] == [True] * 4 + [False] * 6
    first = rec[0]
    assert first.meta["task"].startswith("pick up the red block")
    assert first.meta["seed"] == 0 and first.meta["camera"] == "image"
    frames = first.frames()
    assert frames.shape == (len(first) + 1, 64, 64, 3) and frames.dtype == np.uint8
    actions = first.column("action")
    assert actions[0] is None and len(actions[1]) == 2
    assert first.column("is_success")[-1] and first.column("terminated")[-1]
    assert first.meta["return"] == pytest.approx(sum(first.column("reward")[1:]))


def test_an_unfinished_episode_is_never_in_the_index(tmp_path: Path) -> None:
    env = make_env(
        {"env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 5},
         "record": {"dir": str(tmp_path), "camera": "image"}}
    )  # fmt: skip
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.zeros(2, np.float32))
    env.reset(seed=1)
    env.step(np.zeros(2, np.float32))  # cut short by close(): dropped
    env.close()
    rec = open_recording(tmp_path)
    assert len(rec) == 1 and len(rec[0]) == 5
    assert len(list((tmp_path / "episodes").glob("*.parquet"))) == 1
    assert not list((tmp_path / "episodes").glob("*.tmp"))


def test_writer_refuses_a_foreign_folder_and_mismatched_rows(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="another format"):
        EpisodeWriter(tmp_path)
    w = EpisodeWriter(tmp_path / "ok")
    with pytest.raises(ValueError, match="2 frames for 1 step rows"):
        w.write([np.zeros((4, 4, 3), np.uint8)] * 2, [{}], {})


def test_report_ranks_right_random_and_gameable_models(report: dict) -> None:
    right = report["services"]["mock:reach_place"]["overall"]
    rand = report["services"]["mock:random"]["overall"]
    hack = report["services"]["mock:reach_place_hackable"]["overall"]
    for m in (right, rand, hack):
        assert m["scored"] == 10 and m["successes"] == 4
    # value-order correlation on successes: the right model follows the task, random does not
    assert right["voc"] > 0.9
    assert rand["voc"] is None or rand["voc"] < right["voc"] - 0.3
    # termination: the right model's "done" is the env's success; the gameable one is fooled by
    # every distractor episode (failures judged high)
    assert right["done"]["precision"] == 1.0 and right["done"]["recall"] == 1.0
    assert right["failures_judged_high"] == 0 and right["successes_judged_low"] == 0
    assert hack["failures_judged_high"] >= BEHAVIOURS["distractor"]
    assert hack["done"]["precision"] < right["done"]["precision"]
    assert rand["done"]["f1"] < right["done"]["f1"]
    assert right["best_threshold"]["f1"] == 1.0
    assert right["latency_p50_s"] is not None and right["latency_p50_s"] > 0


def test_report_files(report: dict, tmp_path: Path) -> None:
    out = write_report(report, tmp_path / "report")
    data = json.loads((out / "report.json").read_text())
    assert set(data["services"]) == set(report["services"])
    md = (out / "report.md").read_text()
    assert "`mock:reach_place_hackable`" in md and "VOC" in md
    for png in ("pr_curve.png", "progress_curves.png"):
        assert (out / png).stat().st_size > 1000


def test_metric_helpers() -> None:
    assert spearman([0, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert spearman([0, 1, 2, 3], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([0, 1, 2], [5, 5, 5]))
    m = pr_metrics(np.array([100, 10, 96, 99]), np.array([True, True, False, False]), 95)
    assert (m["tp"], m["fp"], m["fn"]) == (1, 2, 1)
    assert m["precision"] == pytest.approx(1 / 3) and m["recall"] == pytest.approx(0.5)


def test_calibrate_command_runs_new_episodes(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "cal"
    code = cli_main(
        ["calibrate", "--config", "reach_place", "--episodes", "2", "--max-frames", "8",
         "--service", "mock:reach_place", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert len(open_recording(out / "episodes")) == 2
    assert (out / "report.md").is_file()
    assert "mock:reach_place: 2 episodes" in capsys.readouterr().out
    assert cli_main(["calibrate", "--service", "mock:reach_place", "--out", str(out)]) == 2


@pytest.mark.libero
@pytest.mark.slow
def test_recording_a_libero_episode(tmp_path: Path) -> None:
    env = make_env(
        ["libero_10", {"record": {"dir": str(tmp_path)}}],
        reward_model={
            "start_step": 0,
            "call_every": 2,
            "embedded_backend_kwargs": {"rule": "change"},
        },
        max_episode_steps=4,
    )
    try:
        env.reset(seed=0)
        for _ in range(4):
            env.step(np.zeros(7, np.float32))
    finally:
        env.close()
    (ep,) = open_recording(tmp_path)
    assert ep.meta["suite"] == "libero_10" and ep.meta["task_id"] == 0
    assert ep.frames().shape[0] == 5 and ep.frames().shape[-1] == 3
    assert any(p is not None for p in ep.column("model_progress"))
    assert ep.meta["reward_model"].startswith("progress: embedded mock")
