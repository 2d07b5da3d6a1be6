"""Late rewards (``calls: deferred``) through RLinf's own rollout loop, against ``calls: sync``.

RLinf 0.3's ``EnvWorker._run_interact_once`` runs in-process on a :class:`ProgressEnvWorker`
(no Ray actor: the rollout worker's side of its channels is a fixed policy), over the RLinf
stand-in env and the real reward server (mock backend). What RLinf puts on the actor channel
with ``deferred`` must equal what it puts there with ``sync``, step for step, while the env
worker never waits for an answer during the epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch
from omegaconf import OmegaConf

from evolve_envs.progress import deferred
from evolve_envs.progress.config_error import ConfigError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.integrations.rlinf.standin_env import StandinLiberoEnv, standin_cfg

worker_module = pytest.importorskip("evolve_envs.integrations.rlinf.worker")
embodied_io = pytest.importorskip("rlinf.data.embodied_io_struct")

N, CHUNK, CHUNKS = 4, 4, 4  # sub-envs, actions per chunk, chunk steps per rollout epoch


@pytest.fixture(scope="module")
def service() -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity", "latency_ms": 150}).start()
    try:
        yield svc
    finally:
        svc.stop()


def block(url: str, calls: str, **extra: object) -> dict[str, object]:
    return {
        "enable": True,
        "endpoint": url,
        "calls": calls,
        "mode": "incremental",
        "start_step": 2,
        "call_every": 2,
        "done_threshold": 0.5,
        **extra,
    }


class Channel:
    """The actor channel: keeps what RLinf puts on it."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def put(self, item: object, async_op: bool = False) -> None:
        self.items.append(item)


def policy(epoch: int, k: int) -> torch.Tensor:
    """Chunk actions [N, C, 7]: sub-envs move at different speeds, some back and forth."""
    a = torch.zeros((N, CHUNK, 7))
    speed = torch.tensor([1.0, 0.5, 0.25, -0.5])
    a[:, :, 0] = speed[:, None] * (1 if (k + epoch) % 3 else -1)
    a[0, :, 0] = 1.0  # sub-env 0 reaches the model's done (50) mid-chunk
    return a


def make_worker(
    url: str,
    calls: str,
    *,
    auto_reset: bool,
    epochs: int,
    pipeline: bool = False,
    episode_steps: int = CHUNK * CHUNKS,
    **rm: object,
):
    """A ProgressEnvWorker with RLinf's rollout loop state set, its env built by RLinf."""
    cls = worker_module.ProgressEnvWorker
    w = cls.__new__(cls)
    train = {
        **standin_cfg(auto_reset=auto_reset, max_episode_steps=episode_steps, success_at=101),
        "env_type": "libero",
        "max_steps_per_rollout_epoch": CHUNK * CHUNKS,
        "rollout_epoch": epochs,
        "video_cfg": {"save_video": False},
        "reward_model": block(url, calls, **rm),
    }
    w.cfg = OmegaConf.create(
        {
            "env": {"train": train},
            "rollout": {"group_name": "rollout"},
            "algorithm": {"gamma": 1.0},
            "runner": {},
        }
    )
    w.stage_num, w._rank, w._world_size, w._worker_info = 1, 0, 1, None
    w._timer_metrics, w._accelerator_type = {}, None
    w.model_cfg = OmegaConf.create(
        {"num_action_chunks": CHUNK, "action_dim": 7, "model_type": "openpi"}
    )
    w.rollout_epoch, w.n_train_chunk_steps = epochs, CHUNKS
    w.train_num_envs_per_stage = w.train_batch_size = N
    w._prefetched_train_bootstrap = None
    w.env_decoupled_mode = w.collect_transitions = False
    w.use_training_pipeline = pipeline
    w.collect_prev_infos, w.actor_split_num = True, 1
    w.reward_mode, w.history_reward_assign, w.use_external_reward_model = "per_step", False, False
    w.env_list = w._setup_env_and_wrappers(StandinLiberoEnv, w.cfg.env.train, N)
    if auto_reset:
        w.env_list[0].is_start = True
        obs, _ = w.env_list[0].reset()
        w.last_obs_list, w.last_intervened_info_list = [obs], [(None, None)]
    steps = {"epoch": 0, "k": 0}

    def recv_from(**_: object):
        actions = policy(steps["epoch"], steps["k"])
        steps["k"] += 1
        if steps["k"] > CHUNKS:  # the epoch's closing result (bootstrap values only)
            steps["epoch"], steps["k"] = steps["epoch"] + 1, 0
        return embodied_io.RolloutResult(
            actions=actions,
            prev_logprobs=torch.zeros((N, CHUNK)),
            prev_values=torch.zeros((N, 1)),
            bootstrap_values=torch.zeros((N, 1)),
            forward_inputs={"action": actions.reshape(N, -1)},
            versions=torch.zeros((N, 1)),
        )

    w.recv_from = recv_from
    w.send_to = lambda **_: None
    return w


