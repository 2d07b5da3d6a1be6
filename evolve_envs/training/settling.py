"""Settled episodes in a rollout worker (``reward_model.calls: deferred``; docs/DISTRL.md).

The env never waits for the reward model; the worker keeps what the policy saw and did
(:class:`PlayedEpisode`) until the episode's record arrives with its rewards, then makes the
trajectories the learner takes (:func:`settled_trajectories`): what ``calls: sync`` would have
produced for the same actions, the steps played after a model-judged done cut.
:class:`SettlingSlot` is one env's bookkeeping.

>>> import numpy as np
>>> from types import SimpleNamespace
>>> records = []
>>> slot = SettlingSlot(lambda wait: [records.pop()] if records else [])
>>> for t in range(3):
...     slot.add({"s": np.full(2, t, np.float32)}, np.zeros(1, np.float32), 0.0, 0, False)
>>> slot.end({"s": np.full(2, 3, np.float32)})
>>> records.append(SimpleNamespace(index=0, length=2, rewards=np.array([0.1, 0.4]),
...     terminated=True, truncated=False, cut_steps=1, summary={"progress": 50.0}))
>>> [traj] = slot.settle(worker_id=0)
>>> traj.dones.tolist(), traj.obs["s"][:, 0].tolist(), slot.cut_steps
([False, True], [0.0, 1.0, 2.0], 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.stack.config import StackConfig
from evolve_envs.training.common.trajectory import Trajectory
from evolve_envs.training.episode_slot import episode_stats
from evolve_envs.wrappers.settled_rewards import deferred_reward

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = [
    "SETTLING_COUNTS",
    "PlayedEpisode",
    "SettlingSlot",
    "episode_index",
    "saturation_waits",
    "settled_trajectories",
    "settling_counts",
    "settling_slots",
]

#: What a worker asks its env for settled episodes: ``source(wait)`` returns the records
#: settled since the last call (with ``wait``, it first waits for at least one when any is due).
SettledSource = Callable[[bool], list[SettledEpisode]]


@dataclass
class PlayedEpisode:
    """What the policy saw and did in one episode, kept until the episode is settled.

    ``inputs[t]`` are the policy inputs before step ``t + 1``; after :meth:`SettlingSlot.end`
    one more row, the observation after the last step, closes the list.
    """

    index: int
    inputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    success: list[bool] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def nbytes(self) -> int:
        """Bytes of the kept policy inputs (the bulk of an unsettled episode)."""
        return int(sum(a.nbytes for row in self.inputs for a in row.values()))


def settled_trajectories(
    played: PlayedEpisode, record: SettledEpisode, worker_id: int, segment_length: int | None = None
) -> list[Trajectory]:
    """The trajectories of a settled episode: steps ``1..record.length`` of ``played`` with the
    record's rewards, the last one terminal when ``record.terminated``; cut into segments of at
    most ``segment_length`` steps (None: one trajectory), the episode's stats on the last one.

    Raises ``ValueError`` when the record does not fit the episode played (its length plus its
    cut steps is not the number of steps played).
    """
    n, cut = int(record.length), int(record.cut_steps)
    rewards = np.asarray(record.rewards, dtype=np.float32)
    if n < 1 or n + cut != played.steps or rewards.shape != (n,):
        raise ValueError(
            f"settled episode {record.index}: length {n} + cut steps {cut} with "
            f"{rewards.shape[0] if rewards.ndim == 1 else rewards.shape} rewards does not fit "
            f"the {played.steps} steps played"
        )
    terminated = bool(record.terminated)
    summary = dict(getattr(record, "summary", None) or {})
    info: dict[str, object] = {"is_success": bool(played.success[n - 1])}
    alarm = getattr(record, "alarm", None)  # the hacking alarm's state after this episode
    if isinstance(alarm, Mapping):
        info["reward_alarm"] = alarm
    stats = episode_stats(
        episode_return=float(rewards.sum()),
        length=n,
        info=info,
        terminated=terminated,
        fallbacks=int(summary.get("reward_model_fallbacks", 0) or 0),
        summary=summary,
    )
    stats["cut_steps"] = cut
    size = n if segment_length is None else int(segment_length)
    out = []
    for start in range(0, n, size):
        stop = min(n, start + size)
        rows = played.inputs[start : stop + 1]  # row stop: the observation after step stop
        dones = np.zeros(stop - start, dtype=bool)
        dones[-1] = terminated and stop == n
        traj = Trajectory(
            obs={k: np.stack([r[k] for r in rows]) for k in rows[0]},
            actions=np.stack(played.actions[start:stop]).astype(np.float32),
            behaviour_logp=np.asarray(played.logp[start:stop], dtype=np.float32),
            rewards=rewards[start:stop].copy(),
            dones=dones,
            policy_version=int(min(played.versions[start:stop])),
            worker_id=worker_id,
            episode_stats=[stats] if stop == n else [],
        )
        traj.validate()
        out.append(traj)
    return out


class SettlingSlot:
    """One env's episode under way and its ended, unsettled episodes (see the module
    docstring). ``source`` is the env's settled-episode call.

    Counters: :attr:`in_flight` (ended episodes not settled yet), :attr:`cut_steps` and
    :attr:`settled` (episodes settled), :attr:`held_bytes` (policy inputs kept for them).
    """

    def __init__(self, source: SettledSource, first_index: int = 0) -> None:
        self.source = source
        self.playing = PlayedEpisode(index=first_index)
        self.unsettled: dict[int, PlayedEpisode] = {}
        self.cut_steps = 0
        self.settled = 0

    @property
    def in_flight(self) -> int:
        return len(self.unsettled)

    @property
    def held_bytes(self) -> int:
        return sum(ep.nbytes for ep in self.unsettled.values()) + self.playing.nbytes

    def add(
        self,
        inputs: Mapping[str, np.ndarray],
        action: np.ndarray,
        logp: float,
        version: int,
        success: bool,
    ) -> None:
        """Append one step of the episode under way."""
        ep = self.playing
        ep.inputs.append(dict(inputs))
        ep.actions.append(action)
        ep.logp.append(float(logp))
        ep.versions.append(int(version))
        ep.success.append(bool(success))

    def start(self, index: int) -> None:
        """Episode ``index`` starts (the env was reset); an episode under way that did not end
        is forgotten (its record, if the env sends one, is dropped)."""
        self.playing = PlayedEpisode(index=int(index))

    def end(self, last_inputs: Mapping[str, np.ndarray]) -> None:
        """The episode under way ended (``last_inputs``: the observation after its last step);
        it waits for its settlement."""
        ep = self.playing
        ep.inputs.append(dict(last_inputs))
        self.unsettled[ep.index] = ep
        self.playing = PlayedEpisode(index=ep.index + 1)

    def settle(
        self, worker_id: int, segment_length: int | None = None, wait: bool = False
    ) -> list[Trajectory]:
        """Trajectories of every episode settled since the last call (``wait``: first wait
        until every ended episode is settled). A record of an episode this slot does not hold
        (one abandoned by a reset) is dropped."""
        out: list[Trajectory] = []
        while True:
            records = self.source(wait and bool(self.unsettled))
            if wait and self.unsettled and not records:
                raise RuntimeError(
                    f"the env settled none of its {len(self.unsettled)} ended episodes "
                    f"(indices {sorted(self.unsettled)}) when asked to wait for them"
                )
            for record in records:
                played = self.unsettled.pop(int(record.index), None)
                if played is None:
                    continue
                out.extend(settled_trajectories(played, record, worker_id, segment_length))
                self.cut_steps += int(record.cut_steps)
                self.settled += 1
            if not (wait and self.unsettled):
                return out


#: A worker's settlement counters (all 0 without deferred settlement): episodes settled, steps
#: cut after a model-judged done, ended episodes not settled yet (a level, not a count), and
#: resets that waited for the reward service (the env at ``max_unsettled_episodes``).
SETTLING_COUNTS: dict[str, int] = {
    "settled": 0,
    "cut_steps": 0,
    "unsettled": 0,
    "saturation_waits": 0,
}


def settling_counts(slots: Sequence[SettlingSlot], envs: Sequence[gym.Env]) -> dict[str, int]:
    """:data:`SETTLING_COUNTS` of a worker's slots and envs."""
    return {
        "settled": sum(s.settled for s in slots),
        "cut_steps": sum(s.cut_steps for s in slots),
        "unsettled": sum(s.in_flight for s in slots),
        "saturation_waits": saturation_waits(envs),
    }


