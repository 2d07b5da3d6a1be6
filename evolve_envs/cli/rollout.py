"""The main job: roll out episodes through the full wrapper stack and write a report.

For each episode it records the agentview frames and the per-step progress/reward the wrappers
put in ``info``; :mod:`evolve_envs.cli.rollout_report` writes them into ``out`` *as each episode
finishes* (an interrupted job keeps every finished episode): ``summary.json`` (the effective
configuration and one row per episode), ``metrics.csv`` / ``tensorboard/``, a progress plot and a
video per episode, and a plain-text table (returned, and printed by the CLI).

``config`` takes file paths or the names of shipped configs (``"libero_10"``, ``"fast_dev"``).
With ``reward_model.endpoint: embedded`` the job starts the reward service itself (the config's
``embedded_backend``: ``mock`` with the *change* rule in the shipped configs) on a free loopback
port, shares it between all envs, and stops it at the end.

``policy`` is ``"random"``, ``"zero"`` (gripper open), ``"module:function"`` or a callable; a
callable gets one env's observation dict and returns that env's action.

Example (runs LIBERO, so not run as a doctest; tests/e2e/test_rollout_job.py does)::

    >>> report = run_rollout(RolloutOptions(config="libero_10", episodes=1,
    ...                                     out="runs/demo"))  # doctest: +SKIP
    >>> print(report.table)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from evolve_envs.cli.rollout_media import REPORT_EXTRA
from evolve_envs.cli.rollout_report import (
    EpisodeRecord,
    ReportWriter,
    RolloutReport,
    callable_name,
)
from evolve_envs.recording.metrics_log import import_wandb
from evolve_envs.stack.config import StackConfig
from evolve_envs.stack.loading import load_config

PolicyFn = Callable[[Any], Any]
"""A policy: one env's observation (a dict of arrays) -> that env's action."""

BUILTIN_POLICIES = ("random", "zero")


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
    module_name, sep, attr = policy.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            "policy must be 'random', 'zero', 'module:function' or 'path/to/file.py:function', "
            f"got {policy!r}"
        )
    module = _policy_module(policy, module_name)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"policy {policy!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"policy {policy!r}: {attr!r} is not callable")
    return target


def _policy_module(policy: str, name: str) -> Any:
    """The module a ``--policy`` names: a file path (``./my_policy.py``), a module importable
    here, or one in the current folder (a console script's ``sys.path`` does not hold it)."""
    if name.endswith(".py") or "/" in name or os.sep in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ValueError(f"policy {policy!r}: no file {str(path)!r}")
        spec = importlib.util.spec_from_file_location(f"_evolve_policy_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - the user's file: its error in one line
            raise ValueError(
                f"policy {policy!r}: {path} raised {type(exc).__name__}: {exc}"
            ) from None
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.split(".")[0]
        here = Path.cwd()
        if exc.name == top and ((here / f"{top}.py").is_file() or (here / top).is_dir()):
            sys.path.insert(0, str(here))
            return _policy_module(policy, name)
        raise ValueError(
            f"policy {policy!r}: cannot import {name!r} ({exc}); give a module on PYTHONPATH or "
            f"in the current folder, or a file path such as ./{top.replace('.', '/')}.py:function"
        ) from None
    except ImportError as exc:
        raise ValueError(f"policy {policy!r}: cannot import {name!r}: {exc}") from None


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
    report: ReportWriter, index: int, env_index: int, obs: Any, infos: dict[str, Any]
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
                f"policy {callable_name(policy)} returned an action of shape {action.shape}, "
                f"expected {space.shape}"
            )
        out[i] = action
    return out
