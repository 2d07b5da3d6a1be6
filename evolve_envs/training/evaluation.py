"""Held-out evaluation: a policy's env success on fixed scenes that training never sees.

Reset seeds from :data:`HELD_OUT_BASE` (training draws below ``2**31 - 1``), the plain env (no
reward model: success is ``info["is_success"]``), the mean action or sampled ones
(docs/training.md). :class:`HeldOutEvaluator` keeps its envs for the periodic evaluation;
:func:`evaluate_saved` is ``evolve-envs evaluate``.

>>> from evolve_envs.training.config import TrainConfig
>>> from evolve_envs.training.worker_env import policy_from_config
>>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 5},
...                   reward_model={"enable": False})
>>> env = make_eval_env(cfg)
>>> pol = policy_from_config(cfg.policy, env.observation_space, env.action_space)
>>> evaluate_policy(cfg, pol, held_out_seeds(4)).episodes
4
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

    from evolve_envs.training.config import TrainConfig
    from evolve_envs.training.policies.base import Policy

__all__ = [
    "HELD_OUT_BASE",
    "EvalResult",
    "HeldOutEvaluator",
    "SavedPolicy",
    "evaluate_policy",
    "evaluate_saved",
    "held_out_seeds",
    "make_eval_env",
    "read_saved",
]

#: First held-out reset seed: above every seed training draws (``< 2**31 - 1``).
HELD_OUT_BASE = 2**31


def held_out_seeds(n: int, offset: int = 0) -> list[int]:
    """``n`` fixed held-out reset seeds.

    >>> held_out_seeds(2)
    [2147483648, 2147483649]
    """
    return [HELD_OUT_BASE + offset + k for k in range(n)]


@dataclass
class EvalResult:
    """Outcome of :func:`evaluate_policy`: per episode (in seed order) the env's success flag and
    the length; ``frames`` holds the camera frames of the episodes asked to be recorded.

    >>> res = EvalResult(success=[True, False, True], lengths=[12, 40, 9])
    >>> res.episodes, round(res.success_rate, 3)
    (3, 0.667)
    """

    success: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    frames: list[list[np.ndarray]] = field(default_factory=list, repr=False)
    returns: list[float] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)

    @property
    def mean_return(self) -> float:
        """Mean episode return (the eval env's rewards summed); NaN when none were kept."""
        return float(np.mean(self.returns)) if self.returns else float("nan")

    @property
    def mean_progress(self) -> float:
        """Mean of the env's ground-truth progress at each episode's end
        (``info["true_progress"]``; NaN when the env reports none).

        >>> EvalResult([False, True], [40, 9], progress=[0.25, 1.0]).mean_progress
        0.625
        """
        vals = [p for p in self.progress if np.isfinite(p)]
        return float(np.mean(vals)) if vals else float("nan")

    @property
    def episodes(self) -> int:
        return len(self.success)

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.success)) if self.success else float("nan")

    def to_json(self) -> dict[str, object]:
        """The numbers (no frames), for a JSON result.

        >>> EvalResult([True, False], [3, 8], [1, 2]).to_json()["success_rate"]
        0.5
        """
        return {
            "episodes": self.episodes,
            "success_rate": self.success_rate,
            "mean_length": float(np.mean(self.lengths)) if self.lengths else math.nan,
            "success": [bool(s) for s in self.success],
            "lengths": [int(n) for n in self.lengths],
            "seeds": [int(s) for s in self.seeds],
        }


def make_eval_env(cfg: TrainConfig, worker_index: int = 0) -> gym.Env:
    """The config's env without the reward model (success comes from the env), with
    ``eval.env_overrides`` layered on last (the held-out scenes' settings)."""
    from evolve_envs.stack.config import ProgressModelConfig
    from evolve_envs.stack.factory import make_env
    from evolve_envs.stack.loading import merge

    off = ProgressModelConfig(enable=False)
    stack = cfg.model_copy(update={"reward_model": off, "record": None}).stack(worker_index)
    env = merge(stack.env, cfg.eval.env_overrides)
    return make_env(stack.model_copy(update={"env": env}))


