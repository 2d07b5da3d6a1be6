"""A LeRobotDataset v3 that this package did not write: calibrated, and relabelled into a copy.

The dataset is built here from the published v3 layout with plain pyarrow, pandas and PyAV
(nothing of :mod:`evolve_envs.recording`): two scripted ReachPlace demonstrations (no
``next.success``, as ``lerobot/libero``), both in one H.264 file addressed by timestamps.
``calibrate`` must score it like a recording; ``relabel`` must add a model's columns to a new
dataset, leave every byte of the original as it was, resume after the service dies, and fail
in one line on a dead service, a missing camera or a missing task.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from evolve_envs.cli.calibrate import calibrate
from evolve_envs.cli.errors import CliError, ExitStatus
from evolve_envs.cli.main import main as cli_main
from evolve_envs.cli.relabel import RelabelOptions, relabel
from evolve_envs.envs.synthetic import TASK, ReachPlaceEnv, scripted_action
from evolve_envs.recording.episodes import open_recording
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.lerobot_checks import doctor, failures
from tests.helpers.lerobot_foreign import write_v3_dataset

KEY = "observation.images.image"
FPS = 10


def _demonstration(seed: int, steps: int = 14) -> tuple[list[np.ndarray], list, list]:
    env = ReachPlaceEnv()
    obs, _ = env.reset(seed=seed)
    frames, states, actions = [], [], []
    for _ in range(steps):
        action = scripted_action(env)
        frames.append(obs["image"])
        states.append(obs["state"])
        actions.append(action)
        obs, *_ = env.step(action)
    return frames, states, actions


def build_dataset(root: Path) -> Path:
    """Two episodes in the v3 layout, written with pyarrow, pandas and PyAV only."""
    episodes = [(*_demonstration(seed), None) for seed in (0, 1)]
    return write_v3_dataset(root, episodes, key=KEY, task=TASK, fps=FPS)


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("foreign") / "demos")


@pytest.fixture(scope="module")
def relabelled(foreign: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    before = _hashes(foreign)
    out = tmp_path_factory.mktemp("relabel") / "demos-mock"
    argv = ["relabel", str(foreign), "--service", "mock:reach_place", "--call-every", "2",
            "--start-step", "2", "--out", str(out)]  # fmt: skip
    assert cli_main(argv) == 0
    return out, before


def test_calibrate_scores_a_dataset_this_package_did_not_write(foreign: Path) -> None:
    report = calibrate([foreign], ["mock:reach_place", "mock:random"], max_frames=8)
    assert report["episodes"] == 2 and report["assumed_successes"] == 2  # no next.success
    right = report["services"]["mock:reach_place"]["overall"]
    assert right["scored"] == 2 and right["successes"] == 2 and right["voc"] > 0.9
    assert report["services"]["mock:random"]["overall"]["voc"] < right["voc"]


def test_relabel_adds_columns_to_a_copy_and_never_touches_the_original(
    foreign: Path, relabelled: tuple[Path, dict], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    out, before = relabelled
    assert _hashes(foreign) == before  # every byte of every file
    assert not list(foreign.parent.glob(".*"))  # no work folder left behind
    info = json.loads((out / "meta" / "info.json").read_text())
    for name in ("progress", "is_check", "backend", "model_id", "revision", "config_hash"):
        assert f"reward_model.mock.{name}" in info["features"]
    data = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pydict()
    original = pq.read_table(foreign / "data/chunk-000/file-000.parquet").to_pydict()
    assert {k: data[k] for k in original} == original  # the old columns as they were
    assert data["reward_model.mock.backend"][0] == "mock"
    assert data["reward_model.mock.model_id"][0] == "mock-reach_place"
    checks = data["reward_model.mock.is_check"][:14]
    assert checks == [i >= 2 and i % 2 == 0 for i in range(14)]  # start 2, every 2 frames
    progress = data["reward_model.mock.progress"][:14]
    assert progress[0] == 0.0 and progress[-1] > 50  # the demonstration moves towards done
    note = json.loads((out / "meta" / "relabel.json").read_text())[-1]
    assert note["schedule"]["call_every"] == 2 and note["identity"]["backend"] == "mock"
    assert (out / "videos").is_dir() and _hashes(out / "videos") == _hashes(foreign / "videos")
    status, report = doctor(out)
    assert status == 0, failures(report)
    cal = tmp_path / "cal"
    argv = ["calibrate", str(out), "--service", "recorded:mock", "--out", str(cal)]
    assert cli_main(argv) == 0
    overall = json.loads((cal / "report.json").read_text())["services"]["recorded:mock"]["overall"]
    assert overall["scored"] == 2 and overall["voc"] > 0.9
    said = capsys.readouterr().out
    assert "2 episode(s) without next.success count as successful demonstrations" in said


def test_relabel_resumes_after_the_service_dies(
    foreign: Path, relabelled: tuple[Path, dict], tmp_path: Path
) -> None:
    out = tmp_path / "demos-mock"
    svc = EmbeddedService("mock", {"rule": "reach_place"}, enable_faults=False).start()
    lines: list[str] = []

    def stop_after_the_first(line: str) -> None:
        lines.append(line)
        svc.stop()  # the service dies once the first episode is scored

    opts = RelabelOptions(str(foreign), svc.url, out=str(out), call_every=2, start_step=2)
    with pytest.raises(CliError, match="run the same command again to resume") as failed:
        relabel(opts, log=stop_after_the_first)
    assert failed.value.status == ExitStatus.SERVICE and "episode 1" in str(failed.value)
    assert not out.exists()  # nothing half-written where the dataset goes
    work = tmp_path / ".demos-mock.relabel"
    assert len(list((work / "scores").glob("*.json"))) == 1
    with EmbeddedService("mock", {"rule": "reach_place"}, enable_faults=False) as again:
        opts.service = again.url
        relabel(opts, log=lines.append)
    assert lines[1] == "resuming: 1 of 2 episodes were scored before" and not work.exists()
    done = pq.read_table(out / "data/chunk-000/file-000.parquet").column(
        "reward_model.mock.progress"
    )
    straight = pq.read_table(relabelled[0] / "data/chunk-000/file-000.parquet")
    assert done.to_pylist() == straight.column("reward_model.mock.progress").to_pylist()


def test_a_dead_service_fails_fast_and_writes_nothing(
    foreign: Path, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    out = tmp_path / "never"
    argv = ["relabel", str(foreign), "--service", "http://127.0.0.1:9", "--out", str(out)]
    assert cli_main(argv) == 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unreachable" in err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_camera_or_task_is_one_line(foreign: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for command in ("calibrate", "relabel"):
        argv = [command, str(foreign), "--service", "mock:reach_place", "--camera", "wrist",
                "--out", str(tmp_path / command)]  # fmt: skip
        assert cli_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(f"has no camera 'wrist' (cameras: {KEY})") and "\n" not in err
    untasked = tmp_path / "untasked"
    shutil.copytree(foreign, untasked)
    episodes = untasked / "meta/episodes/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(episodes).drop_columns(["tasks"]), episodes)
    (untasked / "meta" / "tasks.parquet").unlink()
    assert cli_main(["calibrate", str(untasked), "--service", "mock:reach_place"]) == 2
    err = capsys.readouterr().err.strip()
    assert "episode 0 has no task" in err and "\n" not in err
    with pytest.raises(ValueError, match="only v3 is read"):
        info = json.loads((untasked / "meta" / "info.json").read_text())
        (untasked / "meta" / "info.json").write_text(
            json.dumps({**info, "codebase_version": "v2.1"})
        )
        open_recording(untasked)
