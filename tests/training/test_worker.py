"""Rollout workers on real Ray: restart after a kill, no barrier between fast and slow workers."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from evolve_envs import load_train_config
from evolve_envs.training.runtime.weight_registry import WeightRegistry
from evolve_envs.training.worker_env import policy_from_config
from evolve_envs.training.worker_start import start_workers
from tests.helpers.toy_env import ENV_ID


def _config(num_workers: int, overrides: list[dict[str, Any]] | None = None, length: int = 6):
    return load_train_config(
        {
            "env": {"id": ENV_ID, "length": length},
            "reward_model": {"enable": False},
            "workers": {
                "num_workers": num_workers,
                "num_envs": 1,
                "num_cpus": 0.01,
                "env_overrides": overrides or [],
            },
            "policy": {"image_size": 16, "hidden": 16},
        }
    )


class _Collection:
    """Registry + queue + workers, with the first weights published and run() started."""

    def __init__(self, ray: Any, cfg: Any) -> None:
        from ray.util.queue import Queue

        self.ray = ray
        self.registry = ray.remote(WeightRegistry).options(num_cpus=0).remote()
        self.queue = Queue(maxsize=256, actor_options={"num_cpus": 0})
        self.workers = start_workers(cfg, self.registry, self.queue)
        spaces = ray.get(self.workers[0].ready.remote())
        policy = policy_from_config(cfg.policy, spaces["observation_space"], spaces["action_space"])
        self.registry.publish.remote(1, [ray.put(policy.state_dict())])
        self.runs = [w.run.remote() for w in self.workers]
        self.per_worker: dict[int, int] = {}
        self.trajs: list[Any] = []

    def drain(self) -> list[Any]:
        n = self.queue.qsize()
        got = self.queue.get_nowait_batch(n) if n else []
        for t in got:
            t.validate()  # whole, valid trajectories only
            self.per_worker[t.worker_id] = self.per_worker.get(t.worker_id, 0) + 1
        self.trajs.extend(got)
        return got

    def wait_for(self, cond, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out; collected {self.per_worker}"
            self.drain()
            time.sleep(0.05)

    def close(self) -> None:
        self.registry.stop.remote()
        for w in self.workers:
            self.ray.kill(w, no_restart=True)
        self.ray.kill(self.registry)
        self.queue.shutdown()


@pytest.mark.slow
def test_killed_worker_is_restarted_and_collection_goes_on(ray_local) -> None:
    ray = ray_local
    col = _Collection(ray, _config(2))
    try:
        col.wait_for(lambda: col.per_worker.get(0, 0) >= 2 and col.per_worker.get(1, 0) >= 2)
        pid_before = ray.get(col.registry.workers.remote())[0]["pid"]
        ray.kill(col.workers[0], no_restart=False)

        def restarted() -> bool:
            return ray.get(col.registry.workers.remote())[0]["incarnations"] == 2

        col.wait_for(restarted, timeout=90)
        col.drain()  # what the killed process pushed before it died
        col.per_worker.clear()
        # the restarted actor re-runs its constructor and the interrupted run() call
        col.wait_for(lambda: col.per_worker.get(0, 0) >= 3, timeout=90)
        info = ray.get(col.registry.workers.remote())[0]
        assert info["pid"] != pid_before
        assert info["incarnations"] == 2
        assert col.per_worker.get(1, 0) >= 1  # the other worker never stopped
        lengths = {len(t) for t in col.trajs}
        assert lengths == {6}  # whole episodes, never a half-pushed one
    finally:
        col.close()


@pytest.mark.slow
def test_a_slow_worker_does_not_hold_back_the_others(ray_local) -> None:
    ray = ray_local
    # worker 2 steps 10x slower (sleep-based, so the 2-core box is not the bottleneck)
    fast, slow = {"step_delay_s": 0.01}, {"step_delay_s": 0.1}
    col = _Collection(ray, _config(3, [fast, fast, slow], length=5))
    try:
        col.wait_for(lambda: col.per_worker.get(2, 0) >= 3, timeout=180)
        counts = dict(col.per_worker)
        # with a barrier every worker would deliver as many trajectories as the slowest; here the
        # fast ones deliver several times more (ideal 10x; a 2-core machine under heavy load
        # starves the fast workers of CPU, so the test asks for 2x)
        assert counts.get(0, 0) >= 2 * counts[2], counts
        assert counts.get(1, 0) >= 2 * counts[2], counts
        versions = np.array([t.policy_version for t in col.trajs])
        assert (versions == 1).all()
    finally:
        col.close()


def test_segments_and_a_full_queue_in_process(ray_local) -> None:
    """``run`` in this process: fixed-length segments, and a full queue drops whole ones."""
    from ray.util.queue import Queue

    from evolve_envs.training.worker import RolloutWorker

    ray = ray_local
    cfg = _config(1, length=6)
    cfg = cfg.model_copy(update={"workers": cfg.workers.model_copy(update={"segment_length": 4})})
    registry = ray.remote(WeightRegistry).options(num_cpus=0).remote()
    queue = Queue(maxsize=3, actor_options={"num_cpus": 0})
    worker = RolloutWorker(cfg, 0, registry, queue)
    try:
        registry.publish.remote(5, [ray.put(worker.policy.state_dict())])
        counts: dict[str, int] = {}
        loop = threading.Thread(target=lambda: counts.update(worker.run(max_seconds=120)))
        loop.start()
        deadline = time.monotonic() + 120
        while worker.counts["dropped"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        registry.stop.remote()
        loop.join(timeout=60)
        trajs = queue.get_nowait_batch(queue.qsize())
        assert len(trajs) == 3 == counts["pushed"] and counts["dropped"] >= 1
        # an episode of 6 steps is cut into segments of 4 and 2; only the second ends it
        assert [len(t) for t in trajs] == [4, 2, 4]
        assert [len(t.episode_stats) for t in trajs] == [0, 1, 0]
        assert trajs[1].episode_stats[0]["length"] == 6
        assert all(not t.dones.any() for t in trajs)  # truncated, never terminated
        assert all(t.policy_version == 5 for t in trajs)
        np.testing.assert_array_equal(trajs[0].obs["state"][4], trajs[1].obs["state"][0])
        # a second run() (the registry still says stop) reports only its own work: the
        # registry's totals stay equal to the worker's counters
        worker.run(max_seconds=30)
        keys = ("pushed", "dropped", "env_steps", "episodes")

        def registry_totals() -> dict[str, int]:
            row = ray.get(registry.workers.remote())[0]
            return {k: row.get(k, 0) for k in keys}

        deadline = time.monotonic() + 30  # reports are fire-and-forget: wait for them to land
        while registry_totals() != {k: worker.counts[k] for k in keys}:
            assert time.monotonic() < deadline, (registry_totals(), worker.counts)
            time.sleep(0.05)
    finally:
        worker.close()
        ray.kill(registry)
        queue.shutdown()


def test_grpo_groups_start_from_one_initial_state() -> None:
    """The seeds GRPO hands out repeat within a group, and a worker resets its envs from them:
    the episodes of a group start from the same scene; other groups from other scenes."""
    from evolve_envs.training.grpo.groups import group_seeds
    from evolve_envs.training.worker import RolloutWorker

    cfg = load_train_config(
        {
            "env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 3},
            "reward_model": {"enable": False},
            "workers": {"num_envs": 4},
        }
    )
    seeds = group_seeds(4, 2, np.random.default_rng(0))
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3] and seeds[0] != seeds[2]
    worker = RolloutWorker(cfg, worker_id=0)
    try:
        trajs = worker.collect_episodes(seeds, None, version=0)
    finally:
        worker.close()
    first = [t.obs["image"][0] for t in trajs]
    assert np.array_equal(first[0], first[1]) and np.array_equal(first[2], first[3])
    assert not np.array_equal(first[0], first[2])
