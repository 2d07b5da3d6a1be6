"""The rollout's report: what ``evolve-envs rollout`` leaves in its output folder, written as
each episode finishes (an interrupted job keeps every finished episode): ``summary.json``,
``metrics.csv`` / ``tensorboard/``, a progress plot and a video per episode, and the text table.
The files are described in docs/getting-started.md.

Example:
    >>> rec = EpisodeRecord(index=0, env_index=0, steps=1, rewards=[0.5], progress=[50.0])
    >>> print(format_table([rec.to_json()], source="mock: pixel change"))
    model progress = mock: pixel change; env success = the env's own flag
    ep  steps  env success  model progress  reward  calls  errors  p50 ms   done
     0      1           no            50.0   0.500      0       0       -  limit
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from evolve_envs.cli.reports.media import write_plot, write_video
from evolve_envs.cli.reports.progress_source import progress_source
from evolve_envs.cli.reports.rollout_table import (
    callable_name,
    degradation,
    episode_metrics,
    format_table,
    percentiles,
)
from evolve_envs.progress.done_rules import TerminationAudit
from evolve_envs.recording.metrics_log import EpisodeLog
from evolve_envs.stack.config import StackConfig

if TYPE_CHECKING:
    from collections.abc import Callable
    from dataclasses import Field

    from pydantic import JsonValue


class ReportOptions(Protocol):
    """The rollout options the report reads; :class:`evolve_envs.cli.rollout.RolloutOptions`
    (a dataclass) fits. Typed structurally so that the report does not import the rollout."""

    __dataclass_fields__: ClassVar[dict[str, Field[object]]]
    policy: str | Callable[[object], object]
    seed: int
    episodes: int
    num_envs: int
    video: bool
    video_every: int
    progress_bar: bool
    tensorboard: bool
    wandb_project: str | None


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
    summary: dict[str, JsonValue] = field(default_factory=dict)
    alarm: dict[str, JsonValue] | None = None  # info["reward_alarm"] (reward_model.alarm.enable)
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

    def to_json(self) -> dict[str, JsonValue]:
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
            "latency_s": percentiles(lat),
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
    """What :func:`~evolve_envs.cli.rollout.run_rollout` returns: the folder, one row per episode
    (as in ``summary.json``), the table, the wall time, the effective configuration, why it stopped
    and ``degraded`` (None for a clean run, else :func:`degradation`'s summary)."""

    out: Path
    episodes: list[dict[str, JsonValue]]
    table: str
    wall_s: float
    effective: dict[str, JsonValue] = field(default_factory=dict)
    interrupted: bool = False
    stop_reason: str = "completed"
    degraded: dict[str, JsonValue] | None = None


#: The files a rollout report writes (its episodes' plots and videos by index).
_REPORT_FILES = re.compile(r"^(summary\.json|metrics\.csv|progress_\d+\.png|episode_\d+\.mp4)$")


def clear_earlier_report(out: Path) -> list[str]:
    """Remove what an earlier rollout wrote into ``out`` (its summary, metrics, TensorBoard
    events, plots and videos; nothing else), so that a report never mixes two runs' episodes.
    Returns the names removed.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("summary.json", "progress_7.png", "episode_7.mp4", "notes.txt"):
    ...     _ = (d / name).write_text("earlier")
    >>> clear_earlier_report(d), sorted(p.name for p in d.iterdir())
    (['episode_7.mp4', 'progress_7.png', 'summary.json'], ['notes.txt'])
    """
    if not out.is_dir():
        return []
    removed = sorted(p.name for p in out.iterdir() if p.is_file() and _REPORT_FILES.match(p.name))
    for name in removed:
        (out / name).unlink()
    if (out / "tensorboard").is_dir():
        shutil.rmtree(out / "tensorboard")
        removed.append("tensorboard")
    return removed


class ReportWriter:
    """Writes the report files as episodes finish (see the module docstring).

    ``in_flight`` is set by the rollout loop to the episodes running now, so a run that stops
    early names them in ``summary.json``.

    >>> import tempfile
    >>> from evolve_envs.cli.rollout import RolloutOptions
    >>> from evolve_envs.stack.loading import load_config
    >>> cfg = load_config({"env": {"id": "evolve_envs/ReachPlace-v0"},
    ...                    "reward_model": {"enable": False}})
    >>> opts = RolloutOptions(video=False, tensorboard=False, progress_bar=False)
    >>> writer = ReportWriter(Path(tempfile.mkdtemp()), opts, cfg)
    >>> writer.add(EpisodeRecord(index=0, env_index=0, steps=1, rewards=[1.0], progress=[50.0]))
    >>> sorted(p.name for p in writer.finish(wall_s=0.1).out.iterdir())
    ['metrics.csv', 'progress_0.png', 'summary.json']
    """

    def __init__(self, out: Path, opts: ReportOptions, cfg: StackConfig) -> None:
        self.out = out
        self.opts = opts
        self.cfg = cfg
        rm = cfg.reward_model
        done_threshold = getattr(rm, "done_threshold", None)  # a key of kind: progress
        self.threshold = (
            100.0 * done_threshold if rm.enable and done_threshold is not None else None
        )
        self.source = progress_source(rm)  # what the progress numbers are, said everywhere
        self.label = progress_source(rm, short=True) or "progress"
        self.effective: dict[str, JsonValue] = {}
        self.episodes: list[dict[str, JsonValue]] = []
        self.in_flight: list[EpisodeRecord | None] = []  # episodes running now (set by _collect)
        self.stop: dict[str, str | None] = {"stop_reason": "running", "stop_detail": None}
        self.audit = TerminationAudit()  # model done decisions vs env success, whole run
        self.interactive = opts.progress_bar and sys.stderr.isatty()
        clear_earlier_report(out)  # a report folder holds one rollout, never two mixed
        self.log = EpisodeLog(
            out,
            tensorboard=opts.tensorboard,
            wandb_project=opts.wandb_project,
            run_config={"config": cfg.model_dump(mode="json"), "options": self._options()},
        )
        self._write_summary(wall_s=None, complete=False, interrupted=False)

    def _options(self) -> dict[str, JsonValue]:
        opts = asdict(self.opts)
        if callable(self.opts.policy):
            opts["policy"] = callable_name(self.opts.policy)
        return {k: str(v) if isinstance(v, Path) else v for k, v in opts.items()}

    def start(
        self,
        *,
        limit: int | None,
        task_id: int | str | None,
        task_description: str | None,
        model_id: str | None = None,
    ) -> None:
        """Record what the built env actually runs (read after the first reset): its episode
        limit, task id and task description, and the model id its reward service reports."""
        rm = self.cfg.reward_model
        env_cfg = self.cfg.env
        full = env_cfg.get("max_episode_steps")
        if full is None and "id" not in env_cfg:
            from evolve_envs.envs.libero_tasks import default_max_episode_steps

            with contextlib.suppress(ValueError):
                full = default_max_episode_steps(env_cfg.get("suite", "libero_10"))
        policy = self.opts.policy
        self.effective = {
            "suite": env_cfg.get("suite", "libero_10") if "id" not in env_cfg else None,
            "env_id": env_cfg.get("id"),
            "task_id": task_id,
            "task_description": task_description,
            "max_episode_steps": limit,
            "progressive_max_step": rm.progressive_max_step,
            "policy": callable_name(policy) if callable(policy) else policy,
            "seed": self.opts.seed,
            "episodes": self.opts.episodes,
            "num_envs": self.opts.num_envs,
            "video_every": self.opts.video_every if self.opts.video else None,
            "reward_model": (
                f"embedded {rm.embedded_backend} service {dict(rm.embedded_backend_kwargs)}"
                if rm.enable and rm.embedded
                else (rm.endpoint if rm.enable else None)
            ),
            "progress_source": self.source,
            "reward_model_id": model_id,
        }
        if model_id:
            note = f"reward model {model_id}" + (
                " (the mock backend's rule: a stand-in, not a learned model)"
                if str(model_id).startswith("mock")
                else ""
            )
            print(f"evolve-envs rollout: {note}", file=sys.stderr, flush=True)
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
            row["video"] = write_video(
                self.out / f"episode_{rec.index}.mp4", rec, self.threshold, label=self.label
            )
        row["plot"] = write_plot(
            self.out / f"progress_{rec.index}.png", rec, self.threshold, self.source
        )
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
        self.log.add(rec.index, episode_metrics(row))
        self._write_summary(wall_s=None, complete=False, interrupted=False)
        if self.opts.progress_bar and not self.interactive:
            prog = row["final_progress"]
            shown = "-" if prog is None or math.isnan(prog) else f"{prog:.1f}"
            print(
                f"episode {rec.index}: {row['steps']} steps, env success "
                f"{'yes' if row['env_success'] else 'no'}, model progress {shown} "
                f"[{self.label}], reward "
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
            table=format_table(episodes, source=self.source),
            wall_s=wall_s,
            effective=self.effective,
            interrupted=interrupted,
            stop_reason=stop,
            degraded=degradation(episodes + self._unfinished()),
        )

    def _unfinished(self) -> list[dict[str, JsonValue]]:
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
