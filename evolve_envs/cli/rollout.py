"""The main job: roll out episodes through the full wrapper stack and write a report.

For each episode it records the agentview frames and the per-step progress/reward the wrappers
put in ``info``, and writes into ``out`` *as each episode finishes* (an interrupted job keeps
every finished episode):

* ``summary.json`` — the effective configuration (suite, resolved task id and description, the
  episode limit actually used, policy, ...), then per episode: steps, env success, final
  progress, reward sum, reward-model calls, errors, fallbacks, latency percentiles,
  done-by-progress, the model's done decision against env success (and the running
  ``termination_audit`` per task and overall), the alarm's state (``reward_alarm``, with
  ``reward_model.alarm.enable``); ``"complete": false`` until the job ends
  (``"interrupted": true`` after Ctrl-C);
* ``metrics.csv`` and ``tensorboard/`` — one row / one scalar step per episode (W&B too with
  ``wandb_project``), see :mod:`evolve_envs.recording.metrics_log`;
* ``progress_<ep>.png`` — progress and reward vs step, check steps and the done threshold marked;
* ``episode_<ep>.mp4`` — the agentview frames with progress overlaid (every ``video_every``-th
  episode, none with ``video=False``);
* a short plain-text table (returned, and printed by the CLI).

``config`` takes file paths or the names of shipped configs (``"libero_10"``, ``"fast_dev"``).
With ``reward_model.endpoint: embedded`` the job starts the reward service itself (the config's
``embedded_backend``: ``mock`` with the *change* rule in the shipped configs) on a free loopback
port, shares it between all envs, and stops it at the end.

``policy`` is ``"random"``, ``"zero"`` (gripper open), ``"module:function"`` or a callable; a
callable gets one env's observation dict and returns that env's action.

Example (runs LIBERO, so not run as a doctest; tests/rollout does)::

    >>> report = run_rollout(RolloutOptions(config="libero_10", episodes=1,
    ...                                     out="runs/demo"))  # doctest: +SKIP
    >>> print(report.table)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.recording.metrics_log import EpisodeLog, import_wandb
from evolve_envs.stack.config import StackConfig
from evolve_envs.stack.loading import load_config

PolicyFn = Callable[[Any], Any]
"""A policy: one env's observation (a dict of arrays) -> that env's action."""

BUILTIN_POLICIES = ("random", "zero")

_REPORT_EXTRA = "pip install 'evolve-envs[report]'"


@dataclass
class RolloutOptions:
    """What to roll out.

    ``task_id`` is an index, a task name or its instruction (as for ``gym.make``);
    ``max_steps`` overrides the suite's episode limit; ``policy`` is ``"random"``, ``"zero"``,
    ``"module:function"`` or a callable (observation -> action); videos are written for every
    ``video_every``-th episode. ``tensorboard`` writes TensorBoard events when the package is
    installed; ``wandb_project`` logs to W&B. ``record`` also writes every episode (frames,
    actions, rewards, model progress) to that directory for re-scoring (``docs/RECORDING.md``).
    ``overrides`` are ``KEY=VALUE`` strings layered on the config last (e.g.
    ``"reward_model.call_every=3"``), as ``evolve-envs train`` takes them.

    Example:
        >>> opts = RolloutOptions(config=["libero_goal", "short_precise"], task_id=7, max_steps=80)
        >>> opts.episodes, opts.policy
        (1, 'random')
    """

    config: str | Path | dict[str, Any] | list[Any] = "libero_10"
    task_id: int | str | None = None
    episodes: int = 1
    num_envs: int = 1
    policy: str | PolicyFn = "random"
    out: str | Path = "runs/rollout"
    seed: int = 0
    max_steps: int | None = None
    video: bool = True
    video_every: int = 1
    progress_bar: bool = True
    tensorboard: bool = True
    wandb_project: str | None = None
    record: str | Path | None = None
    overrides: list[str] = field(default_factory=list)


@dataclass
class EpisodeRecord:
    """Everything recorded about one episode (frames are not serialised).

    >>> rec = EpisodeRecord(index=0, env_index=0, steps=2, rewards=[0.0, 1.0],
    ...                     progress=[10.0, 40.0], check_steps=[2])
    >>> row = rec.to_json()
    >>> row["final_progress"], row["reward_sum"], row["reward_model_calls"]
    (40.0, 1.0, 1)
    """

    index: int
    env_index: int
    task_description: str = ""
    steps: int = 0
    rewards: list[float] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    check_steps: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)
    video: bool = True
    camera: str = "agentview_image"
    env_success: bool = False
    terminated: bool = False
    truncated: bool = False
    summary: dict[str, Any] = field(default_factory=dict)
    alarm: dict[str, Any] | None = None  # info["reward_alarm"] (reward_model.alarm.enable)
    fallback_steps: int = 0  # steps whose reward-model answer was the fallback (call failed)

    def stop_reason(self) -> str:
        """Why the episode ended: ``model_done`` (the reward model judged it done),
        ``terminated`` (the env ended it, e.g. success), ``time_limit`` (truncated), else
        ``running`` (it had not ended)."""
        if self.summary.get("done_by_progress"):
            return "model_done"
        if self.terminated:
            return "terminated"
        if self.truncated:
            return "time_limit"
        return "running"

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        lat = np.asarray(self.latencies_s, dtype=float)
        return {
            "episode": self.index,
            "env_index": self.env_index,
            "task_description": self.task_description,
            "steps": self.steps,
            "env_success": self.env_success,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "final_progress": self.progress[-1] if self.progress else None,
            "max_progress": max(self.progress) if self.progress else None,
            "reward_sum": float(sum(self.rewards)),
            "reward_model_calls": s.get("progress_calls", len(self.check_steps)),
            "reward_model_errors": s.get("reward_model_errors", 0),
            "reward_model_fallbacks": s.get("reward_model_fallbacks", 0),
            "fallback_steps": self.fallback_steps,
            "last_reward_model_error": s.get("last_error"),
            "stop_reason": self.stop_reason(),
            "latency_s": _percentiles(lat),
            "done_by_progress": bool(s.get("done_by_progress", False)),
            "done_step": s.get("done_step"),
            "high_progress_on_failure": s.get("high_progress_on_failure"),
            "success_at_low_progress": s.get("success_at_low_progress"),
            "model_terminated": s.get("model_terminated"),
            "done_env_success": s.get("done_env_success"),
            "termination_audit": s.get("termination_audit"),
            "reward_alarm": self.alarm,
            "check_steps": self.check_steps,
        }


@dataclass
class RolloutReport:
    """What :func:`run_rollout` returns: the output folder, one row per episode (as in
    ``summary.json``), the plain-text table, the wall time, the effective configuration, and
    whether Ctrl-C ended the job.

    ``degraded`` is ``None`` for a clean run, else how many episodes and steps got fallback
    rewards and the last reward-model error (see :func:`degradation`).

    >>> report = RolloutReport(out=Path("runs/demo"), episodes=[], table="", wall_s=0.0)
    >>> report.interrupted, report.effective, report.degraded
    (False, {}, None)
    """

    out: Path
    episodes: list[dict[str, Any]]
    table: str
    wall_s: float
    effective: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    stop_reason: str = "completed"
    degraded: dict[str, Any] | None = None


def check_options(opts: RolloutOptions) -> None:
    """Reject options that cannot run, before anything is written (``ValueError``)."""
    for name in ("episodes", "num_envs", "video_every"):
        value = getattr(opts, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    steps = opts.max_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"max_steps must be an int >= 1 (the episode limit), got {steps!r}")


def resolve_policy(policy: str | PolicyFn) -> str | PolicyFn:
    """A built-in policy name, or the callable that ``policy`` (``"module:function"``) names.

    Example:
        >>> resolve_policy("numpy:zeros_like") is __import__("numpy").zeros_like
        True
    """
    if callable(policy):
        return policy
    if not isinstance(policy, str):
        raise ValueError(f"policy must be a name, 'module:function' or a callable, got {policy!r}")
    if policy in BUILTIN_POLICIES:
        return policy
    module_name, sep, attr = policy.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"policy must be 'random', 'zero' or 'module:function', got {policy!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"policy {policy!r}: cannot import {module_name!r}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"policy {policy!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"policy {policy!r}: {attr!r} is not callable")
    return target


def check_extras(opts: RolloutOptions, cfg: StackConfig) -> None:
    """Fail (``ImportError`` naming the extra) when an optional package the chosen options need
    is missing, before anything runs or is written: tqdm and matplotlib (the report), imageio
    (videos, unless ``video=False``), pyarrow (``record``). TensorBoard is optional: without it
    the report has CSV only (``tensorboard/`` is not created)."""
    needs = [("tqdm", "the rollout's progress bar needs tqdm: " + _REPORT_EXTRA)]
    needs.append(("matplotlib", "the rollout's progress plots need matplotlib: " + _REPORT_EXTRA))
    if opts.video:
        needs.append(
            (
                "imageio_ffmpeg",
                "the rollout's videos need imageio and imageio-ffmpeg: pip install "
                "'evolve-envs[video]' (or pass video=False / --no-video)",
            )
        )
    if cfg.record is not None:
        needs.append(
            ("pyarrow", "recording episodes needs pyarrow: pip install 'evolve-envs[record]'")
        )
    for module, message in needs:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(message) from exc


def run_rollout(opts: RolloutOptions) -> RolloutReport:
    """Run the job described by ``opts``; files are written to ``opts.out`` per episode.

    Everything that can be checked is checked before ``opts.out`` is created: the options, the
    config (``ConfigError``), the optional packages the options need (``ImportError``), the
    reward service (started, or reached and asked for its capabilities:
    :class:`~evolve_envs.reward.clients.service_check.ServiceUnavailableError`) and the env
    itself (a bad task id: ``ValueError``). ``KeyboardInterrupt`` propagates after the finished
    episodes are saved (``summary.json`` then says ``"interrupted": true`` and
    ``"stop_reason": "interrupted"``); so does a reward service error in strict mode
    (``"stop_reason": "reward_service_failed"``).
    """
    check_options(opts)
    policy = resolve_policy(opts.policy)
    if opts.wandb_project:
        import_wandb(opts.wandb_project)  # fail before anything is written
    sources = list(opts.config) if isinstance(opts.config, list | tuple) else [opts.config]
    env_kwargs: dict[str, Any] = {}
    if opts.task_id is not None:
        env_kwargs["task_id"] = opts.task_id
    if opts.max_steps is not None:
        env_kwargs["max_episode_steps"] = opts.max_steps
    if opts.overrides:
        from evolve_envs.stack.loading import merge, parse_override

        sources.append(merge(*(parse_override(text) for text in opts.overrides)))
    if opts.record is not None:
        sources.append({"record": {"dir": str(opts.record)}})
    cfg = load_config(*sources, overrides={"env": env_kwargs} if env_kwargs else None)
    check_extras(opts, cfg)
    rm = cfg.reward_model
    if opts.record is not None:  # name the embedded service's spec, not its loopback URL
        from evolve_envs.stack.factory import describe_reward_model

        sources[-1]["record"]["reward_model"] = describe_reward_model(rm)
    out = Path(opts.out)
    started = time.monotonic()
    report: _Report | None = None
    try:
        # building the env starts the shared service (for endpoint: embedded) and checks it and
        # the task: still nothing written. Closing the env stops the service.
        env = _make_vector_env(sources, env_kwargs, opts.num_envs)
        with _closing_quietly_on_error(env):
            out.mkdir(parents=True, exist_ok=True)
            report = _Report(out, opts, cfg)
            _collect(env, opts, policy, report)
    except KeyboardInterrupt:
        if report is not None:
            report.finish(time.monotonic() - started, interrupted=True, stop="interrupted")
        raise
    except Exception as exc:  # keep what was written, marked incomplete
        if report is not None:
            report.finish(
                time.monotonic() - started,
                complete=False,
                stop=_stop_reason(exc),
                detail=f"{type(exc).__name__}: {exc}",
            )
        raise
    return report.finish(time.monotonic() - started)


def _stop_reason(exc: BaseException) -> str:
    """The run's ``stop_reason`` for an exception that ended it."""
    from evolve_envs.reward.clients.errors import RewardServiceError

    return "reward_service_failed" if isinstance(exc, RewardServiceError) else "error"


