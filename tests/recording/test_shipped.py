"""The recorded episodes the package ships, and the calibration controls on them.

On the shipped ReachPlace recordings, `evolve-envs calibrate shipped` must rank a right reward
model (the mock `reach_place` rule) above one that ignores the scene (`random`) and a gameable
one (`reach_place_hackable`, which reads the distractor).
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evolve_envs.cli.main import main as cli_main
from evolve_envs.recording.episodes import open_recording
from evolve_envs.recording.shipped import SHIPPED, resolve_recording, shipped_recording

ROOT = Path(__file__).resolve().parents[2]
BEHAVIOURS: dict[str, int] = json.loads((shipped_recording() / "meta.json").read_text())[
    "behaviours"
]
RIGHT, RANDOM, GAMEABLE = "mock:reach_place", "mock:random", "mock:reach_place_hackable"


def test_the_shipped_set_is_small_and_holds_successes_and_failures() -> None:
    folder = shipped_recording()
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 400_000  # well under 1 MB
    rec = open_recording(folder)
    behaviours = [ep.meta["behaviour"] for ep in rec]
    assert behaviours == [b for b, n in BEHAVIOURS.items() for _ in range(n)]
    assert [ep.meta["success"] for ep in rec] == [b == "task" for b in behaviours]
    frames = rec[0].frames()
    assert frames.shape == (len(rec[0]) + 1, 64, 64, 3) and frames.dtype == np.uint8
    assert resolve_recording("shipped") == resolve_recording("shipped:reach_place") == folder
    assert resolve_recording("./shipped") == Path("shipped")  # a folder of that name
    with pytest.raises(ValueError, match="no shipped recording 'libero'"):
        resolve_recording("shipped:libero")


def test_setup_cfg_installs_every_shipped_file() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    globs = [
        g.strip() for g in cfg["options.package_data"]["evolve_envs.recording.shipped"].split(",")
    ]
    package = ROOT / "evolve_envs" / "recording" / "shipped"
    for name in SHIPPED:
        shipped = [p for p in (package / name).rglob("*") if p.is_file()]
        assert len(shipped) == 2 + sum(BEHAVIOURS.values())
        for path in shipped:
            rel = path.relative_to(package).as_posix()
            assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_calibrate_shipped_ranks_the_right_rule_above_random_and_gameable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal"
    argv = ["calibrate", "shipped", "--max-frames", "16", "--out", str(out)]
    for service in (RIGHT, RANDOM, GAMEABLE):
        argv += ["--service", service]
    assert cli_main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["recordings"] == ["shipped"] and report["episodes"] == 10
    m = {name: svc["overall"] for name, svc in report["services"].items()}
    for name in (RIGHT, RANDOM, GAMEABLE):
        assert m[name]["scored"] == 10 and m[name]["successes"] == 4
    by_voc = sorted(m, key=lambda name: -m[name]["voc"])
    assert by_voc[0] == RIGHT and m[RIGHT]["voc"] > 0.9
    assert m[RANDOM]["voc"] < m[RIGHT]["voc"] - 0.2 and m[GAMEABLE]["voc"] < m[RIGHT]["voc"] - 0.2
    assert m[RIGHT]["done"]["precision"] == m[RIGHT]["done"]["recall"] == 1.0
    for wrong in (RANDOM, GAMEABLE):
        assert m[wrong]["done"]["f1"] < m[RIGHT]["done"]["f1"]
    assert m[GAMEABLE]["failures_judged_high"] >= BEHAVIOURS["distractor"]
    md = (out / "report.md").read_text()
    (ranking,) = [line for line in md.splitlines() if line.startswith("Ranking")]
    assert ranking.startswith(f"Ranking, best first — by VOC: `{RIGHT}` (1.000) > ")
    assert f"by done precision: `{RIGHT}` (1.000) > " in ranking
    assert (out / "progress_curves.png").stat().st_size > 1000
    assert f"{RIGHT}: 10/10 episodes scored, 4 successes" in capsys.readouterr().out


def test_writing_the_controls_again_gives_the_same_episodes(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "make_controls.py"
    run = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "again")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"wrote {tmp_path / 'again'}: 10 episodes")
    again = open_recording(tmp_path / "again")
    shipped = open_recording(shipped_recording())
    assert again.meta == shipped.meta
    assert [ep.meta for ep in again] == [ep.meta for ep in shipped]
    for new, old in zip(again, shipped, strict=True):
        for column in ("step", "action", "reward", "env_reward", "terminated", "is_success"):
            assert new.column(column) == old.column(column)
        diff = np.abs(new.frames().astype(int) - old.frames().astype(int))
        assert diff.max() <= 8  # the same pictures (a JPEG encoder update may move a few levels)
