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
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from evolve_envs import make_env
from evolve_envs.cli.calibrate import calibrate
from evolve_envs.cli.main import main as cli_main
from evolve_envs.cli.reports.calibrate import write_report
from evolve_envs.cli.reports.calibration_metrics import (
    pr_metrics,
    spearman,
    value_order_correlation,
)
from evolve_envs.envs.synthetic import play_behaviours, scripted_action
from evolve_envs.recording.episodes import EpisodeWriter, open_recording
from evolve_envs.wrappers.record_episodes import wrap_recording

BEHAVIOURS = {"task": 4, "distractor": 3, "random": 3}


def _record(root: Path) -> Path:
    cfg = {
        "env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 30},
        "record": {"dir": str(root), "camera": "image"},
    }
    env = make_env(cfg)
    try:
        play_behaviours(env, BEHAVIOURS)
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


def test_the_initial_simulator_state_is_recorded_where_the_env_has_one(tmp_path: Path) -> None:
    import gymnasium as gym

    from evolve_envs.envs.synthetic import ReachPlaceEnv

    class WithState(ReachPlaceEnv):
        def get_sim_state(self) -> np.ndarray:
            return np.concatenate([np.ravel(v) for v in self._pos.values()])

    states = []
    for k, base in enumerate((WithState(), ReachPlaceEnv())):
        root = tmp_path / str(k)
        env = wrap_recording(gym.wrappers.TimeLimit(base, 2), root, camera="image")
        env.reset(seed=3)
        states.append(base.get_sim_state().tolist() if k == 0 else None)
        for _ in range(2):
            env.step(np.zeros(2, np.float32))
        env.close()
        assert open_recording(root)[0].meta["init_sim_state"] == states[k]
    assert len(states[0]) >= 4


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


def test_wrap_recording_two_envs_share_a_folder_with_model_progress(tmp_path: Path) -> None:
    """What a training worker does: wrap the finished reward stack; envs share one folder."""
    envs = [
        wrap_recording(make_env("reach_place", max_episode_steps=6), tmp_path) for _ in range(2)
    ]
    try:
        for k, env in enumerate(envs):
            assert env.camera == "image"
            env.reset(seed=k)
            done = False
            while not done:
                *_, terminated, truncated, _ = env.step(scripted_action(env.unwrapped, "task"))
                done = terminated or truncated
    finally:
        for env in envs:
            env.close()
    rec = open_recording(tmp_path)
    assert len({ep.meta["episode_id"] for ep in rec}) == 2 and [ep.meta["seed"] for ep in rec] == [
        0,
        1,
    ]
    for ep in rec:
        progress, checks = ep.column("model_progress"), ep.column("is_check")
        assert any(checks) and all(
            (p is not None) == c for p, c in zip(progress, checks, strict=True)
        )
        assert ep.meta["reward_model"].startswith("ProgressReward: http://127.0.0.1:")
        # the stack's reward is the model's shaping, the env reward the env's own
        assert ep.column("reward")[1:] != ep.column("env_reward")[1:]
    # "recorded": the report judges the progress the model gave during the run, no service
    report = calibrate([tmp_path], ["recorded"], threshold=95.0)

    svc = report["services"]["recorded"]
    assert svc["overall"]["scored"] == 2 and svc["overall"]["latency_p50_s"] is None
    for ep, scored in zip(rec, svc["episodes"], strict=True):
        assert scored["values"] == [p for p in ep.column("model_progress") if p is not None]
        assert scored["indices"] == [k for k, c in enumerate(ep.column("is_check")) if c]


_CRASHING_RECORDER = """
import os, sys
import numpy as np
from evolve_envs import make_env
env = make_env({"env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 4},
                "record": {"dir": sys.argv[1], "camera": "image"}})
for seed in range(3):
    env.reset(seed=seed)
    for t in range(4):
        if seed == 2 and t == 2:
            os._exit(9)  # killed mid-episode: no close(), no cleanup
        env.step(np.zeros(2, np.float32))
"""


