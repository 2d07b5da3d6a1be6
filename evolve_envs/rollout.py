"""The main job: roll out episodes through the full wrapper stack and write a report.

For each episode it records the agentview frames and the per-step progress/reward the wrappers
put in ``info``, then writes into ``out``:

* ``summary.json`` — per episode: steps, env success, final progress, reward sum, reward-model
  calls, errors, fallbacks, latency percentiles, done-by-progress; plus the config used;
* ``progress_<ep>.png`` — progress and reward vs step, check steps and the done threshold marked;
* ``episode_<ep>.mp4`` — the agentview frames with progress overlaid;
* a short plain-text table (returned, and printed by the CLI).

With ``reward_model.endpoint: embedded`` the job starts the reward service itself (the config's
``embedded_backend``: ``mock`` with the *change* rule in the shipped configs) on a free loopback
port, shares it between all envs, and stops it at the end.

Example::

    from evolve_envs.rollout import RolloutOptions, run_rollout

    report = run_rollout(RolloutOptions(config="configs/libero_10.yaml", episodes=1,
                                        out="runs/demo"))
    print(report.table)
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from evolve_envs.config import RewardModelConfig, load_config
from evolve_envs.factory import make_env

Policy = Literal["random", "zero"]


@dataclass
class RolloutOptions:
    """What to roll out. ``max_steps`` overrides the suite's episode limit."""

    config: str | Path | dict[str, Any] | list[Any] = "configs/libero_10.yaml"
    task_id: int | None = None
    episodes: int = 1
    num_envs: int = 1
    policy: Policy = "random"
    out: str | Path = "runs/rollout"
    seed: int = 0
    max_steps: int | None = None
    video: bool = True
    progress_bar: bool = True


@dataclass
class EpisodeRecord:
    """Everything recorded about one episode (frames are not serialised)."""

    index: int
    env_index: int
    task_description: str = ""
    steps: int = 0
    rewards: list[float] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    check_steps: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)
    env_success: bool = False
    terminated: bool = False
    truncated: bool = False
    summary: dict[str, Any] = field(default_factory=dict)

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
            "latency_s": _percentiles(lat),
            "done_by_progress": bool(s.get("done_by_progress", False)),
            "done_step": s.get("done_step"),
            "high_progress_on_failure": s.get("high_progress_on_failure"),
            "success_at_low_progress": s.get("success_at_low_progress"),
            "check_steps": self.check_steps,
        }


@dataclass
class RolloutReport:
    out: Path
    episodes: list[dict[str, Any]]
    table: str
    wall_s: float


def run_rollout(opts: RolloutOptions) -> RolloutReport:
    """Run the job described by ``opts``; return the report (files are written to ``opts.out``)."""
    if opts.episodes < 1 or opts.num_envs < 1:
        raise ValueError("episodes and num_envs must be >= 1")
    if opts.policy not in ("random", "zero"):
        raise ValueError(f"policy must be 'random' or 'zero', got {opts.policy!r}")
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    sources = list(opts.config) if isinstance(opts.config, list | tuple) else [opts.config]
    cfg = load_config(*sources)
    rm = cfg.reward_model
    started = time.monotonic()
    with _reward_endpoint(rm) as url:
        overrides: dict[str, Any] = {}
        if url is not None:
            overrides["reward_model"] = {"endpoint": url}
        env_kwargs: dict[str, Any] = {}
        if opts.task_id is not None:
            env_kwargs["task_id"] = opts.task_id
        if opts.max_steps is not None:
            env_kwargs["max_episode_steps"] = opts.max_steps
        env = _make_vector_env(opts.config, overrides, env_kwargs, opts.num_envs)
        try:
            records = _collect(env, opts)
        finally:
            env.close()
    threshold = 100.0 * rm.done_threshold if rm.enable else None
    episodes = []
    for rec in records:
        row = rec.to_json()
        if opts.video and rec.frames:
            row["video"] = _write_video(out / f"episode_{rec.index}.mp4", rec, threshold)
        row["plot"] = _write_plot(out / f"progress_{rec.index}.png", rec, threshold)
        episodes.append(row)
    wall = time.monotonic() - started
    summary = {
        "config": cfg.model_dump(mode="json"),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()},
        "reward_model_endpoint": (
            f"embedded {rm.embedded_backend} service" if rm.enable and rm.embedded else None
        ),
        "wall_s": wall,
        "episodes": episodes,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    return RolloutReport(out=out, episodes=episodes, table=format_table(episodes), wall_s=wall)


