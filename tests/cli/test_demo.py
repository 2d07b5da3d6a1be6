"""`evolve-envs demo` (`make demo`) shows the library's idea, each number naming its source.

Its ReachPlace part runs here as it runs for a new user (real embedded services, the recording,
a progress model fitted on it, the calibration), with 2 episodes per policy, 3 fitting epochs
and without the LIBERO episode; the LIBERO part's table is the rollout's, whose first line says
what the mock's number is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evolve_envs import load_config
from evolve_envs.cli.reports.progress_source import progress_source
from evolve_envs.cli.reports.rollout import format_table


@pytest.mark.slow
def test_the_demo_shows_the_gameable_model_hacked_and_the_right_one_ranked_first(
    tmp_path: Path, capsys
) -> None:
    from evolve_envs.cli.main import main

    out = tmp_path / "demo"
    argv = ["demo", "--no-libero", "--episodes", "2", "--fit-epochs", "3", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rows = {
        tuple(line.split()[:2]): line
        for line in text.splitlines()
        if re.match(r"\s+(right|gameable)\s+(random|gaming|solving)\s", line)
    }
    assert len(rows) == 6, text
    assert "FIRING" in rows[("gameable", "gaming")]  # progress rose, success did not
    assert sum("FIRING" in line for line in rows.values()) == 1
    assert "the hacking alarm fired on: gameable/gaming" in text
    # the gaming policy earns the gameable model's progress, not the right one's, nor success
    gaming = {m: rows[(m, "gaming")].split() for m in ("right", "gameable")}
    assert int(gaming["gameable"][2]) >= 90 > int(gaming["right"][2]) and "0/2" in gaming["right"]
    assert rows[("right", "solving")].split()[2:7] == ["100", "%", "100", "%", "2/2"]
    # the calibration ranks the right model first, the gameable one last, by VOC
    (ranking,) = [line for line in text.splitlines() if "ranking, best first, by VOC" in line]
    order = re.findall(r"mock:(\w+)", ranking)
    assert order[0] == "reach_place" and order[-1] == "reach_place_hackable"
    # every number is named: the columns are defined before the table
    assert "model progress = the reward model's final judgement" in text
    assert "true progress  = the env's ground truth (info['true_progress'])" in text
    assert (out / "reach_place" / "calibration" / "report.md").is_file()
    # a progress model fitted on the recorded episodes, calibrated beside the rules
    assert (out / "reach_place" / "model" / "model.safetensors").is_file()
    assert re.search(r"wrote \S+model \(sha256:[0-9a-f]{16}, \d+ KiB", text), text
    (fitted,) = [line for line in text.splitlines() if "fitted (fit-reward)" in line]
    assert "VOC" in fitted and "done precision" in fitted
    # ... and served under the three policies on other scenes, with the alarm
    served = [line.split() for line in text.splitlines() if re.match(r"\s+fitted\s+\w+\s+\d", line)]
    assert [row[1] for row in served] == ["random", "gaming", "solving"], text
    assert "2/2" in served[2] and "0/2" in served[1]  # env success: the expert's, not the gamer's
    assert (out / "reach_place" / "episodes" / "episodes.jsonl").is_file()


def test_the_libero_table_says_the_mock_measures_pixel_change() -> None:
    source = progress_source(load_config("libero_10").reward_model)
    row = {
        "episode": 0, "steps": 300, "env_success": False, "final_progress": 90.6,
        "reward_sum": 0.906, "reward_model_calls": 15, "reward_model_errors": 0,
        "latency_s": {"p50": 0.08}, "done_by_progress": False, "terminated": False,
    }  # fmt: skip
    first, header, line = format_table([row], source=source).splitlines()
    assert first.startswith("model progress = mock reward model, rule change: ")
    assert "pixel change, not task progress" in first and "env success = the env's own" in first
    assert "model progress" in header and "env success" in header and "90.6" in line


def test_the_demo_refuses_too_few_episodes_in_one_line(tmp_path: Path, capsys) -> None:
    from evolve_envs.cli.main import main

    assert main(["demo", "--episodes", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "evolve-envs demo: error: --episodes must be >= 2 (the alarm compares windows), got 1"
    )


@pytest.mark.libero
@pytest.mark.slow
def test_the_learned_libero_model_scores_the_expert_high_and_random_play_low(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evolve_envs.cli.demo import _learned_libero

    _learned_libero(tmp_path / "libero_object")
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in text.splitlines() if "%" in line
            and line.split()[0] in ("expert", "random")}  # fmt: skip
    # episode, env success, learned final %, /, max %, pixel final %, /, max %
    expert, random_play = rows["expert"], rows["random"]
    assert expert[1] == "yes" and random_play[1] == "no", text
    assert float(expert[2]) >= 90 and float(random_play[2]) <= float(expert[2]) - 30, text
    assert (tmp_path / "libero_object" / "episodes.jsonl").is_file()