def is_deferred(stack: StackConfig) -> bool:
    """Whether a stack config asks for settled episodes (reward model on, ``calls: deferred``)."""
    rm = stack.reward_model
    return rm.enable and getattr(rm, "calls", None) == "deferred"


def settled_source(env: gym.Env) -> SettledSource:
    """The env's settled-episode call: its declared deferred reward wrapper's."""
    return deferred_reward(env).settled_episodes


def episode_index(info: Mapping[str, object]) -> int:
    """The number the env gives the episode its ``reset`` just started
    (``info["settlement_episode"]``), which its settled record carries as ``index``.

    Raises ``ValueError`` when the env reports none (its stack has no reward model in
    ``calls: deferred``)."""
    if "settlement_episode" not in info:
        raise ValueError(
            "the env reports no settlement_episode: its stack does not settle episodes "
            "(reward_model.calls: deferred with kind: progress)"
        )
    return int(info["settlement_episode"])


def saturation_waits(envs: Sequence[gym.Env]) -> int:
    """Resets that waited because the env had ``max_unsettled_episodes`` episodes unsettled
    (the reward service is saturated), summed over ``envs``."""
    total = 0
    for env in envs:
        total += int(deferred_reward(env).deferred_stats().get("saturation_waits", 0))
    return total


def settling_slots(stack: StackConfig, envs: Sequence[gym.Env]) -> list[SettlingSlot] | None:
    """One :class:`SettlingSlot` per env when ``stack`` asks for settled episodes, else None."""
    if not is_deferred(stack):
        return None
    return [SettlingSlot(settled_source(env)) for env in envs]