class HeldOutEvaluator:
    """Plays held-out episodes on up to ``num_envs`` plain envs of ``cfg``, built on first use
    and kept until :meth:`close` (so repeated evaluations do not rebuild simulators).

    Example:
        >>> from evolve_envs.training.config import TrainConfig
        >>> cfg = TrainConfig(env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 4},
        ...                   reward_model={"enable": False})
        >>> with HeldOutEvaluator(cfg, num_envs=2) as ev:
        ...     res = ev.run(ev.policy(), held_out_seeds(3), record=1)
        >>> res.episodes, len(res.frames), res.frames[0][0].shape
        (3, 1, (64, 64, 3))
    """

    def __init__(self, cfg: TrainConfig, num_envs: int = 10) -> None:
        self.cfg = cfg
        self.num_envs = max(1, int(num_envs))
        self._envs: list[gym.Env] = []

    def envs(self, n: int) -> list[gym.Env]:
        """The first ``n`` (at most ``num_envs``) envs, built as needed."""
        n = max(1, min(n, self.num_envs))
        while len(self._envs) < n:
            self._envs.append(make_eval_env(self.cfg))
        return self._envs[:n]

    def policy(self, state_dict: dict[str, object] | None = None) -> Policy:
        """A policy of the config for this env's spaces, with ``state_dict`` loaded if given."""
        from evolve_envs.training.worker_env import policy_from_config

        env = self.envs(1)[0]
        pol = policy_from_config(self.cfg.policy, env.observation_space, env.action_space)
        if state_dict is not None:
            pol.load_state_dict(state_dict)
        return pol

    def run(
        self,
        policy: Policy,
        seeds: Sequence[int],
        *,
        deterministic: bool = True,
        sample_seed: int = 0,
        record: int = 0,
        video_key: str | None = None,
    ) -> EvalResult:
        """One episode per seed; the frames of the first ``record`` episodes are kept (the
        observation's ``video_key`` image, else its first camera image)."""
        import torch

        if not deterministic:  # the policy's CUDA RNG too when it samples there (a GPU learner)
            cuda = sorted({p.device.index or 0 for p in policy.parameters() if p.is_cuda})
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(sample_seed)
                return self._play(policy, seeds, False, record, video_key)
        return self._play(policy, seeds, True, record, video_key)

    def _play(
        self,
        policy: Policy,
        seeds: Sequence[int],
        deterministic: bool,
        record: int,
        video_key: str | None,
    ) -> EvalResult:
        import torch

        from evolve_envs.training.worker_env import batch_obs, with_task

        envs = self.envs(len(seeds))
        result = EvalResult(seeds=[int(s) for s in seeds])
        was_training = policy.training
        policy.eval()
        try:
            for start in range(0, len(seeds), len(envs)):
                chunk = seeds[start : start + len(envs)]
                obs = [
                    with_task(*env.reset(seed=int(s))) for env, s in zip(envs, chunk, strict=False)
                ]
                live = list(range(len(chunk)))
                success = [False] * len(chunk)
                lengths = [0] * len(chunk)
                returns = [0.0] * len(chunk)
                progress = [float("nan")] * len(chunk)
                frames: dict[int, list[np.ndarray]] = {
                    i: [] for i in range(len(chunk)) if start + i < record
                }
                for i in frames:
                    _keep_frame(frames, i, obs[i], video_key, envs[i])
                while live:
                    inputs = policy.encode_obs(batch_obs([obs[i] for i in live]))
                    with torch.no_grad():
                        actions, _ = policy.act(inputs, deterministic=deterministic)
                    still = []
                    for j, i in enumerate(live):
                        o, reward, terminated, truncated, info = envs[i].step(actions[j])
                        lengths[i] += 1
                        returns[i] += float(reward)
                        _keep_frame(frames, i, o, video_key, envs[i])
                        if terminated or truncated:
                            success[i] = bool(info.get("is_success", False))
                            progress[i] = float(info.get("true_progress", float("nan")))
                        else:
                            obs[i] = with_task(o, info)
                            still.append(i)
                    live = still
                result.success.extend(success)
                result.lengths.extend(lengths)
                result.returns.extend(returns)
                result.progress.extend(progress)
                result.frames.extend(frames[i] for i in sorted(frames) if frames[i])
        finally:
            policy.train(was_training)
        return result

    def close(self) -> None:
        """Close the envs."""
        envs, self._envs = self._envs, []
        for env in envs:
            env.close()

    def __enter__(self) -> HeldOutEvaluator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _keep_frame(
    frames: dict[int, list[np.ndarray]],
    i: int,
    obs: Mapping[str, object],
    key: str | None,
    env: gym.Env,
) -> None:
    """Append env ``i``'s camera frame to ``frames[i]`` when that episode is recorded; a camera
    the env renders on demand (LIBERO's ``render_cameras: on_demand``) is drawn now."""
    from evolve_envs.envs.libero_render import camera_frame
    from evolve_envs.recording.media import pick_frame

    if i not in frames:
        return
    if key is not None and isinstance(obs, Mapping) and key in obs:
        frame = camera_frame(env, obs, key)
    else:
        frame = pick_frame(obs, key)
    if frame is not None:
        frames[i].append(np.array(frame, copy=True))


def evaluate_policy(
    cfg: TrainConfig,
    policy: Policy,
    seeds: list[int],
    num_envs: int = 10,
    *,
    deterministic: bool = True,
    sample_seed: int = 0,
) -> EvalResult:
    """Play one episode per seed (``num_envs`` at a time) and record success: the mean action,
    or with ``deterministic=False`` sampled actions (reproducible for a given ``sample_seed``)."""
    with HeldOutEvaluator(cfg, min(num_envs, len(seeds))) as evaluator:
        return evaluator.run(policy, seeds, deterministic=deterministic, sample_seed=sample_seed)


