"""``evolve-envs demos``: records scripted episodes, goes on where it stopped, exports LeRobot v3
that lerobot-doctor passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve_envs.cli.demos import parse_range
from evolve_envs.cli.main import main
from evolve_envs.recording.episodes import open_recording
from tests.helpers.lerobot_checks import doctor, failures


def test_ranges_parse_and_bad_ones_are_refused() -> None:
    assert parse_range("0-3,7,2") == [0, 1, 2, 3, 7]
    with pytest.raises(ValueError, match="backwards"):
        parse_range("4-1")


def test_unknown_behaviours_are_a_usage_error(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = main(["demos", str(tmp_path / "d"), "--behaviours", "expert,teleport"])
    assert rc == 2 and "teleport" in capsys.readouterr().err


@pytest.mark.libero
@pytest.mark.slow
def test_demos_record_resume_and_export(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out, lerobot = tmp_path / "demos", tmp_path / "demos-lerobot"
    common = ["--tasks", "0", "--image-size", "32", "--max-steps", "30", "--no-progress"]
    assert main(["demos", str(out), "--init-states", "0", "--behaviours", "stall", *common]) == 0
    assert "1 episode(s) recorded" in capsys.readouterr().out
    # the second run records only what is missing, then exports
    argv = ["demos", str(out), "--init-states", "0-1", "--behaviours", "stall,random", *common]
    assert main([*argv, "--lerobot", str(lerobot)]) == 0
    assert "3 episode(s) recorded" in capsys.readouterr().out
    rec = open_recording(out)
    keys = sorted((ep.meta["init_state_id"], ep.meta["behaviour"]) for ep in rec)
    assert keys == [(0, "random"), (0, "stall"), (1, "random"), (1, "stall")]
    assert all(len(ep) == 30 and not ep.meta["success"] for ep in rec)
    report = json.loads((out / "demos_report.json").read_text())
    assert report["tasks"]["0"]["played"] == {"stall": 2, "random": 2}
    rc, found = doctor(lerobot)
    assert not failures(found), found
    info = json.loads((lerobot / "meta" / "info.json").read_text())
    assert "observation.images.image" in info["features"] and info["total_episodes"] == 4