@contextlib.contextmanager
def _closing_quietly_on_error(env: gym.vector.VectorEnv) -> Iterator[None]:
    """Close ``env`` after the block. When the block raised, a failing close is suppressed:
    Ctrl-C may have reached the workers too, and the interrupt (or the error) is what the
    caller has to see."""
    failed = True
    try:
        yield
        failed = False
    finally:
        if failed:
            with contextlib.suppress(Exception):
                env.close()
        else:
            env.close()


class _Report:
    """Writes the report files as episodes finish (see the module docstring)."""

    def __init__(self, out: Path, opts: RolloutOptions, cfg: StackConfig) -> None:
        self.out = out
        self.opts = opts
        self.cfg = cfg
        rm = cfg.reward_model
        done_threshold = getattr(rm, "done_threshold", None)  # a key of kind: progress
        self.threshold = (
            100.0 * done_threshold if rm.enable and done_threshold is not None else None
        )
        self.effective: dict[str, Any] = {}
        self.episodes: list[dict[str, Any]] = []
        self.in_flight: list[EpisodeRecord | None] = []  # episodes running now (set by _collect)
        self.stop: dict[str, str | None] = {"stop_reason": "running", "stop_detail": None}
        self.audit = TerminationAudit()  # model done decisions vs env success, whole run
        self.interactive = opts.progress_bar and sys.stderr.isatty()
        with contextlib.suppress(FileNotFoundError):  # rows are appended: start a fresh file
            (out / "metrics.csv").unlink()
        self.log = EpisodeLog(
            out,
            tensorboard=opts.tensorboard,
            wandb_project=opts.wandb_project,
            run_config={"config": cfg.model_dump(mode="json"), "options": self._options()},
        )
        self._write_summary(wall_s=None, complete=False, interrupted=False)

    def _options(self) -> dict[str, Any]:
        opts = asdict(self.opts)
        if callable(self.opts.policy):
            opts["policy"] = _callable_name(self.opts.policy)
        return {k: str(v) if isinstance(v, Path) else v for k, v in opts.items()}

    def start(self, env: gym.vector.VectorEnv, infos: dict[str, Any]) -> None:
        """Record what the built env actually runs (after the first reset)."""
        rm = self.cfg.reward_model
        env_cfg = self.cfg.env
        limit = _item(infos, "max_episode_steps", 0)
        if limit is None:
            limit = _first_attr(env, "_max_episode_steps")
        full = env_cfg.get("max_episode_steps")
        if full is None and "id" not in env_cfg:
            from evolve_envs.envs.libero_tasks import default_max_episode_steps

            with contextlib.suppress(ValueError):
                full = default_max_episode_steps(env_cfg.get("suite", "libero_10"))
        policy = self.opts.policy
        self.effective = {
            "suite": env_cfg.get("suite", "libero_10") if "id" not in env_cfg else None,
            "env_id": env_cfg.get("id"),
            "task_id": _first_attr(env, "task_id"),
            "task_description": _item(infos, "task_description", 0),
            "max_episode_steps": limit,
            "progressive_max_step": rm.progressive_max_step,
            "policy": _callable_name(policy) if callable(policy) else policy,
            "seed": self.opts.seed,
            "episodes": self.opts.episodes,
            "num_envs": self.opts.num_envs,
            "video_every": self.opts.video_every if self.opts.video else None,
            "reward_model": (
                f"embedded {rm.embedded_backend} service {dict(rm.embedded_backend_kwargs)}"
                if rm.enable and rm.embedded
                else (rm.endpoint if rm.enable else None)
            ),
        }
        if rm.progressive_max_step and limit is not None and full is not None and limit < full:
            note = (
                f"progressive_max_step is on: episodes stop at {limit} steps in the first stage "
                f"of the progressive horizon, not {full}; set reward_model.progressive_max_step: "
                f"false (or USE_PROGRESSIVE_MAX_STEP=0) for full-length episodes"
            )
            self.effective["horizon_note"] = note
            print(f"evolve-envs rollout: note: {note}", file=sys.stderr, flush=True)
        self._write_summary(wall_s=None, complete=False, interrupted=False)

    def records_video(self, index: int) -> bool:
        return self.opts.video and index % self.opts.video_every == 0

    def add(self, rec: EpisodeRecord) -> None:
        """Write one finished episode's files and refresh ``summary.json``."""
        row = rec.to_json()
        if rec.frames:
            row["video"] = _write_video(self.out / f"episode_{rec.index}.mp4", rec, self.threshold)
        row["plot"] = _write_plot(self.out / f"progress_{rec.index}.png", rec, self.threshold)
        rec.frames = []  # free the frames: the video is written
        if row["model_terminated"] is not None:  # a progress model judged this episode
            self.audit.record(
                row["task_description"],
                model_done=row["done_by_progress"],
                success_at_done=row["done_env_success"],
                env_success=row["env_success"],
            )
            row["termination_audit"] = self.audit.counts(row["task_description"])
        self.episodes.append(row)
        self.log.add(rec.index, _metrics(row))
        self._write_summary(wall_s=None, complete=False, interrupted=False)
        if self.opts.progress_bar and not self.interactive:
            prog = row["final_progress"]
            shown = "-" if prog is None or math.isnan(prog) else f"{prog:.1f}"
            print(
                f"episode {rec.index}: {row['steps']} steps, success "
                f"{'yes' if row['env_success'] else 'no'}, progress {shown}, reward "
                f"{row['reward_sum']:.3f} ({len(self.episodes)}/{self.opts.episodes})",
                file=sys.stderr,
                flush=True,
            )

    def finish(
        self,
        wall_s: float,
        *,
        interrupted: bool = False,
        complete: bool | None = None,
        stop: str = "completed",
        detail: str | None = None,
    ) -> RolloutReport:
        """Write the final ``summary.json`` (with the run's ``stop_reason``) and close the logs."""
        done = not interrupted if complete is None else complete
        self.stop = {"stop_reason": stop, "stop_detail": detail}
        self._write_summary(wall_s=wall_s, complete=done, interrupted=interrupted)
        self.log.close()
        episodes = sorted(self.episodes, key=lambda e: e["episode"])
        return RolloutReport(
            out=self.out,
            episodes=episodes,
            table=format_table(episodes),
            wall_s=wall_s,
            effective=self.effective,
            interrupted=interrupted,
            stop_reason=stop,
            degraded=degradation(episodes + self._unfinished()),
        )

    def _unfinished(self) -> list[dict[str, Any]]:
        """The episodes still running when the run stopped (empty while it runs or when it
        completed), with the run's stop reason as theirs."""
        if self.stop["stop_reason"] in ("running", "completed"):
            return []
        rows = []
        for rec in self.in_flight:
            if rec is None:
                continue
            row = rec.to_json()
            row["stop_reason"] = self.stop["stop_reason"]
            row["complete"] = False
            rows.append(row)
        return rows

    def _write_summary(self, *, wall_s: float | None, complete: bool, interrupted: bool) -> None:
        summary = {
            "effective": self.effective,
            "config": self.cfg.model_dump(mode="json"),
            "options": self._options(),
            "complete": complete,
            "interrupted": interrupted,
            **self.stop,
            "degraded": degradation(self.episodes + self._unfinished()),
            "wall_s": wall_s,
            "termination_audit": {
                "overall": self.audit.counts(),
                "per_task": {task: self.audit.counts(task) for task in self.audit.tasks},
            },
            "episodes": sorted(self.episodes, key=lambda e: e["episode"]),
            "unfinished_episodes": self._unfinished(),
        }
        path = self.out / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, path)


