"""One env's episode in a rollout worker, from the env to the learner's trajectories.

An :class:`Episode` keeps what the policy saw and did at each step (policy inputs, action,
behaviour log-prob, policy version, the env's success flag) and each step's reward: known as the
step returns (``reward_model.calls: sync | async``) or filled in when the reward model settles
the episode (``calls: deferred``; the steps played after a model-judged done are cut). The timing
changes when the rewards arrive, not the path: :class:`EpisodeSlot`, one per env, hands on every
trajectory whose rewards are known through one method, :meth:`EpisodeSlot.ready`, cut into
segments of at most ``workers.segment_length`` steps. :func:`episode_stats` is the one place an
ended episode becomes the learner's metrics.

Rewards known at each step (``source=None``): a segment goes as soon as it is full.

>>> import numpy as np
>>> slot = EpisodeSlot()
>>> for t in range(3):
...     slot.add({"s": np.full(2, t, np.float32)}, np.zeros(1, np.float32), 0.0, 7, False, 0.5)
>>> slot.end({"s": np.full(2, 3, np.float32)}, {"is_success": True}, terminated=True)
>>> [traj] = slot.ready(worker_id=1)
>>> len(traj), traj.terminated, traj.obs["s"][:, 0].tolist(), traj.episode_stats[0]["return"]
(3, True, [0.0, 1.0, 2.0, 3.0], 1.5)

Rewards settled later (``source``: the env's settled episodes): an episode goes when its record
comes, the steps after the model's done cut.

>>> from types import SimpleNamespace
>>> records = []
>>> slot = EpisodeSlot(lambda wait: [records.pop()] if records else [])
>>> for t in range(3):
...     slot.add({"s": np.full(2, t, np.float32)}, np.zeros(1, np.float32), 0.0, 0, False)
>>> slot.end({"s": np.full(2, 3, np.float32)}, {}, terminated=False)
>>> slot.ready(worker_id=0), slot.in_flight
([], 1)
>>> records.append(SimpleNamespace(index=0, length=2, rewards=np.array([0.1, 0.4]),
...     terminated=True, truncated=False, cut_steps=1, summary={"progress": 50.0}, alarm=None))
>>> [traj] = slot.ready(worker_id=0)
>>> traj.dones.tolist(), traj.obs["s"][:, 0].tolist(), slot.cut_steps
([False, True], [0.0, 1.0, 2.0], 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from evolve_envs.progress.episode_summary import model_done
from evolve_envs.progress.settled_episode import SettledEpisode
from evolve_envs.training.common.trajectory import Trajectory

__all__ = ["Episode", "EpisodeSlot", "SettledSource", "episode_stats"]

#: What a slot asks its env for settled episodes (``calls: deferred``): ``source(wait)`` returns
#: the records settled since the last call (with ``wait``, it first waits for the ended ones).
SettledSource = Callable[[bool], list[SettledEpisode]]


def episode_stats(
    *,
    episode_return: float,
    length: int,
    info: Mapping[str, object],
    terminated: bool,
    fallbacks: int,
    summary: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """One finished episode's numbers for the learner's metrics: return, length, env success
    (``info["is_success"]``), final model progress, whether it terminated, fallbacks and, where
    the stack reports them, whether the model ended the episode (and whether the env had
    succeeded then) and the hacking alarm. ``summary`` is the episode's reward-model summary
    (``info["episode_reward_model"]`` when None).

    Example:
        >>> episode_stats(episode_return=0.5, length=3, info={"is_success": True, "progress": 90},
        ...               terminated=True, fallbacks=0)["success"]
        1.0
    """
    summary = info.get("episode_reward_model") if summary is None else summary
    progress = info.get("progress")
    if progress is None and isinstance(summary, Mapping):
        progress = summary.get("progress")
    stats: dict[str, object] = {
        "return": float(episode_return),
        "length": int(length),
        "success": float(bool(info.get("is_success", False))),
        "progress": float(progress) if progress is not None else float("nan"),
        "terminated": float(terminated),
        "fallbacks": int(fallbacks),
    }
    if fallbacks and isinstance(summary, Mapping) and summary.get("last_error"):
        stats["fallback_reason"] = str(summary["last_error"])
    if isinstance(summary, Mapping) and "model_terminated" in summary:
        stats.update({k: float(v) for k, v in model_done(summary).items()})
    alarm = info.get("reward_alarm")
    if isinstance(alarm, Mapping):
        stats["alarm_firing"] = float(bool(alarm.get("firing", False)))
    return stats


@dataclass
class Episode:
    """One episode as a worker played it. Step ``t`` (1 = after the first action) of the steps
    not handed on yet is at index ``t - 1 - handed`` of every list; ``inputs`` has one more row
    once the episode ended (the observation after its last step). ``rewards`` holds the rewards
    known so far (all of them as the steps go, or none until the episode is settled)."""

    index: int
    inputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    success: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    handed: int = 0  #: steps already handed on as segments (dropped from the lists)
    episode_return: float = 0.0
    fallbacks: int = 0
    terminated: bool = False
    stats: dict[str, object] | None = None  #: set when it ended and every reward is known

    @property
    def steps(self) -> int:
        """Steps played so far (handed on or not)."""
        return self.handed + len(self.actions)

    @property
    def nbytes(self) -> int:
        """Bytes of the kept policy inputs (the bulk of an episode waiting for its rewards)."""
        return int(sum(a.nbytes for row in self.inputs for a in row.values()))

    def segment(
        self, stop: int, worker_id: int, last: Mapping[str, np.ndarray] | None = None
    ) -> Trajectory:
        """The first ``stop`` steps not handed on yet, as a validated trajectory, then dropped.
        Its last row is ``inputs[stop]`` (or ``last``, the observation after step ``stop``); the
        episode's stats and its termination go with the segment that ends it."""
        final = self.stats is not None and stop == len(self.actions)
        rows = self.inputs[: stop + 1] if last is None else [*self.inputs[:stop], dict(last)]
        dones = np.zeros(stop, dtype=bool)
        dones[-1] = final and self.terminated
        traj = Trajectory(
            obs={k: np.stack([r[k] for r in rows]) for k in rows[0]},
            actions=np.stack(self.actions[:stop]).astype(np.float32),
            behaviour_logp=np.asarray(self.logp[:stop], dtype=np.float32),
            rewards=np.asarray(self.rewards[:stop], dtype=np.float32),
            dones=dones,
            policy_version=int(min(self.versions[:stop])),
            worker_id=worker_id,
            episode_stats=[self.stats] if final else [],  # type: ignore[list-item]
        )
        traj.validate()
        for name in ("inputs", "actions", "logp", "versions", "success", "rewards"):
            del getattr(self, name)[:stop]
        self.handed += stop
        return traj

    def settle(self, record: SettledEpisode) -> int:
        """Fill in the rewards of settled ``record`` (steps ``1..record.length``; the steps
        played after them are cut) and its stats; returns the cut steps.

        Raises ``ValueError`` when the record does not fit the episode played (its length plus
        its cut steps is not the number of steps played)."""
        n, cut = int(record.length), int(record.cut_steps)
        rewards = np.asarray(record.rewards, dtype=np.float64)
        if n < 1 or n + cut != self.steps or self.handed or rewards.shape != (n,):
            raise ValueError(
                f"settled episode {record.index}: length {n} + cut steps {cut} with "
                f"{rewards.shape[0] if rewards.ndim == 1 else rewards.shape} rewards does not "
                f"fit the {self.steps} steps played"
            )
        for name in ("actions", "logp", "versions", "success"):
            del getattr(self, name)[n:]
        del self.inputs[n + 1 :]  # row n: the observation after step n
        self.rewards = rewards.tolist()
        self.terminated = bool(record.terminated)
        summary = dict(getattr(record, "summary", None) or {})
        info: dict[str, object] = {"is_success": bool(self.success[n - 1])}
        alarm = getattr(record, "alarm", None)  # the hacking alarm's state after this episode
        if isinstance(alarm, Mapping):
            info["reward_alarm"] = alarm
        self.stats = episode_stats(
            episode_return=float(rewards.sum()),
            length=n,
            info=info,
            terminated=self.terminated,
            fallbacks=int(summary.get("reward_model_fallbacks", 0) or 0),
            summary=summary,
        )
        self.stats["cut_steps"] = cut
        return cut


