"""The train loops end to end on Ray: metrics and checkpoints written, resume continues."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evolve_envs import load_train_config
from evolve_envs.training.checkpoint import load_checkpoint
from evolve_envs.training.config import read_stored
from evolve_envs.training.distrl.learner import Learner
from evolve_envs.training.driver import TrainOptions, run_train
from evolve_envs.training.worker_env import policy_from_config
from tests.helpers.toy_env import ENV_ID, ToyEnv

ROOT = Path(__file__).resolve().parents[2]

TOY = {
    "env": {"id": ENV_ID, "length": 6},
    "reward_model": {"enable": False},
    "workers": {"num_workers": 2, "num_envs": 2, "num_cpus": 0.01},
    "policy": {"image_size": 16, "hidden": 16},
    "distrl": {"min_buffer": 4, "batch_size": 4, "refresh_every": 3},
    "grpo": {"group_size": 2},
    "run": {"minutes": 2, "log_every_s": 1, "checkpoint_every_s": 60, "tensorboard": False},
}


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_checkpoint_then_resume_continues_counters_version_and_weights(ray_local, tmp_path):
    run_dir = tmp_path / "run"
    opts = dict(config=[TOY], algo="distrl", progress_bar=False, log=io.StringIO())
    one = ["workers.num_workers=1"]
    first = run_train(TrainOptions(run_dir=run_dir, overrides=[*one, "run.max_updates=6"], **opts))
    ckpt = load_checkpoint(run_dir)
    assert ckpt["counters"]["updates"] == first.counters["updates"] == 6
    assert ckpt["counters"]["version"] == 7  # initial publish + one per update
    assert ckpt["replay"]["capacity"] == 256 and ckpt["replay"]["total_added"] >= 4

    # a learner restored from the checkpoint holds exactly the saved weights and counters
    cfg = load_train_config(read_stored(ckpt["config"]))
    env = ToyEnv()
    learner = Learner(
        policy_from_config(cfg.policy, env.observation_space, env.action_space),
        cfg.distrl,
        env.action_space,
    )
    learner.load_state_dict(ckpt)
    for key, value in ckpt["policy"].items():
        assert torch.equal(learner.policy.state_dict()[key], value), key
    assert learner.counters() == ckpt["counters"]
    assert learner.optimizer.state_dict()["state"]  # Adam moments came back too

    resumed = run_train(
        TrainOptions(
            resume=run_dir, overrides=[*one, "run.max_updates=4"], **{**opts, "config": []}
        )
    )
    assert resumed.run_dir == run_dir
    assert resumed.counters["updates"] == 10
    assert resumed.counters["version"] == 12  # 7, +1 publish at start, +4 updates
    assert resumed.counters["trajectories_in"] > ckpt["counters"]["trajectories_in"]
    assert load_checkpoint(run_dir)["counters"]["updates"] == 10
    updates = [int(r["updates"]) for r in _rows(run_dir)]
    assert updates == sorted(updates) and updates[-1] == 10


@pytest.mark.slow
def test_grpo_runs_rounds_and_checkpoints(ray_local, tmp_path):
    run_dir = tmp_path / "grpo"
    res = run_train(
        TrainOptions(config=[TOY], algo="grpo", run_dir=run_dir, progress_bar=False,
                     overrides=["run.max_updates=4", "grpo.epochs=2"], log=io.StringIO())
    )  # fmt: skip
    assert res.counters["updates"] >= 4 and res.counters["rounds"] >= 2
    assert res.counters["episodes"] == 4 * res.counters["rounds"]  # 2 groups of 2 per round
    ckpt = load_checkpoint(run_dir)
    assert ckpt["algo"] == "grpo" and ckpt["counters"]["rounds"] == res.counters["rounds"]
    rows = _rows(run_dir)
    assert rows and float(rows[-1]["staleness"]) == 0.0  # synchronous: always the newest policy


def test_bad_config_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("distrl:\n  batchsize: 4\n")
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.cli.main", "train", "--config", str(bad)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "distrl.batchsize: unknown key (did you mean 'batch_size'?)" in proc.stderr


_SHORT = ["workers.num_workers=1", "workers.num_envs=2", "workers.num_cpus=0.01",
          "env.max_episode_steps=10", "run.log_every_s=2"]  # fmt: skip
#: each algorithm's small batches (the other algorithm's block is refused)
_SHORT_BLOCK = {
    "distrl": ["distrl.min_buffer=2", "distrl.batch_size=2"],
    "grpo": ["grpo.group_size=2", "grpo.episodes_per_env=1"],
}


def short_reach_place(algo: str = "distrl") -> list[str]:
    """Overrides for a short ReachPlace run of ``algo``."""
    return [*_SHORT, *_SHORT_BLOCK[algo]]


SHORT_REACH_PLACE = short_reach_place("distrl")


@pytest.mark.slow
def test_train_command_on_reach_place_with_rewards_from_the_service(ray_local, tmp_path, capsys):
    from evolve_envs.cli.main import main

    run_dir = tmp_path / "rp"
    config = str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")
    argv = ["train", "--config", config, "--run-dir", str(run_dir), "--minutes", "0.2"]
    # the workers record too; a recording takes each step's reward as it comes (calls: async)
    record = [f"record.dir={tmp_path / 'rec'}", "record.camera=image", "reward_model.calls=async"]
    assert main([*argv, "--no-progress-bar", *SHORT_REACH_PLACE, *record]) == 0
    assert "checkpoint.pt" in capsys.readouterr().out
    rows = _rows(run_dir)
    assert rows, "no metrics rows"
    done = [r for r in rows if r["episodes"] not in ("", "0")]
    assert done, rows
    # the reward model answered: its progress is reported and nothing fell back
    assert all(r["model_progress"] != "" for r in done)
    assert sum(int(r["fallbacks"]) for r in rows) == 0
    assert int(rows[-1]["updates_total"]) >= 1
    ckpt = load_checkpoint(run_dir)
    assert ckpt["counters"]["updates"] == int(rows[-1]["updates_total"])
    assert (run_dir / "tensorboard").is_dir() and (run_dir / "summary.json").is_file()
    from evolve_envs.recording.episodes import open_recording

    recorded = open_recording(tmp_path / "rec")
    assert len(recorded) >= 1 and recorded[0].meta["task"].startswith("pick up the red block")
    assert any(p is not None for ep in recorded for p in ep.column("model_progress"))


def test_a_dead_reward_service_stops_the_run_at_start_up(ray_local, tmp_path, capsys):
    import socket

    from evolve_envs.cli.main import main

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")
    rc = main(
        ["train", "--config", config, "--run-dir", str(tmp_path / "dead"), "--minutes", "1",
         f"reward_model.endpoint=http://127.0.0.1:{port}", "reward_model.timeout=2",
         "reward_model.max_retries=0", *SHORT_REACH_PLACE]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 3  # checked before Ray starts: one line, nothing written
    assert "unreachable" in err and "is the service running" in err, err
    assert not (tmp_path / "dead").exists()


@pytest.mark.slow
def test_a_reward_service_outage_mid_run_follows_the_fail_fast_policy(ray_local, tmp_path, capsys):
    """With ``fail_on_request_error: true`` a service that dies mid-run stops the run with the
    worker and the cause named and a checkpoint to resume from (it never hangs, never trains on
    silent zeros)."""
    import threading

    from evolve_envs.cli.main import main
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    svc = EmbeddedService("mock", {"rule": "reach_place"}).start()
    config = str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")
    metrics = tmp_path / "out" / "metrics.csv"
    quit_waiting = threading.Event()

    def stop_once_running() -> None:  # the first metrics row: the workers are collecting
        while not quit_waiting.wait(0.2):
            if metrics.is_file():
                svc.stop()
                return

    stopper = threading.Thread(target=stop_once_running, daemon=True)
    stopper.start()
    try:
        rc = main(
            ["train", "--config", config, "--run-dir", str(tmp_path / "out"), "--minutes", "2",
             "--no-progress-bar", f"reward_model.endpoint={svc.url}", "reward_model.timeout=2",
             "reward_model.max_retries=0", "reward_model.fail_on_request_error=true",
             *SHORT_REACH_PLACE]
        )  # fmt: skip
    finally:
        quit_waiting.set()
        stopper.join()
        svc.stop()
    err = capsys.readouterr().err
    assert rc == 3, err  # the service's failure, in one line, with the way back
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "evolve-envs train: error: the reward service"
    ), err
    assert "strict mode" in err and "rollout worker" in err and "--resume" in err, err
    assert (tmp_path / "out" / "checkpoint.pt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["distrl", "grpo"])
def test_the_tuned_config_trains_either_algorithm_by_name(ray_local, tmp_path, capsys, algo):
    """``evolve-envs train --config reach_place_tuned --algo distrl|grpo`` as documented."""
    from evolve_envs.cli.main import main

    tuned = load_train_config("reach_place_tuned", overrides=[f"algo={algo}"])
    block = tuned.distrl if algo == "distrl" else tuned.grpo
    run_dir = tmp_path / algo
    argv = ["train", "--config", "reach_place_tuned", "--algo", algo, "--run-dir", str(run_dir)]
    assert main([*argv, "--minutes", "0.15", "--no-progress-bar", *short_reach_place(algo)]) == 0
    ckpt = load_checkpoint(run_dir)
    assert ckpt["algo"] == algo and ckpt["counters"]["updates"] >= 1
    stored = load_train_config(read_stored(ckpt["config"]))
    # the run trained with the tuned block (the short overrides touch batch sizes only)
    ran = stored.distrl if algo == "distrl" else stored.grpo
    assert ran.lr == block.lr and ran.entropy_coef == block.entropy_coef
