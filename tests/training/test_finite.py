"""What a long run needs: a non-finite update never reaches the weights or a checkpoint, a resumed
run keeps β, takes the config's learning rate and replay settings and draws new scenes, the
learner computes π as the workers act (eval mode), and a stalled intake buys only a batch of
extra updates."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
import torch

from evolve_envs.training.algorithm import TrainContext
from evolve_envs.training.checkpoint import load_checkpoint
from evolve_envs.training.common.finite import LIMIT, NonFiniteError, nonfinite_tensors
from evolve_envs.training.common.trajectory import Trajectory
from evolve_envs.training.config import load_train_config
from evolve_envs.training.distrl import loss as losses
from evolve_envs.training.distrl.algorithm import DistRL
from evolve_envs.training.distrl.config import DistRLConfig
from evolve_envs.training.distrl.learner import Learner
from evolve_envs.training.driver import TrainOptions, run_train
from evolve_envs.training.grpo import loss as grpo_loss
from evolve_envs.training.grpo.algorithm import GRPO
from tests.e2e.test_train import TOY
from tests.training.distrl.test_loss import BOX, rollout, toy_policy

BASE = {"batch_size": 4, "min_buffer": 2, "capacity": 32, "refresh_every": 1000}


def _filled(**cfg) -> Learner:
    learner = Learner(toy_policy(0), DistRLConfig(**{**BASE, **cfg}), BOX, seed=0)
    rng = np.random.default_rng(0)
    learner.ingest([rollout(learner.policy, 4, rng) for _ in range(8)])
    return learner


def _weights(policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def _nan_loss(real):
    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        return dataclasses.replace(out, loss=out.loss * float("nan"))

    return poisoned


def test_a_nonfinite_update_is_skipped_and_too_many_in_a_row_stop_the_run(monkeypatch):
    learner = _filled()
    learner.update()  # one finite update first
    before, prios = _weights(learner.policy), np.array(learner.replay.priorities())
    monkeypatch.setattr(losses, "aride_loss", _nan_loss(losses.aride_loss))
    for k in range(1, LIMIT):
        stats = learner.update()
        assert stats["skipped"] == 1.0 and learner.finite.skipped == k
    # nothing moved: weights, Adam's step count, priorities, the update counter
    after = _weights(learner.policy)
    assert all(torch.equal(before[k], after[k]) for k in before)
    np.testing.assert_array_equal(prios, learner.replay.priorities())
    assert learner.updates == 1 and learner.counters()["skipped_updates"] == LIMIT - 1
    with pytest.raises(NonFiniteError, match=f"skipped {LIMIT} updates in a row"):
        learner.update()
    monkeypatch.undo()
    assert "skipped" not in learner.update() and learner.finite.in_a_row == 0
    assert learner.updates == 2 and not nonfinite_tensors(learner.policy.state_dict())


def test_a_resumed_learner_keeps_beta_and_takes_the_new_rate_and_replay_settings():
    first = _filled(lr=1e-3, alpha=0.6, beta=0.4)
    first.update(run_fraction=0.9)
    beta = first.replay.beta
    assert beta == pytest.approx(0.94)
    state = first.state_dict()
    resumed = Learner(toy_policy(1), DistRLConfig(**{**BASE, "lr": 1e-4, "alpha": 0.0}), BOX)
    resumed.load_state_dict(state)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [1e-4]  # not the saved 1e-3
    assert resumed.replay.uniform and resumed.replay.alpha == 0.0  # the new config's
    assert resumed.replay.total_added == first.replay.total_added  # the counters carry on
    rng = np.random.default_rng(1)
    resumed.ingest([rollout(resumed.policy, 4, rng) for _ in range(4)])
    resumed.update(run_fraction=0.0)  # the new budget has just started
    assert resumed.replay.beta == pytest.approx(beta)  # β never goes back down


def test_the_learner_computes_the_ratio_as_the_workers_act():
    """A transformer policy has dropout (BERT's 0.1): the learner's forward is in eval mode like
    the workers', so on fresh on-policy data π/μ is exactly 1 and nothing is clipped."""
    from evolve_envs.training.policies.transformer import TinyVLAPolicy

    torch.manual_seed(0)
    pol = TinyVLAPolicy(action_dim=1, state_dim=2, image_size=16)
    assert pol.text.config.hidden_dropout_prob > 0
    rng = np.random.default_rng(0)
    trajs = []
    pol.eval()  # as a worker holds it
    for _ in range(4):
        obs = pol.encode_obs({
            "image": rng.integers(0, 255, (6, 16, 16, 3), dtype=np.uint8),
            "state": rng.normal(size=(6, 2)).astype(np.float32),
            "task_description": "open the drawer",
        })  # fmt: skip
        actions, logp = pol.act({k: v[:5] for k, v in obs.items()})
        trajs.append(Trajectory(obs=obs, actions=actions, behaviour_logp=logp.astype(np.float32),
                                rewards=rng.normal(size=5).astype(np.float32),
                                dones=np.zeros(5, bool), policy_version=0))  # fmt: skip
    pol.train()  # whatever mode it was left in
    learner = Learner(pol, DistRLConfig(**{**BASE, "clip": 0.2}), BOX, seed=0)
    learner.ingest(trajs)
    stats = learner.update()
    assert stats["clip_frac"] == 0.0 and abs(stats["approx_kl"]) < 1e-5
    assert stats["mean_rho"] == pytest.approx(1.0, abs=1e-4)


class _Registry:
    class publish:  # noqa: N801 - stands in for an actor method
        @staticmethod
        def remote(*args):
            return None


def test_a_stalled_intake_buys_at_most_one_batch_of_extra_updates():
    cfg = load_train_config({"env": {"id": "evolve_envs/ReachPlace-v0"},
                             "distrl": {**BASE, "max_sample_ratio": 2.0,
                                         "publish_every": 10**6}})  # fmt: skip
    algo = DistRL()
    ctx = TrainContext(cfg, [], _Registry(), None, toy_policy(0), {"action_space": BOX})
    algo.setup(ctx)
    rng = np.random.default_rng(0)
    algo.update([rollout(ctx.policy, 4, rng) for _ in range(8)], 0.0)
    # as if the learner had been the slow side for a long time: 1000 trajectories taken in,
    # only a few sampled; then the intake stops
    algo.learner.trajectories_in = 1000
    updates = 0
    while algo.update([], 0.0).updates:
        updates += 1
        assert updates < 100, "the unused allowance piled up"
    assert updates == 2  # ratio x batch_size samples = 2 updates of batch 4
    # one fresh trajectory allows ratio x 1 more samples: one more update, then none
    assert algo.update([rollout(ctx.policy, 4, rng)], 0.0).updates == 1
    assert algo.update([], 0.0).updates == 0


# ---- through the training loop (real Ray, the toy env), both algorithms --------------------

ALGOS = ["distrl", "grpo"]


def _train(algo: str, run_dir, *overrides: str):
    return run_train(TrainOptions(config=[TOY], algo=algo, run_dir=run_dir,
                                  overrides=["workers.num_workers=1", *overrides],
                                  progress_bar=False, log=io.StringIO()))  # fmt: skip


class _PoisonsWeights:
    """After the third optimizer step, NaN reaches one weight (as a step the guard could not see
    would leave it); the next checkpoint must not be written."""

    def update(self, trajectories, budget_fraction):
        res = super().update(trajectories, budget_fraction)
        if self.counters()["updates"] >= 3:
            with torch.no_grad():
                next(self.ctx.policy.parameters()).view(-1)[0] = math.nan
        return res


class PoisonedDistRL(_PoisonsWeights, DistRL):
    pass


class PoisonedGRPO(_PoisonsWeights, GRPO):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_a_checkpoint_with_nonfinite_weights_is_never_written(ray_local, tmp_path, algo):
    target = f"tests.training.test_finite:Poisoned{'DistRL' if algo == 'distrl' else 'GRPO'}"
    run_dir = tmp_path / algo
    with pytest.raises(NonFiniteError, match="the last checkpoint .* is kept"):
        _train(target, run_dir, "run.max_updates=40", "run.checkpoint_every_updates=1",
               "run.checkpoint_every_s=3600")  # fmt: skip
    ckpt = load_checkpoint(run_dir)  # the last good one, before the poisoned weights
    assert not nonfinite_tensors(ckpt["policy"])
    assert 1 <= ckpt["counters"]["updates"] < 3 + 2  # GRPO: up to 2 steps per round


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_only_nonfinite_losses_stop_the_run_with_the_weights_unharmed(
    ray_local, tmp_path, monkeypatch, algo
):
    monkeypatch.setattr(losses, "aride_loss", _nan_loss(losses.aride_loss))
    monkeypatch.setattr(grpo_loss, "ppo_clip_loss", _nan_loss(grpo_loss.ppo_clip_loss))
    run_dir = tmp_path / algo
    with pytest.raises(NonFiniteError, match=f"skipped {LIMIT} updates in a row"):
        _train(algo, run_dir, "run.max_updates=40", "run.minutes=3")
    ckpt = load_checkpoint(run_dir)  # written when the run stopped, for --resume
    assert not nonfinite_tensors(ckpt["policy"]) and ckpt["counters"]["updates"] == 0
    assert ckpt["counters"]["skipped_updates"] == LIMIT
