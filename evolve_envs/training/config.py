"""The training config of ``evolve-envs train``: the stack's typed blocks and the training ones.

``env``, ``reward_model`` and ``record`` are the stack's (:mod:`evolve_envs.stack.config`), checked
once by :func:`load_train_config` and handed on typed to the workers, the embedded service and
the learner; ``workers``, ``policy``, ``learner`` (where the learner runs), the chosen algorithm's
block (``distrl`` or ``grpo``), ``ray``, ``run`` and ``eval`` drive the run (docs/training.md).
Every problem raises :class:`~evolve_envs.ConfigError` naming its key.

>>> cfg = load_train_config({"workers": {"num_workers": 3}}, overrides=["distrl.lr=1e-3"])
>>> cfg.workers.num_workers, cfg.distrl.lr, type(cfg.reward_model).__name__
(3, 0.001, 'ProgressModelConfig')
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.stack.config import (
    ProgressModelConfig,
    RecordConfig,
    RewardModelBlock,
    StackConfig,
)
from evolve_envs.stack.loading import (
    format_validation_error,
    load_config,
    merge,
    parse_override,
    read_yaml,
    resolve_config,
    shipped_key,
)
from evolve_envs.training.distrl.config import DistRLConfig
from evolve_envs.training.grpo.config import GRPOConfig

#: The blocks of a training config that are the env stack's (:class:`StackConfig`).
STACK_BLOCKS = ("env", "reward_model", "record")

__all__ = [
    "EvalConfig",
    "PolicyConfig",
    "RayConfig",
    "RunConfig",
    "TrainConfig",
    "WorkersConfig",
    "ALGORITHM_BLOCKS",
    "LearnerConfig",
    "load_train_config",
    "moved_keys",
    "read_stored",
    "parse_override",
    "resolve_train_config",
    "unread_keys",
]

_FROZEN = ConfigDict(extra="forbid", validate_default=True, frozen=True)

#: Each algorithm's own block: ``algo: distrl`` reads ``distrl:``, ``algo: grpo`` reads ``grpo:``.
ALGORITHM_BLOCKS: dict[str, str] = {"distrl": "distrl", "grpo": "grpo"}


class WorkersConfig(BaseModel):
    """Rollout workers: ``num_workers`` Ray actors stepping ``num_envs`` envs each."""

    model_config = _FROZEN

    num_workers: int = Field(default=2, ge=1)
    num_envs: int = Field(default=1, ge=1)
    segment_length: int | None = Field(
        default=None, ge=1, description="push fixed-length segments; None = whole episodes"
    )
    env_overrides: list[dict[str, object]] = Field(
        default_factory=list,
        description="per-worker `env` keys layered on the shared env block (worker i takes "
        "entry i): heterogeneous workers (other tasks, slower simulators)",
    )
    step_delay_s: list[float] = Field(
        default_factory=list,
        description="per-worker seconds of sleep after every env step (worker i takes entry i; "
        "one entry per worker): workers of mixed speed, e.g. [0.02, 0.02, 0.06]; [] adds none",
    )
    max_restarts: int = Field(default=-1, ge=-1, description="Ray actor restarts (-1: forever)")
    num_cpus: float = Field(default=0.5, gt=0, description="Ray CPUs reserved per worker")
    num_gpus: float = Field(
        default=0.0,
        ge=0,
        description="Ray GPUs per worker (fractional shares one GPU); "
        "workers run the policy on CUDA when Ray gives them a GPU",
    )
    poll_every: int = Field(default=8, ge=1, description="steps between weight-version polls")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources per worker, e.g. {sim: 1}: workers run only on "
        "nodes started with them (`ray start --resources '{\"sim\": 4}'`)",
    )
    scheduling: Literal["default", "spread"] = Field(
        default="default",
        description="'spread': Ray's SPREAD strategy places the workers across nodes; "
        "'default': Ray packs them where resources are free",
    )

    @field_validator("step_delay_s")
    @classmethod
    def _one_delay_per_worker(cls, value: list[float], info: ValidationInfo) -> list[float]:
        n = info.data.get("num_workers")
        if value and n is not None and len(value) != n:
            raise ValueError(
                f"{len(value)} entries for {n} workers: give one per worker (or [] for none)"
            )
        bad = [x for x in value if not 0 <= x < float("inf")]
        if bad:
            raise ValueError(f"delays must be finite seconds >= 0, not {bad[0]}")
        return value


class LearnerConfig(BaseModel):
    """Where the learner runs and what it holds, for every algorithm (its learning rule is the
    algorithm's block: ``distrl:`` or ``grpo:``)."""

    model_config = _FROZEN

    num_gpus: float = Field(
        default=0.0,
        ge=0,
        description="GPUs for the learner: > 0 puts the policy "
        "and optimizer on CUDA when one is visible",
    )
    placement: Literal["driver", "cluster"] = Field(
        default="driver",
        description="'driver': the learner runs in the process that started the run; "
        "'cluster': it runs as a Ray task placed by num_cpus, num_gpus and resources",
    )
    num_cpus: float = Field(
        default=1.0, ge=0, description="Ray CPUs the learner holds (placement: cluster)"
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources the learner asks for (placement: cluster), "
        "e.g. {learner: 1}",
    )
    queue_size: int = Field(default=64, ge=1, description="trajectory queue bound")


class PolicyConfig(BaseModel):
    """The CPU-sized CNN Gaussian policy
    (``evolve_envs.training.policies.base.CNNGaussianPolicy``)."""

    model_config = _FROZEN

    image_key: str | None = "image"
    state_key: str = "state"
    image_size: int = Field(default=32, ge=8)
    hidden: int = Field(default=128, ge=8)
    init_log_std: float = -0.5
    keypoints: int = Field(
        default=0, ge=0, description="spatial-softmax keypoints (0: the flattening CNN)"
    )
    state_norm: bool = Field(
        default=False, description="standardise the state (mean and scale set from data)"
    )
    target: str | None = Field(
        default=None,
        description="another Policy subclass, 'package.module:ClassName' (None: the CNN)",
    )
    kwargs: dict[str, object] = Field(
        default_factory=dict, description="extra arguments for the policy class"
    )
    init_from: str | None = Field(
        default=None,
        description="a policy file (.safetensors, e.g. from `evolve-envs clone`) whose weights "
        "a new run starts from (a resumed run keeps its own)",
    )


class RayConfig(BaseModel):
    """``ray.init`` settings for a local cluster (ignored with ``--address``)."""

    model_config = _FROZEN

    num_cpus: int | None = Field(default=2, ge=1)
    object_store_mb: int = Field(default=150, ge=75)
    include_dashboard: bool = False


class RunConfig(BaseModel):
    """Budget, logging and checkpoints."""

    model_config = _FROZEN

    minutes: float = Field(default=15.0, gt=0)
    max_updates: int | None = Field(default=None, ge=1)
    max_env_steps: int | None = Field(
        default=None, ge=1, description="env steps the learner takes in before the run ends"
    )
    seed: int = 0
    log_every_s: float = Field(default=10.0, gt=0)
    checkpoint_every_s: float = Field(default=60.0, gt=0)
    checkpoint_every_updates: int | None = Field(default=None, ge=1)
    snapshot_every_s: float | None = Field(
        default=None, gt=0, description="policy weights to snapshots/ this often (None: off)"
    )
    tensorboard: bool = True
    wandb_project: str | None = Field(
        default=None,
        description="also log to this Weights & Biases project (scalars and evaluation videos; "
        "the `wandb` extra; --wandb PROJECT)",
    )
    head_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds the Ray head (GCS) may be unreachable before the driver exits "
        "with a one-line error; the last checkpoint resumes on a new cluster",
    )


