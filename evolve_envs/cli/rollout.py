"""``evolve-envs rollout``: episodes through the full wrapper stack, the report written as each
one finishes (:mod:`evolve_envs.cli.reports.rollout`).

Example::

    report = run_rollout(RolloutOptions(config="libero_10", episodes=1, out="runs/demo"))
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np

from evolve_envs.cli.reports.media import REPORT_EXTRA
from evolve_envs.cli.reports.rollout import EpisodeRecord, ReportWriter, RolloutReport
from evolve_envs.cli.reports.rollout_table import callable_name
from evolve_envs.cli.rollout_policy import PolicyFn, resolve_policy
from evolve_envs.recording.metrics_log import import_wandb
from evolve_envs.stack.config import StackConfig
from evolve_envs.stack.loading import load_config


@dataclass
class RolloutOptions:
    """What to roll out: ``task_id`` as for ``gym.make``, ``policy`` as
    :func:`~evolve_envs.cli.rollout_policy.resolve_policy` takes it, ``record`` a folder for
    re-scoring (docs/RECORDING.md), ``overrides`` ``KEY=VALUE`` strings layered on the config last.

    Example:
        >>> opts = RolloutOptions(config=["libero_goal", "short_precise"], task_id=7, max_steps=80)
        >>> opts.episodes, opts.policy
        (1, 'random')
    """

    config: str | Path | dict[str, object] | list[str | Path | dict[str, object]] = "libero_10"
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


def check_options(opts: RolloutOptions) -> None:
    """Reject options that cannot run, before anything is written (``ValueError``)."""
    for name in ("episodes", "num_envs", "video_every"):
        value = getattr(opts, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    steps = opts.max_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"max_steps must be an int >= 1 (the episode limit), got {steps!r}")


def check_extras(opts: RolloutOptions, cfg: StackConfig) -> None:
    """Fail (``ImportError`` naming the extra) when an optional package the chosen options need
    is missing, before anything runs or is written: tqdm and matplotlib (the report), imageio
    (videos, unless ``video=False``), pyarrow (``record``). TensorBoard is optional: without it
    the report has CSV only (``tensorboard/`` is not created)."""
    needs = [("tqdm", "the rollout's progress bar needs tqdm: " + REPORT_EXTRA)]
    needs.append(("matplotlib", "the rollout's progress plots need matplotlib: " + REPORT_EXTRA))
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
    """Run the job described by ``opts``, writing to ``opts.out`` per episode. The options, the
    config, the extras, the reward service and the env are checked before ``opts.out`` is created;
    ``KeyboardInterrupt`` and a strict reward-service error propagate after the finished episodes
    are saved (``summary.json`` says why it stopped)."""
    check_options(opts)
    policy = resolve_policy(opts.policy)
    if opts.wandb_project:
        import_wandb(opts.wandb_project)  # fail before anything is written
    sources = list(opts.config) if isinstance(opts.config, list | tuple) else [opts.config]
    env_kwargs: dict[str, object] = {}
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
    if rm.enable and getattr(rm, "calls", None) == "deferred":
        from evolve_envs.cli.errors import CliError

        raise CliError(
            "evolve-envs rollout reports each step's reward as the step returns it, and under "
            "reward_model.calls: deferred the model's part comes later, with the settled episode; "
            "roll out with calls: sync or async (the rewards are the same)"
        )
    if opts.record is not None:  # name the embedded service's spec, not its loopback URL
        from evolve_envs.stack.factory import describe_reward_model

        sources[-1]["record"]["reward_model"] = describe_reward_model(rm)
    out = Path(opts.out)
    started = time.monotonic()
    report: ReportWriter | None = None
    try:
        # building the env starts the shared service (for endpoint: embedded) and checks it and
        # the task: still nothing written. Closing the env stops the service.
        env = _make_vector_env(sources, env_kwargs, opts.num_envs)
        with _closing_quietly_on_error(env):
            out.mkdir(parents=True, exist_ok=True)
            report = ReportWriter(out, opts, cfg)
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


def _first_attr(env: gym.vector.VectorEnv, name: str) -> object:
    """``name`` of the first sub-env (through its wrappers), or None if it has none."""
    try:
        # ask first: a missing attribute raised inside an AsyncVectorEnv worker ends the worker
        if not env.call("has_wrapper_attr", name)[0]:
            return None
        value = env.get_attr(name)[0]
    except Exception:  # noqa: BLE001 - attributes are optional
        return None
    return value.item() if isinstance(value, np.generic) else value


def _make_vector_env(
    config: list[str | Path | dict[str, object]], env_kwargs: dict[str, object], num_envs: int
) -> gym.vector.VectorEnv:
    """``num_envs`` stacks sharing one service (:func:`evolve_envs.stack.vector.make_vec`): in this
    process for one env, else one spawned process each (LIBERO's GL state does not fork)."""
    from evolve_envs.stack.vector import make_vec

    if num_envs == 1:
        return make_vec(config, 1, vectorization_mode="sync", **env_kwargs)
    return make_vec(
        config,
        num_envs,
        vectorization_mode="async",
        vector_kwargs={"context": "spawn"},
        **env_kwargs,
    )


def _collect(
    env: gym.vector.VectorEnv, opts: RolloutOptions, policy: str | PolicyFn, report: ReportWriter
) -> None:
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ImportError("the rollout's progress bar needs tqdm: " + REPORT_EXTRA) from e

    n = env.num_envs
    rng = np.random.default_rng(opts.seed)
    obs, infos = env.reset(seed=opts.seed)
    limit = _item(infos, "max_episode_steps", 0)
    if limit is None:
        limit = _first_attr(env, "_max_episode_steps")
    report.start(
        limit=limit,
        task_id=_first_attr(env, "task_id"),
        task_description=_item(infos, "task_description", 0),
        model_id=_item(infos, "reward_model_id", 0),
    )
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

    held: list[tuple[object, ...]] = []
    show = warnings.showwarning

    def hold(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, *rest: object
    ) -> None:
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
    report: ReportWriter,
    index: int,
    env_index: int,
    obs: dict[str, np.ndarray],
    infos: dict[str, object],
) -> EpisodeRecord:
    video, camera = report.records_video(index), report.cfg.reward_model.camera
    rec = EpisodeRecord(index=index, env_index=env_index, video=video, camera=camera)
    rec.task_description = str(_item(infos, "task_description", env_index) or "")
    if video:
        rec.frames.append(np.asarray(obs[camera][env_index]).copy())
    return rec


def _record_step(
    rec: EpisodeRecord, i: int, obs: dict[str, np.ndarray], reward: float, infos: dict[str, object]
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


def _item(infos: dict[str, object], key: str, i: int) -> object:
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
    policy: str | PolicyFn,
    space: gym.spaces.Box,
    obs: dict[str, np.ndarray],
    n: int,
    rng: np.random.Generator,
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
                f"policy {callable_name(policy)} returned an action of shape {action.shape}, "
                f"expected {space.shape}"
            )
        out[i] = action
    return out
