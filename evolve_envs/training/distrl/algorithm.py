"""DistRL as an :class:`~evolve_envs.training.algorithm.Algorithm`: workers collect, the learner
learns from prioritized replay, nobody waits (``distrl.barrier`` makes them wait). The schedule
is described in docs/DISTRL.md.

Example:
    >>> DistRL.name
    'distrl'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.training.algorithm import TrainContext, UpdateResult

if TYPE_CHECKING:
    from ray import ObjectRef

    from evolve_envs.training.common.trajectory import Trajectory

__all__ = ["DistRL"]


class DistRL:
    """Asynchronous actor-learner training with prioritized replay and A-RIDE (docs/DISTRL.md);
    the learning rule is :class:`~evolve_envs.training.distrl.learner.Learner`'s."""

    name = "distrl"

    def setup(self, ctx: TrainContext) -> None:
        from evolve_envs.training.distrl.learner import Learner

        if ctx.cfg.distrl is None:
            raise ConfigError(f"algo: {ctx.cfg.algo} runs DistRL, but its config holds no distrl:")
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.settings = ctx.cfg.distrl
        self.learner = Learner(
            ctx.policy, self.settings, ctx.spaces["action_space"], seed=ctx.cfg.run.seed
        )
        self.runs: list[ObjectRef] = []
        self.ratio_spent = 0  # samples counted against max_sample_ratio (see update)
        self.barrier = {"barriers": 0, "barrier_wait_ms": 0}

    def _publish(self) -> None:
        import ray

        version, sd = self.learner.publish()
        self.ctx.registry.publish.remote(version, [ray.put(sd)])

    def start(self) -> None:
        self._publish()
        self.runs = [w.run.remote() for w in self.ctx.workers]

    def collect(self) -> list[Trajectory]:
        n = self.ctx.queue.qsize()
        return self.ctx.queue.get_nowait_batch(n) if n else []

    def update(self, trajectories: list[Trajectory], budget_fraction: float) -> UpdateResult:
        if self.settings.barrier:
            return self._update_at_barrier(trajectories, budget_fraction)
        return self._update_once(trajectories, budget_fraction)

    def _update_at_barrier(
        self, trajectories: list[Trajectory], budget_fraction: float
    ) -> UpdateResult:
        """``distrl.barrier``: when an update is due, stop the workers, train while the sample
        ratio allows, publish, let them go on."""
        from evolve_envs.training.algorithm import check_worker_calls
        from evolve_envs.training.runtime.pause import hold_workers

        learner, c = self.learner, self.settings
        learner.ingest(trajectories)
        due = learner.ready() and (
            c.max_sample_ratio is None
            or self.ratio_spent < c.max_sample_ratio * max(1, learner.trajectories_in)
        )
        if not due:
            return UpdateResult()
        waited = hold_workers(
            self.ctx.registry, len(self.ctx.workers), lambda: check_worker_calls(self.runs)
        )
        self.barrier["barriers"] += 1
        self.barrier["barrier_wait_ms"] += int(1000 * waited)
        total = UpdateResult()
        try:
            batch = self.collect()  # what the workers queued before they stopped
            while True:
                res = self._update_once(batch, budget_fraction, publish=False)
                batch = []
                if not res.updates:
                    break
                total = UpdateResult(
                    updates=total.updates + res.updates,
                    samples=total.samples + res.samples,
                    stats=res.stats,
                )
                if c.max_sample_ratio is None:
                    break
            if total.updates:
                self._publish()
        finally:
            self.ctx.registry.resume.remote()
        return total

    def _update_once(
        self, trajectories: list[Trajectory], budget_fraction: float, publish: bool = True
    ) -> UpdateResult:
        learner, c = self.learner, self.settings
        learner.ingest(trajectories)
        ratio = c.max_sample_ratio
        if ratio is not None:
            allowed = ratio * max(1, learner.trajectories_in)
            # allowance unused while the learner was the slower side does not pile up: a stall
            # of the intake later (workers restarting, a slow reward service) buys at most one
            # batch's worth of extra updates on the same buffer
            self.ratio_spent = max(self.ratio_spent, allowed - ratio * c.batch_size)
            if self.ratio_spent >= allowed:
                return UpdateResult()
        if not learner.ready():
            return UpdateResult()
        stats = learner.update(budget_fraction)
        if stats.get("skipped"):  # a non-finite step: nothing learned, nothing to publish
            return UpdateResult()
        self.ratio_spent += c.batch_size
        if publish and learner.updates % c.publish_every == 0:
            self._publish()
        return UpdateResult(updates=1, samples=c.batch_size, stats=stats)

    def counters(self) -> dict[str, int]:
        return self.learner.counters()

    def metrics(self) -> dict[str, float]:
        learner = self.learner
        row: dict[str, float] = {
            "queue_depth": self.ctx.queue.qsize(),
            "buffer_fill": learner.replay.live / learner.cfg.capacity,
            "priority_spread": learner.priority_spread(),
            "trajectories_in": learner.trajectories_in,
            "env_steps_in": learner.env_steps_in,
            "retired": learner.replay.total_retired,
            "skipped_updates": learner.finite.skipped,
            **self.barrier,  # distrl.barrier: pauses of the workers, and the wait for them
        }
        keys = (
            *("loss", "policy_loss", "value_loss", "entropy", "beta", "grad_norm", "approx_kl"),
            *("clip_frac", "sample_lag_mean", "sample_lag_max", "entropy_coef_now", "value_scale"),
        )
        # every column from the first row on (the CSV header is fixed by it): NaN until the
        # first update
        row.update({k: learner.last_stats.get(k, float("nan")) for k in keys})
        return row

    def running_calls(self) -> list[ObjectRef]:
        return self.runs

    def state_dict(self) -> dict[str, object]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.learner.load_state_dict(state)

    def stop(self) -> None:
        import ray

        self.ctx.registry.stop.remote()
        if self.runs:
            ray.wait(self.runs, num_returns=len(self.runs), timeout=30)