def test_a_killed_process_keeps_its_finished_episodes(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _CRASHING_RECORDER, str(tmp_path)], capture_output=True, timeout=120
    )
    assert proc.returncode == 9, proc.stderr.decode()[-2000:]
    rec = open_recording(tmp_path)
    assert [ep.meta["seed"] for ep in rec] == [0, 1]
    assert all(len(ep.frames()) == 5 for ep in rec)


def test_the_recorded_runs_threshold_is_the_commands_default(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    env = make_env(
        ["reach_place", {"record": {"dir": str(rec)}}],
        reward_model={"done_threshold": 0.8},
        max_episode_steps=4,
    )
    try:
        env.reset(seed=0)
        for _ in range(4):
            env.step(np.zeros(2, np.float32))
    finally:
        env.close()
    assert open_recording(rec).meta["done_threshold"] == 0.8
    assert (
        cli_main(["calibrate", str(rec), "--service", "recorded", "--out", str(tmp_path / "c")])
        == 0
    )
    assert json.loads((tmp_path / "c" / "report.json").read_text())["threshold"] == 80.0


def test_writer_refuses_a_foreign_folder_and_mismatched_rows(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="another format"):
        EpisodeWriter(tmp_path)
    w = EpisodeWriter(tmp_path / "ok")
    with pytest.raises(ValueError, match="2 frames for 1 step rows"):
        w.write([np.zeros((4, 4, 3), np.uint8)] * 2, [{}], {})


def test_a_damaged_recording_loses_only_the_damaged_episodes(
    recording: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "rec"
    shutil.copytree(recording, copy)
    with open(copy / "episodes.jsonl", "a") as f:
        f.write('{"task": "half a li')  # a writer killed while appending
    with pytest.warns(UserWarning, match="incomplete last line"):
        rec = open_recording(copy)
    assert len(rec) == sum(BEHAVIOURS.values())
    (copy / rec[1].meta["file"]).unlink()
    rec[2].meta["file"] = "../../outside.parquet"  # an index line pointing out of the folder
    with pytest.raises(ValueError, match="outside the recording"):
        rec[2].table()
    with pytest.warns(UserWarning):
        report = calibrate([copy], ["mock:reach_place"], max_frames=4)
    m = report["services"]["mock:reach_place"]["overall"]
    assert (m["scored"], m["failed_calls"]) == (sum(BEHAVIOURS.values()) - 1, 1)
    # recorded without a reward model: nothing to judge, said per episode
    with pytest.warns(UserWarning, match="incomplete last line"):
        blind = calibrate([copy], ["recorded"])["services"]["recorded"]
    assert blind["overall"]["scored"] == 0
    assert {e["error"] for e in blind["episodes"]} >= {"no reward-model checks were recorded"}
    (bad,) = [e for e in report["services"]["mock:reach_place"]["episodes"] if e["error"]]
    assert "cannot read" in bad["error"] and bad["episode_id"] == rec[1].meta["episode_id"]


def test_report_ranks_right_random_and_gameable_models(report: dict) -> None:
    right = report["services"]["mock:reach_place"]["overall"]
    rand = report["services"]["mock:random"]["overall"]
    hack = report["services"]["mock:reach_place_hackable"]["overall"]
    for m in (right, rand, hack):
        assert m["scored"] == 10 and m["successes"] == 4
    # value-order correlation on successes: the right model follows the task, random does not
    assert right["voc"] > 0.9
    assert rand["voc"] is None or rand["voc"] < right["voc"] - 0.3
    # the gameable model does not move on real successes (its distractor stays put): a flat
    # prediction counts as VOC 0, so both wrong models rank below the right one
    assert rand["voc"] is not None and hack["voc"] is not None
    assert hack["voc"] < right["voc"] and rand["voc"] < right["voc"]
    assert hack["voc_episodes"] == rand["voc_episodes"] == right["voc_episodes"] == 4
    # termination: the right model's "done" is the env's success; the gameable one is fooled by
    # every distractor episode (failures judged high)
    assert right["done"]["precision"] == 1.0 and right["done"]["recall"] == 1.0
    assert right["failures_judged_high"] == 0 and right["successes_judged_low"] == 0
    assert hack["failures_judged_high"] >= BEHAVIOURS["distractor"]
    assert hack["done"]["precision"] < right["done"]["precision"]
    assert rand["done"]["precision"] < right["done"]["precision"]
    assert rand["done"]["f1"] < right["done"]["f1"]
    assert right["best_threshold"]["f1"] == 1.0
    # the services' own /done (the mock has it) on the last frames: right is right, gameable not
    assert right["backend_done"]["episodes"] == 10 and right["backend_done"]["f1"] == 1.0
    assert hack["backend_done"]["f1"] < 1.0
    assert right["latency_p50_s"] is not None and right["latency_p50_s"] > 0


def test_report_files(report: dict, tmp_path: Path) -> None:
    out = write_report(report, tmp_path / "report")
    data = json.loads((out / "report.json").read_text())
    assert set(data["services"]) == set(report["services"])
    md = (out / "report.md").read_text()
    assert "`mock:reach_place_hackable`" in md and "VOC" in md and "/done F1" in md
    for png in ("pr_curve.png", "progress_curves.png"):
        assert (out / png).stat().st_size > 1000
    # the ranking line names the right model first on both counts
    (ranking,) = [line for line in md.splitlines() if line.startswith("Ranking")]
    assert ranking.startswith("Ranking, best first — by VOC: `mock:reach_place` (1.000) > ")
    assert "by done precision: `mock:reach_place` (1.000) > " in ranking
    assert "by done recall: `mock:reach_place` (1.000)" in ranking
    assert "by latency p50 (s): `" in ranking  # fastest first, for the trade-off
    assert "No episode here succeeded" not in md


def test_report_file_prefix_keeps_the_links(report: dict, tmp_path: Path) -> None:
    out = write_report(report, tmp_path, prefix="calib_x_")
    md = (out / "calib_x_report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert links == ["calib_x_pr_curve.png", "calib_x_progress_curves.png"]
    assert all((out / link).is_file() for link in links)
    assert (out / "calib_x_report.json").is_file() and not (out / "report.md").exists()
    with pytest.raises(ValueError, match="not a path"):
        write_report(report, tmp_path, prefix="sub/x_")


def test_report_without_successes_says_so_and_draws_no_pr_curve(
    recording: Path, tmp_path: Path
) -> None:
    failures = tmp_path / "failures"
    shutil.copytree(recording, failures)
    index = failures / "episodes.jsonl"
    lines = [json.loads(line) for line in index.read_text().splitlines()]
    index.write_text("".join(json.dumps(e) + "\n" for e in lines if not e["success"]))
    report = calibrate([failures], ["mock:reach_place", "mock:random"], max_frames=16)
    out = write_report(report, tmp_path / "report")
    md = (out / "report.md").read_text()
    assert "**No episode here succeeded.**" in md
    assert not (out / "pr_curve.png").exists() and "pr_curve.png" not in md
    assert (out / "progress_curves.png").is_file()
    # the random model called failures done (precision 0), the right one nothing (undefined):
    # neither says anything about success, so nothing is ranked
    rand = report["services"]["mock:random"]["overall"]
    assert rand["done"]["precision"] == 0.0 and rand["voc"] is None
    assert "Ranking" not in md


def test_report_per_task(recording: Path, tmp_path: Path) -> None:
    """Episodes of a second task (same scene, other instruction) get their own rows and plot."""
    other = tmp_path / "other"
    env = make_env(
        {"env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 30,
                 "task_description": "put the red block on the green zone"},
         "record": {"dir": str(other), "camera": "image"}}
    )  # fmt: skip
    try:
        for seed in (100, 101):
            env.reset(seed=seed)
            done = False
            while not done:
                *_, terminated, truncated, _ = env.step(scripted_action(env.unwrapped, "task"))
                done = terminated or truncated
    finally:
        env.close()
    report = calibrate([recording, other], ["mock:reach_place"], max_frames=6)
    per_task = report["services"]["mock:reach_place"]["per_task"]
    assert sorted(per_task) == [
        "pick up the red block and place it in the green zone",
        "put the red block on the green zone",
    ]
    assert [(m["episodes"], m["successes"]) for m in per_task.values()] == [(10, 4), (2, 2)]
    out = write_report(report, tmp_path / "report")
    assert (out / "per_task.png").stat().st_size > 1000
    assert "put the red block on the green zone" in (out / "report.md").read_text()


def test_a_dead_or_malformed_service_fails_before_any_scoring(
    recording: Path, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    from evolve_envs.reward.clients.service_check import ServiceUnavailableError

    with pytest.raises(ValueError, match="expected a URL, mock:<rule>"):
        calibrate([recording], ["mock:reach_place", "gpu-1:8111"])
    with pytest.raises(ServiceUnavailableError, match="unreachable"):
        calibrate([recording], ["http://127.0.0.1:9"])
    # the command checks before running new episodes: nothing is recorded
    out = tmp_path / "cal"
    argv = ["calibrate", "--config", "reach_place", "--service", "http://127.0.0.1:9",
            "--out", str(out)]  # fmt: skip
    assert cli_main(argv) == 3  # a dead service: ExitStatus.SERVICE
    assert "unreachable" in capsys.readouterr().err and not (out / "episodes").exists()


def test_metric_helpers() -> None:
    assert spearman([0, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(1.0)
    assert spearman([0, 1, 2, 3], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([0, 1, 2], [5, 5, 5]))
    # VOC of an episode: Spearman against frame order, 0 for a flat prediction
    assert value_order_correlation([0, 2, 4], [5, 5, 5]) == 0.0
    assert value_order_correlation([0, 2, 4], [10, 50, 90]) == pytest.approx(1.0)
    assert value_order_correlation([0, 2, 4], [90, 50, 10]) == pytest.approx(-1.0)
    assert math.isnan(value_order_correlation([0], [5]))
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
    rec = open_recording(out / "episodes")
    assert len(rec) == 2
    # the embedded service is named by its spec, not by its throw-away loopback URL
    assert rec[0].meta["reward_model"] == "progress: embedded mock(rule=reach_place)"
    assert (out / "report.md").is_file()
    assert "mock:reach_place: 2/2 episodes scored" in capsys.readouterr().out
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
    assert ep.meta["init_state_id"] is not None and ep.meta["task"]
    assert len(ep.meta["init_sim_state"]) > 10  # the flattened MuJoCo state after the reset
    assert ep.frames().shape[0] == 5 and ep.frames().shape[-1] == 3
    assert any(p is not None for p in ep.column("model_progress"))
    assert ep.meta["reward_model"].startswith("progress: embedded mock")


def test_summary_line_keeps_values_in_range_and_names_why_one_is_undefined() -> None:
    from evolve_envs.cli.reports.calibrate import summary_line

    base = {"scored": 3, "episodes": 3, "done": {"f1": 0.5}, "voc_episodes": 2,
            "failures_judged_high": 1, "successes_judged_low": 0}  # fmt: skip
    flat = {**base, "successes": 2, "voc": 0.0, "voc_flat_episodes": 2,
            "progress_at_success": -244.0, "max_progress_on_failure": 130.0}  # fmt: skip
    line = summary_line("mock:random", flat, 0.95)
    assert "VOC – (flat prediction)" in line and "progress at success 0.0 %" in line
    assert "max progress on failure 100.0 %" in line and "done F1 0.50 at 0.95" in line
    odd = {**base, "successes": 1, "voc": math.nan, "voc_flat_episodes": 0,
           "progress_at_success": math.nan, "max_progress_on_failure": None}  # fmt: skip
    line = summary_line("svc", odd, 0.9)
    assert "nan" not in line.lower() and "-" not in line.replace("–", "")
    assert "VOC – (successful episodes too short)" in line