@dataclass
class SavedPolicy:
    """A saved policy as :func:`read_saved` found it: the file, its payload (``policy`` state
    dict, ``counters``, ...), its training config and, from a policy file, its spaces.

    >>> from evolve_envs.training.config import TrainConfig
    >>> SavedPolicy(Path("runs/rp/best.safetensors"), {"policy": {}}, TrainConfig()).path.name
    'best.safetensors'
    """

    path: Path
    payload: dict[str, object]
    cfg: TrainConfig
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None


def read_saved(source: str | Path, *, best: bool = False, trust: bool = False) -> SavedPolicy:
    """The saved policy at ``source``: a run directory (:func:`~evolve_envs.training.policy_file.
    saved_source`), a policy file, or a ``.pt`` (a checkpoint, an older ``best.pt``, a snapshot,
    which takes its run's ``config.yaml``; :func:`~evolve_envs.training.checkpoint.load_pt` with
    ``trust``). ``FileNotFoundError`` says what is missing."""
    from evolve_envs.training.checkpoint import load_pt
    from evolve_envs.training.config import load_train_config, read_stored
    from evolve_envs.training.policy_file import read_policy_file, saved_source

    path = saved_source(source, best=best)
    if not path.is_file():
        hint = (
            " (best.safetensors is written by a run with held-out evaluation: eval.every_s)"
            if best
            else ""
        )
        raise FileNotFoundError(f"{source}: no saved policy at {path}{hint}")
    if path.suffix == ".safetensors":
        saved = read_policy_file(path)
        payload = {
            k: v for k, v in saved.info.items() if k not in ("observation_space", "action_space")
        }
        payload["policy"] = saved.state_dict
        cfg = load_train_config(read_stored(saved.info["config"]))
        return SavedPolicy(path, payload, cfg, saved.observation_space, saved.action_space)
    payload = load_pt(path, trust=trust)
    if not isinstance(payload, dict) or "policy" not in payload:
        raise ValueError(f"{path} holds no policy weights (not a checkpoint, best.pt or snapshot)")
    config = payload.get("config")
    if config is None:  # a snapshot: snapshots/ lives in the run directory
        found = [d / "config.yaml" for d in (path.parent, path.parent.parent)]
        found = [f for f in found if f.is_file()]
        if not found:
            raise FileNotFoundError(f"{path} holds no config and no config.yaml is beside it")
        config = found[0]
    return SavedPolicy(path, payload, load_train_config(read_stored(config)))


def evaluate_saved(
    saved: SavedPolicy,
    out: str | Path,
    *,
    episodes: int | None = None,
    num_envs: int | None = None,
    sampled: bool = True,
    videos: int = 3,
    sample_seed: int = 0,
) -> dict[str, object]:
    """Evaluate a saved policy on the held-out scenes of its config's ``eval`` block
    (``episodes`` and ``num_envs`` override it), with the mean action and, with ``sampled``,
    sampled actions; write ``result.json`` and, with ``videos > 0``, ``episodes.mp4`` (the first
    ``videos`` episodes with the mean action, one after the other) into ``out``. Returns the
    result."""
    cfg = saved.cfg
    n = int(episodes or cfg.eval.episodes)
    seeds = held_out_seeds(n, cfg.eval.seed_offset)
    out = Path(out)
    key = cfg.eval.video_key or cfg.policy.image_key
    with HeldOutEvaluator(cfg, num_envs or cfg.eval.num_envs) as evaluator:
        policy = evaluator.policy(saved.payload["policy"])
        det = evaluator.run(policy, seeds, record=videos, video_key=key)
        smp = (
            evaluator.run(policy, seeds, deterministic=False, sample_seed=sample_seed)
            if sampled
            else None
        )
    result: dict[str, object] = {
        "policy": str(saved.path),
        "algo": saved.payload.get("algo"),
        "counters": saved.payload.get("counters"),
        "scenes": f"held-out reset seeds {seeds[0]}..{seeds[-1]} (training draws below 2**31 - 1)",
        "success_source": "the env's success flag (info['is_success']), no reward model",
        "deterministic": det.to_json(),
        "sampled": None if smp is None else {**smp.to_json(), "sample_seed": sample_seed},
    }
    out.mkdir(parents=True, exist_ok=True)
    if det.frames:
        from evolve_envs.recording.media import write_mp4

        frames = [f for episode in det.frames for f in episode]
        result["video"] = write_mp4(out / "episodes.mp4", frames, fps=20).name
        result["video_episodes"] = len(det.frames)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result
