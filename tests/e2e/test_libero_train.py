"""The shipped LIBERO training config trains: a few updates on real LIBERO-10 with its reward
model swapped for the embedded mock (its endpoint line and the backend it names); and it loads
for GRPO as for DistRL. (Its held-out evaluation is off here: a second simulator costs more than
the run; tests/training/test_periodic_eval.py runs the same evaluation code on ReachPlace.)"""

from __future__ import annotations

import csv
import json

import pytest

from evolve_envs import load_train_config

#: the reward model: the embedded mock instead of the config's VLAC service (a new mapping, not
#: layered on VLAC's arguments as a KEY=VALUE override would be)
MOCK = {
    "endpoint": "embedded",
    "embedded_backend": "mock",
    "embedded_backend_kwargs": {"rule": "change"},
}
#: one worker, 8-step episodes (the progressive horizon's first stage of 16), two updates
SHORT = [
    "workers.num_workers=1", "workers.num_cpus=0.5", "env.max_episode_steps=16",
    "env.image_size=64", "reward_model.start_step=0", "reward_model.call_every=4",
    "reward_model.milestone_every=8", "distrl.batch_size=1", "distrl.min_buffer=1",
    "run.max_updates=2", "run.log_every_s=5", "eval.every_s=null",
]  # fmt: skip


def test_the_libero_config_is_the_long_horizon_schedule_for_both_algorithms() -> None:
    from evolve_envs import load_config

    for algo in ("distrl", "grpo"):
        cfg = load_train_config("libero_10", overrides=[f"algo={algo}"])
        rm = cfg.reward_model
        preset = load_config({"env": {"suite": "libero_10"}}, "long_horizon").reward_model
        for key in ("start_step", "call_every", "milestone_every", "done_threshold"):
            assert getattr(rm, key) == getattr(preset, key), key
        assert rm.progressive_max_step is True and cfg.env["suite"] == "libero_10"
        assert str(rm.endpoint).startswith("http") and cfg.eval.enabled
        assert cfg.algo == algo


@pytest.mark.libero
@pytest.mark.slow
def test_the_libero_config_trains_a_few_updates_against_the_embedded_mock(ray_local, tmp_path):
    import yaml

    from evolve_envs.cli.main import main
    from evolve_envs.stack.loading import read_yaml
    from evolve_envs.training.config import resolve_train_config

    shipped = read_yaml(resolve_train_config("libero_10"))
    shipped["reward_model"].update(MOCK)
    config = tmp_path / "libero_10_mock.yaml"
    config.write_text(yaml.safe_dump(shipped))
    run = tmp_path / "libero"
    argv = ["train", "--config", str(config), "--run-dir", str(run), "--no-progress-bar"]
    assert main([*argv, *SHORT]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["counters"]["updates"] == 2
    with (run / "metrics.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["episodes"] not in ("", "0")]
    assert rows and all(r["model_progress"] != "" for r in rows)  # the mock answered
    assert all(int(r["episode_length"].split(".")[0]) <= 8 for r in rows)  # half of 16 at first
    assert "eval" not in summary and (run / "checkpoint.pt").is_file()