def degradation(episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How many episodes and steps got fallback rewards (a reward-model call failed and its
    answer was the fallback), and why; ``None`` when none did.

    >>> degradation([{"fallback_steps": 0, "reward_model_errors": 0}]) is None
    True
    >>> degradation([{"fallback_steps": 3, "reward_model_errors": 3, "steps": 50,
    ...               "last_reward_model_error": "connection refused"},
    ...              {"fallback_steps": 0, "reward_model_errors": 0, "steps": 50}])["episodes"]
    1
    """
    hit = [e for e in episodes if e.get("fallback_steps") or e.get("reward_model_errors")]
    if not hit:
        return None
    reasons = [e.get("last_reward_model_error") for e in hit if e.get("last_reward_model_error")]
    return {
        "episodes": len(hit),
        "of_episodes": len(episodes),
        "fallback_steps": sum(int(e.get("fallback_steps") or 0) for e in hit),
        "reward_model_errors": sum(int(e.get("reward_model_errors") or 0) for e in hit),
        "steps": sum(int(e.get("steps") or 0) for e in episodes),
        "reason": reasons[-1] if reasons else "reward-model calls failed",
    }


def _callable_name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _first_attr(env: gym.vector.VectorEnv, name: str) -> Any:
    """``name`` of the first sub-env (through its wrappers), or None if it has none."""
    try:
        # ask first: a missing attribute raised inside an AsyncVectorEnv worker ends the worker
        if not env.call("has_wrapper_attr", name)[0]:
            return None
        value = env.get_attr(name)[0]
    except Exception:  # noqa: BLE001 - attributes are optional
        return None
    return value.item() if isinstance(value, np.generic) else value


def _metrics(row: dict[str, Any]) -> dict[str, Any]:
    """The flat numbers of one episode row (for CSV / TensorBoard / W&B)."""
    lat = row["latency_s"]
    return {
        "steps": row["steps"],
        "env_success": int(row["env_success"]),
        "final_progress": row["final_progress"],
        "max_progress": row["max_progress"],
        "reward_sum": row["reward_sum"],
        "reward_model_calls": row["reward_model_calls"],
        "reward_model_errors": row["reward_model_errors"],
        "reward_model_fallbacks": row["reward_model_fallbacks"],
        "done_by_progress": int(row["done_by_progress"]),
        "terminated": int(row["terminated"]),
        "truncated": int(row["truncated"]),
        "latency_p50_s": lat["p50"],
        "latency_max_s": lat["max"],
        "termination_precision": (row.get("termination_audit") or {}).get("precision"),
        "alarm_firing": None if row["reward_alarm"] is None else int(row["reward_alarm"]["firing"]),
    }


def _make_vector_env(
    config: list[Any], env_kwargs: dict[str, Any], num_envs: int
) -> gym.vector.VectorEnv:
    """``num_envs`` stacks sharing one service (:func:`evolve_envs.stack.vector.make_vec`): in this
    process for one env, else one spawned process each (LIBERO's GL state does not fork)."""
    from evolve_envs.stack.vector import make_vec

    if num_envs == 1:
        return make_vec(config, 1, vectorization_mode="sync", **env_kwargs)
    return make_vec(
        config, num_envs, vectorization_mode="async", vector_kwargs={"context": "spawn"},
        **env_kwargs,
    )  # fmt: skip


def _collect(
    env: gym.vector.VectorEnv, opts: RolloutOptions, policy: str | PolicyFn, report: _Report
) -> None:
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ImportError("the rollout's progress bar needs tqdm: " + _REPORT_EXTRA) from e

    n = env.num_envs
    rng = np.random.default_rng(opts.seed)
    obs, infos = env.reset(seed=opts.seed)
    report.start(env, infos)
    started = 0
    current: list[EpisodeRecord | None] = [None] * n
    report.in_flight = current  # the report names these if the run stops early
    for i in range(n):
        if started < opts.episodes:
            current[i] = _start(report, started, i, obs, infos)
            started += 1
    finished = 0
    quiet = not report.interactive  # tqdm only on a terminal: no line per step in logs
    ep_bar = tqdm(total=opts.episodes, desc="episodes", disable=quiet, position=0)
    step_bar = tqdm(desc="steps", unit="step", disable=quiet, position=1)
    fresh = np.zeros(n, dtype=bool)  # next step() of that env is an autoreset
    with ep_bar, step_bar, _worker_error_reports_held():
        while finished < opts.episodes:
            actions = _actions(policy, env.single_action_space, obs, n, rng)
            obs, rewards, terms, truncs, infos = env.step(actions)
            step_bar.update(int((~fresh).sum()))
            for i in range(n):
                if fresh[i]:  # this step was the autoreset: a new episode starts here
                    fresh[i] = False
                    if started < opts.episodes:
                        current[i] = _start(report, started, i, obs, infos)
                        started += 1
                    continue
                rec = current[i]
                if rec is None:
                    continue
                _record_step(rec, i, obs, float(rewards[i]), infos)
                if terms[i] or truncs[i]:
                    rec.terminated, rec.truncated = bool(terms[i]), bool(truncs[i])
                    rec.summary = dict(_item(infos, "episode_reward_model", i) or {})
                    rec.alarm = _item(infos, "reward_alarm", i)
                    current[i] = None
                    fresh[i] = True
                    report.add(rec)
                    finished += 1
                    ep_bar.update(1)


@contextlib.contextmanager
def _worker_error_reports_held() -> Iterator[None]:
    """Hold Gymnasium's reports of a sub-env worker's error (``AsyncVectorEnv`` warns
    ``ERROR: ...`` with the worker's traceback, then re-raises the error here) until the error
    arrives: a reward service error is reported by the caller in one line, so its reports are
    dropped; any other error's are shown (they hold the worker's traceback)."""
    from evolve_envs.reward.clients.errors import RewardServiceError

    held: list[tuple[Any, ...]] = []
    show = warnings.showwarning

    def hold(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        if str(message).lstrip("\x1b[0123456789;m").startswith("ERROR: "):
            held.append((message, category, filename, lineno, *rest))
        else:
            show(message, category, filename, lineno, *rest)

    warnings.showwarning = hold
    try:
        yield
    except RewardServiceError:
        held.clear()
        raise
    finally:
        warnings.showwarning = show
        for report in held:
            show(*report)


def _start(
    report: _Report, index: int, env_index: int, obs: Any, infos: dict[str, Any]
) -> EpisodeRecord:
    video, camera = report.records_video(index), report.cfg.reward_model.camera
    rec = EpisodeRecord(index=index, env_index=env_index, video=video, camera=camera)
    rec.task_description = str(_item(infos, "task_description", env_index) or "")
    if video:
        rec.frames.append(np.asarray(obs[camera][env_index]).copy())
    return rec


def _record_step(
    rec: EpisodeRecord, i: int, obs: Any, reward: float, infos: dict[str, Any]
) -> None:
    rec.steps += 1
    rec.rewards.append(reward)
    progress = _item(infos, "progress", i)
    rec.progress.append(float(progress) if progress is not None else math.nan)
    if _item(infos, "progress_checked", i):
        rec.check_steps.append(rec.steps)
        latency = _item(infos, "reward_model_latency_s", i)
        if latency is not None:
            rec.latencies_s.append(float(latency))
    rec.env_success = bool(_item(infos, "is_success", i) or rec.env_success)
    if _item(infos, "reward_model_fallback", i):
        rec.fallback_steps += 1
    if rec.video:
        rec.frames.append(np.asarray(obs[rec.camera][i]).copy())


def _item(infos: dict[str, Any], key: str, i: int) -> Any:
    """``infos[key][i]`` of a vector env's info dict, or None where that env did not set it."""
    if key not in infos:
        return None
    mask = infos.get(f"_{key}")
    if mask is not None and not mask[i]:
        return None
    value = infos[key]
    if isinstance(value, dict):  # nested info dicts are batched key by key
        return {k: _item(value, k, i) for k in value if not k.startswith("_")}
    value = value[i]
    return value.item() if isinstance(value, np.generic) else value


def _actions(
    policy: str | PolicyFn, space: gym.spaces.Box, obs: Any, n: int, rng: np.random.Generator
) -> np.ndarray:
    if policy == "zero":
        act = np.zeros((n, *space.shape), dtype=space.dtype)
        act[:, -1] = -1.0  # keep the gripper open
        return act
    if policy == "random":
        return rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(space.dtype)
    assert callable(policy)
    out = np.empty((n, *space.shape), dtype=space.dtype)
    for i in range(n):
        one = {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]
        action = np.asarray(policy(one), dtype=space.dtype)
        if action.shape != space.shape:
            raise ValueError(
                f"policy {_callable_name(policy)} returned an action of shape {action.shape}, "
                f"expected {space.shape}"
            )
        out[i] = action
    return out


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(values.max())}


def _write_plot(path: Path, rec: EpisodeRecord, threshold: float | None) -> str:
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the rollout's progress plots need matplotlib: " + _REPORT_EXTRA) from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, rec.steps + 1)
    fig, (ax_p, ax_r) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    ax_p.plot(steps, rec.progress, color="tab:blue", label="progress")
    for k, s in enumerate(rec.check_steps):
        ax_p.axvline(s, color="tab:gray", lw=0.6, ls=":", label="check" if k == 0 else None)
    if threshold is not None:
        ax_p.axhline(threshold, color="tab:red", ls="--", label=f"done threshold ({threshold:g})")
    ax_p.set_ylim(-2, 102)
    ax_p.set_ylabel("progress (%)")
    ax_p.legend(loc="upper left", fontsize=8)
    ax_p.set_title(f"episode {rec.index}: {rec.task_description}", fontsize=9)
    ax_r.bar(steps, rec.rewards, color="tab:green", width=1.0)
    ax_r.plot(steps, np.cumsum(rec.rewards), color="tab:olive", label="cumulative")
    ax_r.set_xlabel("step")
    ax_r.set_ylabel("reward")
    ax_r.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _write_video(path: Path, rec: EpisodeRecord, threshold: float | None, fps: int = 20) -> str:
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the MP4 writer imageio uses)
    except ImportError as e:
        raise ImportError(
            "the rollout's videos need imageio and imageio-ffmpeg: "
            "pip install 'evolve-envs[video]' (or pass video=False / --no-video)"
        ) from e

    with imageio.get_writer(path, fps=fps, macro_block_size=1) as writer:
        for t, frame in enumerate(rec.frames):
            progress = rec.progress[t - 1] if t > 0 else 0.0
            writer.append_data(overlay_progress(frame, progress, t, threshold))
    return path.name


def overlay_progress(
    frame: np.ndarray, progress: float, step: int, threshold: float | None
) -> np.ndarray:
    """Draw a progress bar and ``step / progress`` text on a copy of ``frame``."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(img)
    w, h = img.size
    bar_h = max(4, h // 32)
    value = 0.0 if math.isnan(progress) else max(0.0, min(100.0, progress))
    draw.rectangle((0, h - bar_h, w - 1, h - 1), fill=(40, 40, 40))
    draw.rectangle((0, h - bar_h, int((w - 1) * value / 100), h - 1), fill=(60, 200, 90))
    if threshold is not None:
        x = int((w - 1) * threshold / 100)
        draw.line((x, h - bar_h, x, h - 1), fill=(230, 60, 60))
    text = f"t={step}  progress={value:5.1f}"
    draw.rectangle((0, 0, min(w - 1, 7 * len(text)), 12), fill=(0, 0, 0))
    draw.text((2, 1), text, fill=(255, 255, 255))
    return np.asarray(img)


def format_table(episodes: list[dict[str, Any]]) -> str:
    """A short plain-text table of the episodes."""
    head = ("ep", "steps", "success", "progress", "reward", "calls", "errors", "p50 ms", "done")
    rows = [head]
    for e in episodes:
        p50 = e["latency_s"]["p50"]
        prog = e["final_progress"]
        rows.append(
            (
                str(e["episode"]),
                str(e["steps"]),
                "yes" if e["env_success"] else "no",
                "-" if prog is None or math.isnan(prog) else f"{prog:.1f}",
                f"{e['reward_sum']:.3f}",
                str(e["reward_model_calls"]),
                str(e["reward_model_errors"]),
                "-" if p50 is None else f"{1000 * p50:.0f}",
                "progress" if e["done_by_progress"] else ("env" if e["terminated"] else "limit"),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    return "\n".join("  ".join(v.rjust(widths[c]) for c, v in enumerate(r)) for r in rows)