class EvalConfig(BaseModel):
    """Held-out evaluation during training (``evolve_envs.training.periodic_eval``): the current
    policy on ``episodes`` fixed scenes training never sees, success from the env's flag.

    >>> EvalConfig().enabled, EvalConfig(every_s=60).enabled
    (False, True)
    """

    model_config = _FROZEN

    every_s: float | None = Field(
        default=None, gt=0, description="evaluate every this many seconds (None: off)"
    )
    every_updates: int | None = Field(
        default=None, ge=1, description="evaluate every this many updates (None: off)"
    )
    episodes: int = Field(default=10, ge=1, description="held-out scenes per evaluation")
    num_envs: int = Field(default=5, ge=1, description="envs the evaluation plays at once")
    sampled: bool = Field(
        default=True, description="also play the scenes with sampled actions, not only the mean"
    )
    video_episodes: int = Field(
        default=1, ge=0, description="episodes of each evaluation in its video (0: none)"
    )
    video_key: str | None = Field(
        default=None, description="observation key of the video frames (None: policy.image_key)"
    )
    seed_offset: int = Field(
        default=0, ge=0, description="held-out scenes are reset seeds 2**31 + seed_offset + k"
    )
    env_overrides: dict[str, object] = Field(
        default_factory=dict,
        description="env keys the held-out envs play with instead of the training env's (e.g. "
        "a LIBERO held-out split: {init_state: by_seed, init_state_ids: [30, ..., 49]})",
    )

    @property
    def enabled(self) -> bool:
        return self.every_s is not None or self.every_updates is not None