def rollout(worker) -> dict[str, torch.Tensor]:
    """One ``interact`` of RLinf's loop; the stored rewards, dones and terminations sent (with
    the training pipeline: each epoch's, as RLinf hands them to its pipeline send)."""
    channel = Channel()
    asyncio.run(worker._run_interact_once(None, None, None, channel, cooperative_yield=False))
    if worker.use_training_pipeline:
        trajs = [result.to_trajectory() for result in channel.items]
    else:
        (traj,) = channel.items
        trajs = [traj]
    keys = ("rewards", "dones", "terminations")
    return {k: torch.cat([getattr(t, k) for t in trajs]) for k in keys}


async def pipeline_send(self, rollout_results, channel) -> None:
    """RLinf's per-epoch send with the training pipeline, keeping the stored rollout."""
    channel.items.extend(rollout_results)


def run_both(
    url: str,
    *,
    auto_reset: bool,
    epochs: int,
    monkeypatch,
    interacts: int = 1,
    alarms: dict[str, int] | None = None,
    **rm: object,
):
    waits = {"during": 0, "flush": 0}
    phase = {"now": "during"}
    real_wait = deferred.wait_futures

    def counting_wait(*args, **kwargs):
        waits[phase["now"]] += 1
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(deferred, "wait_futures", counting_wait)
    cls = worker_module.ProgressEnvWorker
    real_write = cls.write_late_rewards

    def write(self):
        phase["now"] = "flush"
        try:
            return real_write(self)
        finally:
            phase["now"] = "during"

    monkeypatch.setattr(cls, "write_late_rewards", write)
    rlinf_worker = cls.__mro__[1]
    monkeypatch.setattr(rlinf_worker, "send_rollout_trajectories_pipeline", pipeline_send)
    out = {}
    for calls in ("sync", "deferred"):
        w = make_worker(url, calls, auto_reset=auto_reset, epochs=epochs, **rm)
        try:
            runs = [rollout(w) for _ in range(interacts)]  # RLinf's interact() per step
            out[calls] = {k: torch.cat([run[k] for run in runs]) for k in runs[0]}
            if alarms is not None:  # the episodes the hacking alarm was fed, over its tasks
                detector = w.env_list[0].reward_step.alarm
                alarms[calls] = sum(detector.state(t)["episodes"] for t in detector.tasks)
        finally:
            w.env_list[0].close()
    return out["sync"], out["deferred"], waits


def assert_same(sync: dict[str, torch.Tensor], late: dict[str, torch.Tensor]) -> None:
    for key in ("rewards", "dones", "terminations"):
        assert torch.equal(sync[key], late[key]), (key, sync[key], late[key])


@pytest.mark.parametrize("pipeline", [False, True], ids=["at_the_end", "training_pipeline"])
def test_grpo_without_auto_reset_stores_what_sync_stores(service, monkeypatch, pipeline):
    sync, late, waits = run_both(
        service.url, auto_reset=False, epochs=2, monkeypatch=monkeypatch, pipeline=pipeline
    )
    assert_same(sync, late)
    assert sync["rewards"].shape == (2 * CHUNKS, N, CHUNK)
    assert sync["rewards"].abs().sum() > 0  # the model paid something
    done_at = sync["terminations"][:, 0].reshape(-1).nonzero()
    assert done_at.numel() >= 1  # sub-env 0: the model's done, at the action of its check
    assert waits["during"] == 0  # the env worker never waited for an answer mid-epoch
    assert waits["flush"] >= 1  # answers were still out when the epoch ended


def test_ppo_auto_reset_with_a_model_that_never_ends_episodes(service, monkeypatch):
    # 11-step episodes: they run across chunk steps, epochs and the rollout's end
    sync, late, waits = run_both(
        service.url,
        auto_reset=True,
        epochs=2,
        monkeypatch=monkeypatch,
        episode_steps=11,
        interacts=2,
        terminate_on_done=False,
    )
    assert_same(sync, late)
    assert sync["rewards"].abs().sum() > 0
    assert waits["during"] == 0


def test_deferred_with_a_model_done_resetting_sub_envs_is_refused(service):
    with pytest.raises(ConfigError, match=r"calls: 'deferred' with env auto_reset: true"):
        make_worker(service.url, "deferred", auto_reset=True, epochs=1)


def test_the_bonus_and_the_alarm_under_deferred_are_sync_s(service, monkeypatch):
    """One reward step: the success bonus lands where sync pays it, and the alarm is fed the
    same episodes (under deferred, when they are settled)."""
    alarms: dict[str, int] = {}
    sync, late, _ = run_both(
        service.url,
        auto_reset=False,
        epochs=2,
        monkeypatch=monkeypatch,
        alarms=alarms,
        success_bonus=5.0,
        alarm={"enable": True, "window": 2, "baseline": 2},
    )
    assert_same(sync, late)
    assert (sync["rewards"] >= 5.0).any()  # the bonus was paid (sub-env 0 reaches the done)
    assert alarms["sync"] == alarms["deferred"] > 0