class EpisodeSlot:
    """One env's episode under way and its ended episodes not handed on yet (see the module
    docstring). ``source``: the env's settled episodes (``calls: deferred``); None when each
    step's reward is known as it returns.

    Counters: :attr:`in_flight` (ended episodes waiting for their rewards), :attr:`cut_steps`
    and :attr:`settled` (episodes settled), :attr:`held_bytes` (policy inputs kept).
    """

    def __init__(self, source: SettledSource | None = None, first_index: int = 0) -> None:
        self.source = source
        self.playing = Episode(index=first_index)
        self.waiting: dict[int, Episode] = {}  # ended; their rewards not in yet
        self._ready: list[Episode] = []  # ended with every reward known: to hand on
        self.cut_steps = 0
        self.settled = 0

    @property
    def in_flight(self) -> int:
        return len(self.waiting)

    @property
    def held_bytes(self) -> int:
        return sum(ep.nbytes for ep in self.waiting.values()) + self.playing.nbytes

    def start(self, index: int | None = None) -> None:
        """An episode starts (the env was reset; ``index``: the number the env gave it, which its
        settled record carries). An episode under way that did not end is forgotten."""
        self.playing = Episode(index=self.playing.index + 1 if index is None else int(index))

    def add(
        self,
        inputs: Mapping[str, np.ndarray],
        action: np.ndarray,
        logp: float,
        version: int,
        success: bool,
        reward: float | None = None,
        fallback: bool = False,
    ) -> None:
        """Append one step of the episode under way (``reward``: None until it is settled)."""
        ep = self.playing
        ep.inputs.append(dict(inputs))
        ep.actions.append(action)
        ep.logp.append(float(logp))
        ep.versions.append(int(version))
        ep.success.append(bool(success))
        if reward is not None:
            ep.rewards.append(float(reward))
            ep.episode_return += float(reward)
        ep.fallbacks += int(bool(fallback))

    def end(
        self, last_inputs: Mapping[str, np.ndarray], info: Mapping[str, object], terminated: bool
    ) -> None:
        """The episode under way ended (``last_inputs``: the observation after its last step,
        ``info``: its last step's); it is handed on now or when it is settled."""
        ep = self.playing
        ep.inputs.append(dict(last_inputs))
        ep.terminated = bool(terminated)
        if self.source is None:
            ep.stats = episode_stats(
                episode_return=ep.episode_return,
                length=ep.steps,
                info=info,
                terminated=ep.terminated,
                fallbacks=ep.fallbacks,
            )
            self._ready.append(ep)
        else:
            self.waiting[ep.index] = ep
        self.playing = Episode(index=ep.index + 1)

    def ready(
        self,
        worker_id: int,
        segment_length: int | None = None,
        next_inputs: Callable[[], Mapping[str, np.ndarray]] | None = None,
        wait: bool = False,
    ) -> list[Trajectory]:
        """Every trajectory whose rewards are known and were not handed on: the ended episodes
        (settled ones taken from the source first; ``wait``: wait until every ended episode is
        settled), then a full segment of the episode under way (``next_inputs``: the observation
        after its last step)."""
        if self.source is not None:
            self._take_settled(wait)
        out: list[Trajectory] = []
        for ep in self._ready:
            size = len(ep.actions) if segment_length is None else int(segment_length)
            while ep.actions:
                out.append(ep.segment(min(size, len(ep.actions)), worker_id))
        self._ready = []
        ep = self.playing
        full = segment_length is not None and len(ep.rewards) >= segment_length
        if full and next_inputs is not None and ep.actions:
            out.append(ep.segment(len(ep.actions), worker_id, last=next_inputs()))
        return out

    def _take_settled(self, wait: bool) -> None:
        while True:
            records = self.source(wait and bool(self.waiting))  # type: ignore[misc]
            if wait and self.waiting and not records:
                raise RuntimeError(
                    f"the env settled none of its {len(self.waiting)} ended episodes "
                    f"(indices {sorted(self.waiting)}) when asked to wait for them"
                )
            for record in records:
                played = self.waiting.pop(int(record.index), None)
                if played is None:  # an episode abandoned by a reset
                    continue
                self.cut_steps += played.settle(record)
                self.settled += 1
                self._ready.append(played)
            if not (wait and self.waiting):
                return