class TrainConfig(BaseModel):
    """A whole training config, resolved once and frozen (see the module docstring): the stack
    blocks, typed and checked (``reward_model`` is the
    :data:`~evolve_envs.stack.config.RewardModelBlock` of its kind), and the training blocks,
    with the block of the chosen algorithm only (``distrl`` or ``grpo``, the other ``None``).

    >>> TrainConfig(algo="grpo").grpo.lr, TrainConfig(algo="grpo").distrl is None
    (0.0003, True)
    """

    model_config = _FROZEN

    algo: str = Field(
        default="distrl",
        description="'distrl', 'grpo', or 'package.module:ClassName' of another Algorithm",
    )
    env: dict[str, object] = Field(default_factory=dict)
    reward_model: RewardModelBlock = Field(default_factory=ProgressModelConfig)
    record: RecordConfig | None = None
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    distrl: DistRLConfig | None = Field(
        default=None, description="DistRL's block: set under algo distrl, None under grpo"
    )
    grpo: GRPOConfig | None = Field(
        default=None, description="GRPO's block: set under algo grpo, None under distrl"
    )
    ray: RayConfig = Field(default_factory=RayConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)

    @model_validator(mode="before")
    @classmethod
    def _own_block(cls, data: object) -> object:
        # the chosen algorithm's block and only it (a file may carry both, for the --algo
        # switch); another algorithm (an import path) keeps both, and reads what it reads
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        own = ALGORITHM_BLOCKS.get(str(data.get("algo", "distrl")))
        for block in ALGORITHM_BLOCKS.values():
            if own is not None and block != own:
                data[block] = None
            elif data.get(block) is None:
                data[block] = {}
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if ":" not in self.algo and self.algo not in ALGORITHM_BLOCKS:
            raise ValueError(
                f"algo: unknown algorithm {self.algo!r} ('distrl', 'grpo' or "
                "'package.module:ClassName')"
            )
        if self.record is not None and getattr(self.reward_model, "calls", None) == "deferred":
            raise ValueError(
                "record: a recording takes each step's reward as the step returns it; with "
                "reward_model.calls: deferred the model's part comes later (record with calls: "
                "sync or async)"
            )
        if len(self.workers.env_overrides) > self.workers.num_workers:
            raise ValueError(
                f"workers.env_overrides has {len(self.workers.env_overrides)} entries for "
                f"{self.workers.num_workers} workers"
            )
        return self

    def stored(self) -> dict[str, object]:
        """The config as a run stores it (``config.yaml``, checkpoints): the stack blocks as
        given, never the bearer token (a resumed run reads it again from its config or the
        environment).

        >>> TrainConfig(reward_model={"enable": True, "token": "s3cret"}).stored()["reward_model"]
        {'enable': True}
        """
        out = self.model_dump()
        out["reward_model"] = self.reward_model.model_dump(exclude_unset=True, exclude={"token"})
        if self.record is not None:
            out["record"] = self.record.model_dump(exclude_unset=True)
        return out

    def stack(self, worker_index: int | None = None) -> StackConfig:
        """The stack config that :func:`~evolve_envs.stack.factory.make_env` takes, with worker
        ``worker_index``'s ``env_overrides`` layered on; the blocks are this config's own
        (checked already, not validated again)."""
        env = dict(self.env)
        if worker_index is not None and worker_index < len(self.workers.env_overrides):
            env = merge(env, self.workers.env_overrides[worker_index])
        return StackConfig(env=env, reward_model=self.reward_model, record=self.record)


