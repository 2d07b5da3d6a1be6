"""Rollout workers with settled episodes (``reward_model.calls: deferred``): the trajectories
they hand on are the ones ``calls: sync`` makes for the same actions, against a real embedded
reward service (the mock backend, with a latency so that answers do come late)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from evolve_envs.training.config import load_train_config
from evolve_envs.training.episode import Episode, EpisodeSlot
from evolve_envs.training.worker import RolloutWorker


def _config(calls: str, *, length: int = 12, terminate: bool = False, num_envs: int = 1,
            latency_ms: float = 30.0, **workers: Any) -> Any:  # fmt: skip
    return load_train_config(
        {
            "env": {
                "id": "evolve_envs/ReachPlace-v0",
                "image_size": 32,
                "max_episode_steps": length,
            },  # fmt: skip
            "reward_model": {
                "enable": True,
                "kind": "progress",
                "endpoint": "embedded",
                "embedded_backend": "mock",
                "embedded_backend_kwargs": {
                    "rule": "change",
                    "latency_ms": latency_ms,
                    "change_scale": 8,
                },  # fmt: skip
                "camera": "image",
                "mode": "pairwise",
                "calls": calls,
                "start_step": 0,
                "call_every": 3,
                "milestone_every": 6,
                "done_threshold": 0.3,
                "terminate_on_done": terminate,
                "check_at_episode_end": True,
                "dense_reward": True,
                "alarm": {"enable": True, "window": 2, "baseline": 2},
            },
            "workers": {"num_workers": 1, "num_envs": num_envs, **workers},
            "policy": {
                "image_key": "image",
                "state_key": "state",
                "image_size": 16,
                "hidden": 16,
            },  # fmt: skip
        }
    )


def _episodes(calls: str, seeds: list[int], **kw: Any) -> list[Any]:
    """One GRPO-style call per seed list, the policy's noise seeded alike for every mode."""
    torch.manual_seed(0)  # the same initial weights for every mode
    worker = RolloutWorker(_config(calls, num_envs=len(seeds), **kw), worker_id=0)
    try:
        torch.manual_seed(1)
        return worker.collect_episodes(seeds, None, version=0)
    finally:
        worker.close()


def _same_steps(a: Any, b: Any) -> None:
    np.testing.assert_array_equal(a.actions, b.actions)
    for k in a.obs:
        np.testing.assert_array_equal(a.obs[k], b.obs[k])
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.dones, b.dones)


def test_a_settled_episode_is_the_sync_episode() -> None:
    sync = _episodes("sync", [3])
    deferred = _episodes("deferred", [3])
    assert len(sync) == len(deferred) == 1
    _same_steps(sync[0], deferred[0])
    assert np.abs(sync[0].rewards).sum() > 0  # the model paid something: a real comparison
    assert deferred[0].episode_stats[0]["return"] == pytest.approx(float(sync[0].rewards.sum()))
    # the hacking alarm was fed the settled episode: its state is in the stats, as under sync
    assert "alarm_firing" in sync[0].episode_stats[0]
    assert deferred[0].episode_stats[0]["alarm_firing"] == sync[0].episode_stats[0]["alarm_firing"]


def test_steps_after_a_model_done_are_cut_as_sync_never_plays_them() -> None:
    sync = _episodes("sync", [5], terminate=True, length=30)
    deferred = _episodes("deferred", [5], terminate=True, length=30)
    (s,), (d,) = sync, deferred
    assert s.terminated and len(s) < 30  # the model ended the sync episode early
    _same_steps(s, d)
    assert d.episode_stats[0]["cut_steps"] > 0
    assert d.episode_stats[0]["cut_steps"] + len(d) == 30  # the deferred env played on


def _played(steps: int) -> EpisodeSlot:
    """A slot whose env settles later, with one ended episode (index 4) of ``steps`` steps."""
    records: list[Any] = []
    slot = EpisodeSlot(lambda wait: [records.pop()] if records else [])
    slot.records = records  # type: ignore[attr-defined]
    slot.start(4)
    for t in range(steps):
        slot.add({"s": np.full(1, t, np.float32)}, np.zeros(1, np.float32), 0.0, t, t == steps - 1)
    slot.end({"s": np.full(1, steps, np.float32)}, {}, terminated=False)
    return slot


class _Record:
    index, length, cut_steps, terminated, truncated, alarm = 4, 5, 0, True, False, None
    rewards = np.arange(5, dtype=np.float32)
    summary = {"progress": 40.0}


def test_segments_of_a_settled_episode_keep_its_steps() -> None:
    slot = _played(5)
    slot.records.append(_Record())  # type: ignore[attr-defined]
    segs = slot.ready(worker_id=2, segment_length=2)
    assert [len(s) for s in segs] == [2, 2, 1]
    assert [s.dones.tolist() for s in segs] == [[False, False], [False, False], [True]]
    assert [s.policy_version for s in segs] == [0, 2, 4]
    assert np.concatenate([s.rewards for s in segs]).tolist() == [0, 1, 2, 3, 4]
    assert segs[1].obs["s"][:, 0].tolist() == [2, 3, 4]  # the row after a segment: next obs
    assert [len(s.episode_stats) for s in segs] == [0, 0, 1]
    assert segs[-1].episode_stats[0]["success"] == 1.0
    assert slot.settled == 1 and slot.in_flight == 0


