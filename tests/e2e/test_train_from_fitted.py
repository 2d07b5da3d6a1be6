"""``evolve-envs train --config reach_place_fitted``: DistRL on ReachPlace with rewards from a
progress model fitted here (a tiny one, on the shipped recording), served by the embedded
service's ``fitted`` backend, the hacking alarm on."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from evolve_envs.reward.fitting.trainer import FitOptions, fit_reward
from evolve_envs.training.checkpoint import load_checkpoint
from evolve_envs.training.config import load_train_config
from tests.e2e.test_train import SHORT_REACH_PLACE


@pytest.mark.slow
def test_train_rewards_come_from_the_fitted_model(ray_local, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from evolve_envs.cli.main import main

    model = tmp_path / "rp-model"
    fit_reward(FitOptions("shipped", str(model), epochs=2, input_size=32, channels=8,
                          progress=False))  # fmt: skip
    config = load_train_config("reach_place_fitted")
    assert config.reward_model.embedded_backend == "fitted"
    assert config.reward_model.alarm.enable is True
    run_dir = tmp_path / "run"
    argv = ["train", "--config", "reach_place_fitted", "--run-dir", str(run_dir), "--minutes",
            "0.2", "--no-progress-bar", *SHORT_REACH_PLACE,
            f"reward_model.embedded_backend_kwargs.ckpt_path={model}"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    with (run_dir / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    done = [r for r in rows if r["episodes"] not in ("", "0")]
    assert done, rows
    # the fitted model answered every check: its progress is reported and nothing fell back
    assert all(r["model_progress"] != "" for r in done)
    assert sum(int(r["fallbacks"]) for r in rows) == 0
    assert load_checkpoint(run_dir)["counters"]["updates"] >= 1