def resolve_train_config(source: str | os.PathLike[str]) -> Path | Traversable:
    """A ``--config`` argument as a file: a path, a shipped training config
    (``distrl/reach_place``), else a shipped stack config.

    >>> resolve_train_config("libero_smoke").name
    'libero_smoke.yaml'
    """
    if Path(source).is_file():
        return Path(source)
    stem = shipped_key(os.fspath(source)).removeprefix("distrl/")
    shipped = importlib.resources.files("evolve_envs.configs").joinpath("distrl")
    item = shipped.joinpath(f"{stem}.yaml")
    if item.is_file():
        return item
    try:
        return resolve_config(source)
    except ConfigError as exc:
        names = sorted(p.name.removesuffix(".yaml") for p in shipped.iterdir() if p.is_file())
        raise ConfigError(f"{exc}; training configs: {', '.join(names)}") from None


#: What :func:`load_train_config` layers: a YAML path or shipped name, a mapping, a config.
TrainSource = str | os.PathLike[str] | Mapping[str, object] | BaseModel | None


def _layer(source: TrainSource) -> Mapping[str, object]:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, TrainConfig):  # its blocks as given, the token kept
        out = source.stored()
        if source.reward_model.token is not None:
            out["reward_model"] = {**out["reward_model"], "token": source.reward_model.token}
        return out
    if isinstance(source, BaseModel):
        return source.model_dump()
    return read_yaml(resolve_train_config(source))


#: Each algorithm block's settings, by block name.
_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "distrl": frozenset(DistRLConfig.model_fields),
    "grpo": frozenset(GRPOConfig.model_fields),
}


def _suggest(algo: str, block: str, key: str) -> str:
    """Where ``block.key`` belongs under ``algo``: the chosen algorithm's own key of that name,
    else the algorithm that reads it."""
    own = ALGORITHM_BLOCKS.get(algo)
    if own is not None and key in _BLOCK_KEYS[own]:
        return f"set {own}.{key}"
    return f"read under algo: {block}"


def moved_keys(algo: str, data: Mapping[str, object]) -> list[str]:
    """DistRL's settings given under ``learner:``, where they were before ``distrl:`` was a
    block of its own (``learner:`` now says where the learner runs), each with its new key.

    >>> moved_keys("distrl", {"learner": {"lr": 1e-3, "num_gpus": 1}})
    ['learner.lr: DistRL settings are under distrl: (set distrl.lr)']
    """
    block = data.get("learner")
    if not isinstance(block, Mapping):
        return []
    keys = [k for k in block if k in _BLOCK_KEYS["distrl"] and k not in LearnerConfig.model_fields]
    own = "grpo" if ALGORITHM_BLOCKS.get(algo) == "grpo" else "distrl"
    return [
        f"learner.{k}: DistRL settings are under distrl: "
        f"(set {own if k in _BLOCK_KEYS[own] else 'distrl'}.{k})"
        for k in keys
    ]