def test_a_record_that_does_not_fit_the_episode_played_is_refused() -> None:
    record = _Record()
    record.length = 4  # 4 + 0 cut steps for 5 played: not this episode
    ep = _played(5).waiting[4]
    with pytest.raises(ValueError, match="does not fit the 5 steps played"):
        ep.settle(record)  # type: ignore[arg-type]
    assert isinstance(ep, Episode) and ep.steps == 5  # nothing was cut


def test_rewards_known_at_each_step_go_as_full_segments() -> None:
    slot = EpisodeSlot()
    for t in range(5):
        slot.add({"s": np.full(1, t, np.float32)}, np.zeros(1, np.float32), 0.0, t, False, 1.0)
        nxt = {"s": np.full(1, t + 1, np.float32)}
        segs = slot.ready(worker_id=0, segment_length=2, next_inputs=lambda nxt=nxt: nxt)
        assert [len(s) for s in segs] == ([2] if t in (1, 3) else [])
    slot.end({"s": np.full(1, 5, np.float32)}, {"is_success": True}, terminated=True)
    [last] = slot.ready(worker_id=0, segment_length=2)
    assert len(last) == 1 and last.terminated and last.obs["s"][:, 0].tolist() == [4, 5]
    assert last.episode_stats[0]["return"] == 5.0 and last.episode_stats[0]["length"] == 5


def test_waiting_for_an_episode_the_env_never_settles_raises() -> None:
    slot = EpisodeSlot(lambda wait: [])
    slot.start(0)
    slot.add({"s": np.zeros(1, np.float32)}, np.zeros(1, np.float32), 0.0, 0, False)
    slot.end({"s": np.zeros(1, np.float32)}, {}, terminated=False)
    with pytest.raises(RuntimeError, match="settled none of its 1 ended episodes"):
        slot.ready(worker_id=0, wait=True)


class _ListQueue:
    """A queue the worker pushes into in this process (anything with ``put_nowait``)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put_nowait(self, item: Any) -> None:
        self.items.append(item)


def _run(ray: Any, calls: str, seconds: float, **kw: Any) -> tuple[list[Any], dict[str, int]]:
    """DistRL's collection loop for ``seconds`` in this process, weights from a registry actor."""
    from evolve_envs.training.runtime.weight_registry import WeightRegistry

    cfg = _config(calls, num_envs=2, **kw)
    registry = ray.remote(WeightRegistry).options(num_cpus=0).remote()
    queue = _ListQueue()
    worker = RolloutWorker(cfg, worker_id=0, registry=registry, queue=queue)
    try:
        torch.manual_seed(0)
        policy = type(worker.policy).from_spaces(
            worker.envs[0].observation_space, worker.envs[0].action_space,
            image_key="image", state_key="state", image_size=16, hidden=16,
        )  # fmt: skip
        ray.get(registry.publish.remote(1, [ray.put(policy.state_dict())]))
        torch.manual_seed(1)
        counts = worker.run(max_seconds=seconds)
    finally:
        worker.close()
        ray.kill(registry)
    return queue.items, counts


def test_distrl_workers_push_settled_episodes_equal_to_sync(ray_local) -> None:
    sync, _ = _run(ray_local, "sync", 6.0)
    deferred, counts = _run(ray_local, "deferred", 6.0, segment_length=5)
    # segments of one episode go together; rebuild the episodes to compare them with sync's
    episodes, current = [], []
    for traj in deferred:
        current.append(traj)
        if traj.episode_stats:
            episodes.append(current)
            current = []
    assert not current, "a segment was pushed without the rest of its episode"
    assert all(len(t) <= 5 for t in deferred)
    by_first_action = {t.actions[0].tobytes(): t for t in sync}
    matched = 0
    for segs in episodes:
        whole = np.concatenate([s.rewards for s in segs])
        stats = segs[-1].episode_stats[0]
        assert stats["length"] == len(whole) == 12 and stats["cut_steps"] == 0
        assert stats["return"] == pytest.approx(float(whole.sum()))
        twin = by_first_action.get(segs[0].actions[0].tobytes())
        if twin is not None:  # the same episode played under sync
            np.testing.assert_array_equal(np.concatenate([s.actions for s in segs]), twin.actions)
            np.testing.assert_array_equal(whole, twin.rewards)
            matched += 1
    assert matched >= 2, f"only {matched} episodes were played under both modes"
    # every ended episode was settled and handed on by the end of run()
    assert counts["settled"] == len(episodes) == counts["episodes"]
    assert counts["unsettled"] == 0 and counts["cut_steps"] == 0
    assert counts["env_steps"] >= 12 * len(episodes)