@contextlib.contextmanager
def _reward_endpoint(rm: RewardModelConfig) -> Iterator[str | None]:
    """Start one embedded service for the whole job (shared by every env and worker)."""
    if not (rm.enable and rm.embedded):
        yield None
        return
    from reward_service.embedded import EmbeddedService

    with EmbeddedService(rm.embedded_backend, dict(rm.embedded_backend_kwargs)) as svc:
        yield svc.url


def _make_vector_env(
    config: Any, overrides: dict[str, Any], env_kwargs: dict[str, Any], num_envs: int
) -> gym.vector.VectorEnv:
    def thunk() -> gym.Env:
        return make_env(config, **overrides, **env_kwargs)

    if num_envs == 1:
        return gym.vector.SyncVectorEnv([thunk])
    return gym.vector.AsyncVectorEnv([thunk] * num_envs, context="spawn")


def _collect(env: gym.vector.VectorEnv, opts: RolloutOptions) -> list[EpisodeRecord]:
    from tqdm.auto import tqdm

    n = env.num_envs
    rng = np.random.default_rng(opts.seed)
    obs, infos = env.reset(seed=opts.seed)
    started = 0
    current: list[EpisodeRecord | None] = [None] * n
    for i in range(n):
        if started < opts.episodes:
            current[i] = _start(started, i, obs, infos)
            started += 1
    done: list[EpisodeRecord] = []
    ep_bar = tqdm(total=opts.episodes, desc="episodes", disable=not opts.progress_bar, position=0)
    step_bar = tqdm(desc="steps", unit="step", disable=not opts.progress_bar, position=1)
    fresh = np.zeros(n, dtype=bool)  # next step() of that env is an autoreset
    with ep_bar, step_bar:
        while len(done) < opts.episodes:
            actions = _actions(opts.policy, env.single_action_space, n, rng)
            obs, rewards, terms, truncs, infos = env.step(actions)
            step_bar.update(int((~fresh).sum()))
            for i in range(n):
                if fresh[i]:  # this step was the autoreset: a new episode starts here
                    fresh[i] = False
                    if started < opts.episodes:
                        current[i] = _start(started, i, obs, infos)
                        started += 1
                    continue
                rec = current[i]
                if rec is None:
                    continue
                _record_step(rec, i, obs, float(rewards[i]), infos, opts.video)
                if terms[i] or truncs[i]:
                    rec.terminated, rec.truncated = bool(terms[i]), bool(truncs[i])
                    rec.summary = dict(_item(infos, "episode_reward_model", i) or {})
                    done.append(rec)
                    current[i] = None
                    fresh[i] = True
                    ep_bar.update(1)
    return sorted(done, key=lambda r: r.index)[: opts.episodes]


def _start(index: int, env_index: int, obs: Any, infos: dict[str, Any]) -> EpisodeRecord:
    rec = EpisodeRecord(index=index, env_index=env_index)
    rec.task_description = str(_item(infos, "task_description", env_index) or "")
    rec.frames.append(np.asarray(obs["agentview_image"][env_index]).copy())
    return rec


def _record_step(
    rec: EpisodeRecord, i: int, obs: Any, reward: float, infos: dict[str, Any], video: bool
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
    if video:
        rec.frames.append(np.asarray(obs["agentview_image"][i]).copy())


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


def _actions(policy: Policy, space: gym.spaces.Box, n: int, rng: np.random.Generator) -> np.ndarray:
    if policy == "zero":
        act = np.zeros((n, *space.shape), dtype=space.dtype)
        act[:, -1] = -1.0  # keep the gripper open
        return act
    return rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(space.dtype)


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(values.max())}


def _write_plot(path: Path, rec: EpisodeRecord, threshold: float | None) -> str:
    import matplotlib

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
    import imageio.v2 as imageio

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