def unread_keys(algo: str, settings: Mapping[str, object]) -> list[str]:
    """The keys ``settings`` sets in a block the chosen algorithm does not read (a file may carry
    both blocks for the ``--algo`` switch; a key set on top of it is meant to be read).

    >>> unread_keys("grpo", {"distrl": {"lr": 1e-3}, "grpo": {"lr": 1e-3}})
    ['distrl.lr: not read under algo: grpo (set grpo.lr)']
    """
    own = ALGORITHM_BLOCKS.get(algo)
    if own is None:  # another algorithm (an import path) reads what it reads
        return []
    out = []
    for block in ALGORITHM_BLOCKS.values():
        given = settings.get(block)
        if block != own and isinstance(given, Mapping):
            out += [
                f"{block}.{k}: not read under algo: {algo} ({_suggest(algo, block, k)})"
                for k in given
            ]
    return out


def read_stored(config: Mapping[str, object] | str | os.PathLike[str]) -> dict[str, object]:
    """A config a run stored (its ``config.yaml``, a checkpoint's, a policy file's) in today's
    layout: one stored before ``distrl:`` was a block of its own keeps DistRL's settings under
    ``learner:`` and a copy of the other algorithm's block: the settings are moved to
    ``distrl:`` and the unread copy dropped (the file is this package's own record, not a
    setting someone typed: those are refused, :func:`moved_keys`).

    >>> read_stored({"algo": "distrl", "learner": {"lr": 1e-3, "num_gpus": 0.0}, "grpo": {}})
    {'algo': 'distrl', 'learner': {'num_gpus': 0.0}, 'grpo': None, 'distrl': {'lr': 0.001}}
    """
    data = dict(config) if isinstance(config, Mapping) else read_yaml(Path(config))
    learner = data.get("learner")
    if not isinstance(learner, Mapping) or "distrl" in data:
        return data
    data["distrl"] = {k: v for k, v in learner.items() if k not in LearnerConfig.model_fields}
    data["learner"] = {k: v for k, v in learner.items() if k in LearnerConfig.model_fields}
    own = ALGORITHM_BLOCKS.get(str(data.get("algo", "distrl")))
    for block in ALGORITHM_BLOCKS.values():  # the other algorithm's copy of its defaults
        if own is not None and block != own:
            data[block] = None
    return data


def load_train_config(
    *sources: TrainSource, overrides: Sequence[str] | Mapping[str, object] | None = None
) -> TrainConfig:
    """Layer sources (paths, shipped names, mappings, configs), then ``overrides``, and
    validate: the stack blocks once, as :func:`~evolve_envs.stack.loading.load_config` does
    (environment variables included), with the training blocks, into one frozen config that
    holds the chosen algorithm's block only. A DistRL key under ``learner:``
    (:func:`moved_keys`), or a key set on top of the config (by a later mapping or an override)
    in a block the chosen algorithm does not read (:func:`unread_keys`: ``distrl.lr`` under
    ``algo: grpo``), is a ConfigError.
    A stored config goes through :func:`read_stored` first.
    """
    data: dict[str, object] = {}
    # what is set on top of the config: a later mapping, an override (the config itself, a
    # file or the first source, may carry both algorithms' blocks, for the --algo switch)
    settings: dict[str, object] = {}
    for i, source in enumerate(sources):
        layer = _layer(source)
        data = merge(data, layer)
        if i > 0 and isinstance(source, Mapping):
            settings = merge(settings, layer)
    if isinstance(overrides, Mapping):
        data = merge(data, overrides)
        settings = merge(settings, overrides)
    else:
        for text in overrides or ():
            data = merge(data, parse_override(text))
            settings = merge(settings, parse_override(text))
    algo = str(data.get("algo", "distrl"))
    misplaced = moved_keys(algo, data) + unread_keys(algo, settings)
    if misplaced:
        raise ConfigError("; ".join(misplaced))
    blocks = {k: data.pop(k) for k in STACK_BLOCKS if k in data}
    problems: list[str] = []
    try:
        stack = load_config(blocks)
        data.update(env=stack.env, reward_model=stack.reward_model, record=stack.record)
    except ConfigError as exc:
        problems.append(str(exc))
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        problems.insert(0, format_validation_error(exc, TrainConfig))
    if problems:
        raise ConfigError("\n".join(problems)) from None
    return cfg
