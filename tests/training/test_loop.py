"""One training loop for every algorithm: checkpoint cadence, resume and worker death behave
the same for DistRL and GRPO (real Ray, the toy env)."""

from __future__ import annotations

import io
import time

import pytest
import ray

from evolve_envs.training import loop
from evolve_envs.training.checkpoint import load_checkpoint
from evolve_envs.training.distrl.algorithm import DistRL
from evolve_envs.training.driver import TrainOptions, run_train
from evolve_envs.training.grpo.algorithm import GRPO
from tests.e2e.test_train import TOY

ALGOS = ["distrl", "grpo"]


def _train(algo: str, run_dir, *overrides: str, resume: bool = False):
    opts = {"resume": run_dir} if resume else {"config": [TOY], "run_dir": run_dir}
    return run_train(
        TrainOptions(algo=algo, overrides=list(overrides), progress_bar=False,
                     log=io.StringIO(), **opts)
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_checkpoints_follow_the_update_cadence(ray_local, tmp_path, monkeypatch, algo):
    saved: list[int] = []
    real = loop.save_checkpoint

    def spy(run_dir, payload):
        saved.append(int(payload["counters"]["updates"]))
        return real(run_dir, payload)

    monkeypatch.setattr(loop, "save_checkpoint", spy)
    res = _train(algo, tmp_path / algo, "run.max_updates=12", "run.checkpoint_every_updates=4",
                 "run.checkpoint_every_s=3600", "workers.num_workers=1")  # fmt: skip
    assert res.counters["updates"] >= 12
    cadence, final = saved[:-1], saved[-1]
    assert final == res.counters["updates"]
    assert len(cadence) >= 2, saved  # at least at ~4 and ~8 updates, not only at the end
    gaps = [b - a for a, b in zip([0, *cadence], cadence, strict=False)]
    step = 2 if algo == "grpo" else 1  # GRPO: epochs x minibatches optimizer steps per round
    assert all(4 <= g < 4 + step for g in gaps), saved


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_resume_continues_counters_and_weights(ray_local, tmp_path, algo):
    run_dir = tmp_path / algo
    first = _train(algo, run_dir, "run.max_updates=4", "workers.num_workers=1")
    ckpt = load_checkpoint(run_dir)
    assert ckpt["algo"] == algo and ckpt["counters"] == first.counters
    resumed = _train(algo, run_dir, "run.max_updates=4", "workers.num_workers=1", resume=True)
    assert resumed.run_dir == run_dir
    assert resumed.counters["updates"] == first.counters["updates"] + 4
    assert resumed.counters["version"] > first.counters["version"]
    assert load_checkpoint(run_dir)["counters"] == resumed.counters


class _KillsWorkerZero:
    """Kills worker 0's process once, after the second collection, and waits until Ray has
    restarted it (on a loaded machine the run could otherwise end before the new process says
    hello)."""

    def collect(self):
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls == 2:
            ray.kill(self.ctx.workers[0], no_restart=False)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                workers = ray.get(self.ctx.registry.workers.remote(), timeout=30)
                if workers.get(0, {}).get("incarnations", 0) >= 2:
                    break
                time.sleep(0.2)
        return super().collect()


class KillingDistRL(_KillsWorkerZero, DistRL):
    pass


class KillingGRPO(_KillsWorkerZero, GRPO):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_a_killed_worker_is_restarted_and_the_run_finishes(ray_local, tmp_path, algo):
    target = f"tests.training.test_loop:Killing{'DistRL' if algo == 'distrl' else 'GRPO'}"
    res = _train(target, tmp_path / algo, "run.max_updates=10")
    assert res.counters["updates"] >= 10
    assert res.last_metrics["worker_restarts"] >= 1
    assert load_checkpoint(tmp_path / algo)["counters"]["updates"] == res.counters["updates"]
