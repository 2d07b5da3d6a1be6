"""Configuration of the wrapper stack: the ``reward_model`` schema, YAML loading, env overrides.

A stack config is a mapping (usually a YAML file under ``configs/``) with two blocks:

.. code-block:: yaml

    env:                      # keyword arguments of the base env (LiberoEnv) + max_episode_steps
      suite: libero_10
      task_id: 0
    reward_model:             # RewardModelConfig, below
      enable: true
      endpoint: embedded

Sources are layered left to right (a suite YAML, then presets such as
``evolve_envs/configs/presets/long_horizon.yaml``): mappings merge key by key, everything else
replaces. Then the environment variables (docs/PROTOCOLS.md) override the files, and explicit
overrides (the ``reward_model=`` / ``env`` keywords of :func:`evolve_envs.stack.factory.make_env`)
override everything.

=========================  =====================================================
environment variable       key
=========================  =====================================================
``VLAC_SERVICE_URL``       ``reward_model.endpoint`` (first of N consecutive ports)
``VLAC_SERVICE_NUM``       ``reward_model.service_num`` (N)
``VLAC_DONE_THRESHOLD``    ``reward_model.done_threshold``
``VLAC_OFFSET_CALL``       ``reward_model.call_every``
``VLAC_START_STEP_CALL``   ``reward_model.start_step``
``USE_DENSE_REWARD``       ``reward_model.dense_reward`` (1/0, true/false, yes/no, on/off)
``USE_PROGRESSIVE_MAX_STEP`` ``reward_model.progressive_max_step``
``EVOLVE_REWARD_TOKEN``    ``reward_model.token`` (the service's bearer token)
=========================  =====================================================

``reward_model`` is one of three models chosen by its ``kind`` (a pydantic discriminated union):
:class:`ProgressModelConfig` (``progress``, the default), :class:`VideoScoreConfig` and
:class:`PickleScorerConfig`. They share :class:`RewardModelConfig`'s keys (endpoint, timeouts,
token, embedded service, camera, JPEG quality, weights, horizon); the progress keys themselves
are declared once, in :class:`evolve_envs.progress.settings.ProgressKeys`, which the tracker reads.

Validation is strict: unknown keys and wrong types raise :class:`ConfigError` whose message starts
with the key's path, e.g. ``reward_model.call_every: expected int, got 'abc'``; a key of another
kind says so. Layering is ``OmegaConf.merge``.

>>> cfg = load_config("libero_10", "fast_dev", overrides={"reward_model": {"start_step": 8}},
...                   environ={})
>>> cfg.reward_model.kind, cfg.reward_model.call_every, cfg.reward_model.start_step
('progress', 32, 8)
>>> cfg.env["suite"]
'libero_10'
>>> load_config({"reward_model": {"kind": "video_score", "mode": "pairwise"}}, environ={})
Traceback (most recent call last):
...
evolve_envs.progress.settings.ConfigError: reward_model.mode: `mode` is a progress key;
reward_model.kind is \
video_score
>>> load_config({"reward_model": {"call_evry": 8}}, environ={})
Traceback (most recent call last):
...
evolve_envs.progress.settings.ConfigError: reward_model.call_evry: unknown key (did you mean
'call_every'?)
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
from collections.abc import Mapping, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from omegaconf import DictConfig, OmegaConf
from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from evolve_envs.progress.settings import (
    STRICT,
    ConfigError,
    DoneRuleConfig,
    ProgressKeys,
    RewardMode,
    RewardShaping,
    TrackerSettings,
)

__all__ = [
    "AlarmConfig",
    "ConfigError",
    "DoneRuleConfig",
    "HorizonStageConfig",
    "ProgressiveScheduleConfig",
    "RewardModelConfig",
    "ProgressModelConfig",
    "EpisodeScoreConfig",
    "VideoScoreConfig",
    "PickleScorerConfig",
    "RewardModelBlock",
    "StackConfig",
    "ENV_OVERRIDES",
    "load_config",
    "read_yaml",
    "reward_model_source",
    "merge",
    "env_overrides",
    "parse_override",
    "CONFIG_DIR",
    "env_key_error",
    "resolve_config",
    "shipped_configs",
]

#: The ``configs/`` directory of a source checkout (YAMLs may also live anywhere else).
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

EMBEDDED = "embedded"


_STRICT = STRICT


class HorizonStageConfig(BaseModel):
    """One progressive-horizon stage: ``max_steps`` (or ``fraction`` of the suite's max steps),
    entered after ``after_episodes`` episodes or at ``min_success_rate``.

    >>> HorizonStageConfig(fraction=0.5, after_episodes=100).resolve(full_max_steps=520)
    {'max_steps': 260, 'after_episodes': 100, 'min_success_rate': 0.0}
    """

    model_config = _STRICT

    max_steps: int | None = Field(default=None, ge=1)
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    after_episodes: int = Field(default=0, ge=0)
    min_success_rate: float = Field(default=0.0, ge=0.0, le=1.0)

    def resolve(self, full_max_steps: int | None) -> dict[str, Any]:
        """The stage as :class:`evolve_envs.wrappers.progressive_horizon.ProgressiveHorizon` takes
        it."""
        if (self.max_steps is None) == (self.fraction is None):
            raise ConfigError(
                "progressive_schedule.stages: give exactly one of max_steps, fraction"
            )
        if self.max_steps is not None:
            steps = self.max_steps
        else:
            if full_max_steps is None:
                raise ConfigError(
                    "progressive_schedule.stages.fraction needs the env's max_episode_steps"
                )
            steps = max(1, round(self.fraction * full_max_steps))
        return {
            "max_steps": steps,
            "after_episodes": self.after_episodes,
            "min_success_rate": self.min_success_rate,
        }


def _default_stages() -> list[HorizonStageConfig]:
    return [
        HorizonStageConfig(fraction=0.5),
        HorizonStageConfig(fraction=0.75, after_episodes=100),
        HorizonStageConfig(fraction=1.0, after_episodes=200),
    ]


class ProgressiveScheduleConfig(BaseModel):
    """Schedule of :class:`evolve_envs.wrappers.progressive_horizon.ProgressiveHorizon` (data, not
    code).

    >>> [stage.fraction for stage in ProgressiveScheduleConfig().stages]
    [0.5, 0.75, 1.0]
    >>> schedule = ProgressiveScheduleConfig(by="success_rate", stages=[{"max_steps": 100}])
    >>> schedule.stages[0].max_steps
    100
    """

    model_config = _STRICT

    by: Literal["episodes", "success_rate"] = "episodes"
    window: int = Field(default=20, ge=1)
    stages: list[HorizonStageConfig] = Field(default_factory=_default_stages, min_length=1)


class AlarmConfig(BaseModel):
    """``reward_model.alarm``: the online reward-hacking alarm
    (``evolve_envs.wrappers.hacking_alarm``).

    >>> settings = AlarmConfig(enable=True, window=10).detector_settings()
    >>> settings["window"], settings["score"], "enable" in settings
    (10, 'final', False)
    """

    model_config = _STRICT

    enable: bool = False
    window: int = Field(default=20, ge=2)
    baseline: int = Field(default=20, ge=2)
    score: Literal["final", "max"] = "final"
    min_progress_rise: float = Field(default=0.15, gt=0.0, le=1.0)
    max_success_rise: float = Field(default=0.05, ge=0.0, le=1.0)
    high_progress: float = Field(default=0.9, gt=0.0, le=1.0)
    min_high_failure_rise: float = Field(default=0.2, gt=0.0, le=1.0)

    def detector_settings(self) -> dict[str, Any]:
        """The keyword arguments of ``evolve_envs.progress.hacking.AlarmSettings``."""
        return self.model_dump(exclude={"enable"})


class RewardModelConfig(BaseModel):
    """The ``reward_model:`` block: the keys every kind shares (where the service is, how it is
    reached, which camera, the horizon). Keys follow RLinf / VLAC's tooling where they exist
    (docs/PROGRESS.md, docs/PRESETS.md).

    The block is one of three models chosen by ``kind`` (a discriminated union, default
    ``progress``): :class:`ProgressModelConfig`, :class:`VideoScoreConfig`,
    :class:`PickleScorerConfig`; each accepts only its own keys. Calling this class builds the
    one ``kind`` names. ``endpoint: embedded`` starts a local reward service (the
    ``embedded_backend``) owned by the env that uses it.

    >>> RewardModelConfig(kind="video_score", nframes=8).nframes
    8
    >>> type(RewardModelConfig(start_step=8)).__name__
    'ProgressModelConfig'
    >>> type(RewardModelConfig.model_validate({"kind": "pickle_scorer"})).__name__
    'PickleScorerConfig'
    """

    model_config = _STRICT

    def __new__(cls, *args: Any, **values: Any) -> RewardModelConfig:
        if cls is RewardModelConfig:  # dispatch on kind (unknown kinds fail in validation)
            cls = _KINDS.get(values.get("kind", "progress"), ProgressModelConfig)
        return super().__new__(cls)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> RewardModelConfig:  # type: ignore[override]
        """Validate a block; on this class, as the model its ``kind`` names."""
        if cls is RewardModelConfig:
            return TypeAdapter(RewardModelBlock).validate_python(obj, **kwargs)
        return super().model_validate(obj, **kwargs)

    # --- what and where
    enable: bool = False
    endpoint: str | list[str] = "http://127.0.0.1:8111"
    service_num: int | None = Field(default=None, ge=1)
    timeout: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    call_budget_s: float = Field(default=150.0, gt=0)
    token: SecretStr | None = None
    require_service: bool = True
    fail_on_request_error: bool = False
    health_route: str = "/health"
    embedded_backend: str = "mock"
    embedded_backend_kwargs: dict[str, Any] = Field(default_factory=lambda: {"rule": "change"})

    # --- frames
    camera: str = "agentview_image"
    jpeg_quality: int = Field(default=85, ge=1, le=100)

    # --- the online reward-hacking alarm (evolve_envs.wrappers.hacking_alarm), for every kind
    alarm: AlarmConfig = Field(default_factory=AlarmConfig)

    # --- rewards and episodes
    binary_reward: bool = True
    reward_weight: float = 1.0
    env_reward_weight: float = 0.0
    ignore_terminations: bool = False
    # a bonus on an episode's last step when the model's final progress says done
    # (evolve_envs.wrappers.success_bonus); success_progress None: the block's done_threshold
    success_bonus: float = Field(default=0.0, ge=0)
    success_progress: float | None = Field(default=None, ge=0, le=1)

    # --- horizon
    progressive_max_step: bool = False
    progressive_schedule: ProgressiveScheduleConfig = Field(
        default_factory=ProgressiveScheduleConfig
    )

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | list[str]) -> str | list[str]:
        items = [value] if isinstance(value, str) else value
        if not items or any(not isinstance(v, str) or not v.strip() for v in items):
            raise ValueError("expected a URL, a list of URLs, or 'embedded'")
        if EMBEDDED in items and len(items) > 1:
            raise ValueError("'embedded' cannot be combined with other endpoints")
        return value

    @field_validator("embedded_backend")
    @classmethod
    def _check_embedded_backend(cls, value: str) -> str:
        from evolve_envs.reward.service.backends import BACKENDS

        if value not in BACKENDS:
            close = difflib.get_close_matches(value, sorted(BACKENDS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown backend ({hint}known: {', '.join(sorted(BACKENDS))})")
        return value

    @property
    def embedded(self) -> bool:
        """The endpoint is ``embedded``: the factory starts a local service."""
        return self.endpoint == EMBEDDED or self.endpoint == [EMBEDDED]

    @property
    def success_bonus_threshold(self) -> float:
        """The final model progress (0..1) that earns ``success_bonus``."""
        if self.success_progress is not None:
            return self.success_progress
        return float(getattr(self, "done_threshold", 0.95))

    @property
    def token_value(self) -> str | None:
        """The bearer token in clear (``None`` when unset); the config itself never prints it."""
        return self.token.get_secret_value() if self.token is not None else None


class ProgressModelConfig(RewardModelConfig, ProgressKeys):
    """``kind: progress``: the shared keys, the tracker's keys
    (:class:`~evolve_envs.progress.settings.ProgressKeys`) and ``dense_reward``.

    Reward mode: ``dense_reward`` → dense; else ``binary_reward`` → binary; else sparse.

    >>> ProgressModelConfig(dense_reward=False).tracker_settings().reward_mode
    'binary'
    """

    kind: Literal["progress"] = "progress"
    dense_reward: bool = True
    #: cameras whose judgements are averaged (each asked separately); empty: ``camera`` alone
    average_cameras: list[str] = Field(default_factory=list)

    @property
    def reward_mode(self) -> RewardMode:
        if self.dense_reward:
            return "dense"
        return "binary" if self.binary_reward else "sparse"

    def tracker_settings(self) -> TrackerSettings:
        """The :class:`~evolve_envs.progress.settings.TrackerSettings` this block describes: its
        :class:`~evolve_envs.progress.settings.ProgressKeys` and the derived ``reward_mode``."""
        keys = self.model_dump(include=set(ProgressKeys.model_fields))
        return TrackerSettings(**keys, reward_mode=self.reward_mode)


class EpisodeScoreConfig(RewardModelConfig, RewardShaping):
    """The keys both episode-score kinds share: the frame cache and how the score is paid.

    >>> PickleScorerConfig(last_frames=3, cache_encoding="raw").cache_encoding
    'raw'
    >>> VideoScoreConfig().cache_max_frames
    1024
    """

    last_frames: int = Field(default=1, ge=1)
    cache_encoding: Literal["jpeg", "raw"] = "jpeg"
    cache_max_frames: int = Field(default=1024, ge=3)
    pickle_route: str = "/"


class VideoScoreConfig(EpisodeScoreConfig):
    """``kind: video_score``: a VLM scores the episode's video at its end.

    >>> VideoScoreConfig(video_transport="auto").nframes
    16
    """

    kind: Literal["video_score"] = "video_score"
    nframes: int = Field(default=16, ge=1, le=128)
    max_pixels: int = Field(default=200704, ge=1)
    video_fps: float = Field(default=4.0, gt=0)
    backend: str | None = None
    backend_kwargs: dict[str, Any] = Field(default_factory=dict)
    video_transport: Literal["inline", "path", "auto"] = "inline"
    shared_dir: str | None = None


class PickleScorerConfig(EpisodeScoreConfig):
    """``kind: pickle_scorer``: a pickle-protocol scorer rates the episode's last frame(s).

    >>> PickleScorerConfig(pickle_route="/pickle").last_frames
    1
    """

    kind: Literal["pickle_scorer"] = "pickle_scorer"


_KINDS: dict[str, type[RewardModelConfig]] = {
    "progress": ProgressModelConfig,
    "video_score": VideoScoreConfig,
    "pickle_scorer": PickleScorerConfig,
}


def _kind_of(block: Any) -> str:
    if isinstance(block, Mapping):
        return str(block.get("kind", "progress"))
    return str(getattr(block, "kind", "progress"))


RewardModelBlock = Annotated[
    Annotated[ProgressModelConfig, Tag("progress")]
    | Annotated[VideoScoreConfig, Tag("video_score")]
    | Annotated[PickleScorerConfig, Tag("pickle_scorer")],
    Discriminator(_kind_of),
]


class RecordConfig(BaseModel):
    """``record``: write every episode to ``dir``
    (:class:`evolve_envs.wrappers.record_episodes.RecordEpisodes`, format in ``docs/RECORDING.md``).

    >>> RecordConfig(dir="runs/recording").jpeg_quality
    90
    """

    model_config = _STRICT

    dir: str
    camera: str | None = None  # default: reward_model.camera
    jpeg_quality: int = Field(default=90, ge=1, le=100)
    reward_model: str | None = None  # stored with each episode; default: from reward_model


class StackConfig(BaseModel):
    """A whole stack config: ``env`` (base env keyword arguments), ``reward_model`` and an
    optional ``record`` block.

    >>> StackConfig.model_validate({"reward_model": {"kind": "pickle_scorer"}}).reward_model.kind
    'pickle_scorer'
    """

    model_config = _STRICT

    env: dict[str, Any] = Field(default_factory=dict)
    reward_model: RewardModelBlock = Field(default_factory=ProgressModelConfig)
    record: RecordConfig | None = None


# ---------------------------------------------------------------------------- loading

#: Environment variable -> (reward_model key, type).
ENV_OVERRIDES: dict[str, tuple[str, type]] = {
    "VLAC_SERVICE_URL": ("endpoint", str),
    "VLAC_SERVICE_NUM": ("service_num", int),
    "VLAC_DONE_THRESHOLD": ("done_threshold", float),
    "VLAC_OFFSET_CALL": ("call_every", int),
    "VLAC_START_STEP_CALL": ("start_step", int),
    "USE_DENSE_REWARD": ("dense_reward", bool),
    "USE_PROGRESSIVE_MAX_STEP": ("progressive_max_step", bool),
    "EVOLVE_REWARD_TOKEN": ("token", str),
}

_EXPECTED_ENV = {bool: "a boolean (1/0, true/false, yes/no, on/off)", int: "int", float: "float"}


def _parse_env_value(name: str, key: str, kind: type, text: str) -> Any:
    """The variable's text as ``kind`` (pydantic's lax parsing); errors name the variable."""
    raw = text.strip()
    if kind is str:
        return raw
    try:
        return TypeAdapter(kind).validate_python(raw)
    except ValidationError:
        where = f"{name}={text!r} (reward_model.{key})"
        raise ConfigError(f"{where}: expected {_EXPECTED_ENV[kind]}, got {text!r}") from None


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``reward_model`` keys set by the environment variables (see module docstring).

    >>> env_overrides({"VLAC_OFFSET_CALL": "8", "USE_DENSE_REWARD": "off", "HOME": "/root"})
    {'call_every': 8, 'dense_reward': False}
    """
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, (key, kind) in ENV_OVERRIDES.items():
        text = env.get(name)
        if text is None or text.strip() == "":
            continue
        out[key] = _parse_env_value(name, key, kind, text)
    return out


def shipped_configs() -> dict[str, Traversable]:
    """The configs shipped in the ``configs`` package: name -> file.

    Suite configs are named by their stem (``libero_10``), presets by theirs (``fast_dev``) and
    by ``presets/<stem>``. Only ``.yaml`` files directly in ``configs/`` and
    ``evolve_envs/configs/presets/`` are listed (``evolve_envs/configs/rlinf`` holds Hydra configs
    for RLinf, not stack configs).
    """
    try:
        root = importlib.resources.files("evolve_envs.configs")
    except ModuleNotFoundError:
        return {}
    out: dict[str, Traversable] = {}
    for sub in ("", "presets"):
        folder = root.joinpath(sub) if sub else root
        if not folder.is_dir():
            continue
        for item in sorted(folder.iterdir(), key=lambda t: t.name):
            if item.is_file() and item.name.endswith(".yaml"):
                stem = item.name.removesuffix(".yaml")
                if sub:
                    out[f"{sub}/{stem}"] = item
                out.setdefault(stem, item)
    return out


def resolve_config(source: str | os.PathLike[str]) -> Path | Traversable:
    """A config argument as a file: an existing path, else a shipped config by name.

    ``"libero_10"``, ``"libero_10.yaml"``, ``"configs/libero_10.yaml"``, ``"fast_dev"`` and
    ``"presets/fast_dev"`` all name shipped files when no such path exists here.

    Example:
        >>> resolve_config("fast_dev").name
        'fast_dev.yaml'
    """
    p = Path(source)
    if p.is_file():
        return p
    text = os.fspath(source)
    if not p.is_absolute():
        key = text.removeprefix("configs/").removesuffix(".yaml").removesuffix(".yml")
        found = shipped_configs().get(key)
        if found is not None:
            return found
    names = sorted(k for k in shipped_configs() if "/" not in k)
    close = difflib.get_close_matches(Path(text).stem, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = f"; shipped configs: {', '.join(names)}" if names else ""
    raise ConfigError(f"config file {text!r} not found{hint}{known}")


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML mapping from a path or a shipped config's name; errors name the file."""
    p = resolve_config(path)
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top, got {type(data).__name__}")
    return data


def _as_mapping(source: Any, what: str) -> dict[str, Any]:
    if source is None:
        return {}
    if isinstance(source, str | os.PathLike):
        return read_yaml(source)
    if isinstance(source, DictConfig):
        return dict(OmegaConf.to_container(source, resolve=True))  # type: ignore[arg-type]
    if isinstance(source, BaseModel):
        return source.model_dump()
    if isinstance(source, Mapping):
        return dict(source)
    raise ConfigError(f"{what}: expected a YAML path or a mapping, got {type(source).__name__}")


def reward_model_source(block: Any) -> dict[str, Any] | None:
    """A ``reward_model`` argument as a :func:`load_config` source (``None`` stays ``None``).

    ``block`` is a mapping, an OmegaConf node or a YAML path; a YAML file may hold the block
    itself or a whole config with a ``reward_model:`` key.

    >>> reward_model_source({"call_every": 8})
    {'reward_model': {'call_every': 8}}
    """
    if block is None:
        return None
    data = _as_mapping(block, "reward_model")
    if isinstance(block, str | os.PathLike) and "reward_model" in data:
        data = data["reward_model"]
    return {"reward_model": data}


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Layer mappings left to right (``OmegaConf.merge``): mappings merge key by key, other
    values (lists included) replace. Values are kept as given (no interpolation).

    >>> merge({"reward_model": {"call_every": 16, "mode": "pairwise"}},
    ...       {"reward_model": {"call_every": 8}})
    {'reward_model': {'call_every': 8, 'mode': 'pairwise'}}
    """
    flags = {"allow_objects": True}
    merged = OmegaConf.merge(*(OmegaConf.create(dict(layer), flags=flags) for layer in layers))
    return OmegaConf.to_container(merged, resolve=False)  # type: ignore[return-value]


_EXPECTED = {
    "int_type": "int",
    "int_parsing": "int",
    "int_from_float": "int",
    "float_type": "float",
    "float_parsing": "float",
    "bool_type": "bool",
    "bool_parsing": "bool",
    "string_type": "str",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
}


def _split_kind(loc: Sequence[Any]) -> tuple[tuple[Any, ...], str | None]:
    """``loc`` without the union tag pydantic puts after ``reward_model``, and that tag."""
    loc = tuple(loc)
    if len(loc) > 1 and loc[0] == "reward_model" and loc[1] in _KINDS:
        return (loc[0], *loc[2:]), str(loc[1])
    return loc, None


def _key_path(loc: Sequence[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "list[str]", "int", "float", "none", "done-by-name", "done-rule"):
            continue  # union branch labels, not keys
        else:
            path += ("." if path else "") + str(part)
    return path or "<config>"


def _valid_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part) if hasattr(current, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        candidates = [ann, *args]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)),
                       None)  # fmt: skip
    return sorted(current.model_fields) if current is not None else []


def _other_kind(key: str, kind: str) -> str | None:
    """The reward kind that has ``key`` when ``kind`` does not (``None``: no kind has it)."""
    return next((k for k, m in _KINDS.items() if k != kind and key in m.model_fields), None)


def format_validation_error(exc: ValidationError, model: type[BaseModel] = StackConfig) -> str:
    """One line per problem: ``<key path>: <what was expected>, got <value>``."""
    lines: list[str] = []
    seen: set[str] = set()
    for err in exc.errors():
        loc, kind_tag = _split_kind(err.get("loc", ()))
        path = _key_path(loc)
        kind = err.get("type", "")
        given = err.get("input")
        if path.endswith("token"):
            given = "<hidden>"  # never echo a secret, even a mistyped one
        if kind == "union_tag_invalid" and loc == ("reward_model",):
            tag = err["ctx"]["tag"]
            line = f"reward_model.kind: expected one of {', '.join(_KINDS)}, got {tag!r}"
        elif kind == "extra_forbidden":
            owner = _other_kind(str(loc[-1]), kind_tag) if kind_tag and len(loc) == 2 else None
            if owner is not None:
                line = f"{path}: `{loc[-1]}` is a {owner} key; reward_model.kind is {kind_tag}"
            else:
                within = _KINDS[kind_tag] if kind_tag else model
                valid = _valid_keys(within, loc[1:] if kind_tag else loc)
                close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                line = f"{path}: unknown key{hint}"
        elif kind in _EXPECTED:
            line = f"{path}: expected {_EXPECTED[kind]}, got {given!r}"
        else:
            msg = str(err.get("msg", "invalid value"))
            msg = msg.removeprefix("Value error, ")
            line = f"{path}: {msg[0].lower() + msg[1:] if msg else msg}, got {given!r}"
        if path in seen and kind in _EXPECTED:
            continue  # one line per key for union types
        seen.add(path)
        lines.append(line)
    return "\n".join(lines)


def load_config(
    *sources: Any,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> StackConfig:
    """Layer ``sources`` (YAML paths, mappings, OmegaConf configs), apply environment variables,
    then ``overrides``, and validate.

    Raises :class:`ConfigError` naming the key path of every problem.

    >>> load_config("libero_10", {"reward_model": {"mode": "trajectory"}}, environ={}
    ...             ).reward_model.tracker_settings().mode
    'trajectory'
    """
    layers = [_as_mapping(source, f"config source {i}") for i, source in enumerate(sources)]
    extra = _as_mapping(overrides, "overrides") if overrides else {}
    from_env = env_overrides(environ)
    if from_env:  # the variables set the keys of the block's kind (they are progress keys)
        block = merge(*layers, extra).get("reward_model")
        model = _KINDS.get(_kind_of(block if isinstance(block, Mapping) else {}))
        known = model.model_fields if model is not None else {}
        from_env = {k: v for k, v in from_env.items() if k in known}
    data = merge(*layers, {"reward_model": from_env} if from_env else {}, extra)
    try:
        return StackConfig.model_validate(data)
    except ValidationError as exc:
        message = format_validation_error(exc)
        set_by = _env_var_sources(environ, extra.get("reward_model") or {})
        raise ConfigError(_name_env_vars(message, set_by)) from None


def parse_override(text: str) -> dict[str, Any]:
    """``"learner.lr=1e-3"`` -> ``{"learner": {"lr": 0.001}}`` (the value is read as YAML).

    Example:
        >>> parse_override("workers.num_envs=4")
        {'workers': {'num_envs': 4}}
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{key}: invalid value {value!r}: {exc}") from None
    out: dict[str, Any] = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = parsed
    return out


def _env_var_sources(environ: Mapping[str, str] | None, overridden: Any) -> dict[str, str]:
    """``reward_model`` key -> ``NAME='value'`` of the environment variable that set it."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, (key, _kind) in ENV_OVERRIDES.items():
        text = env.get(name)
        if text is None or text.strip() == "":
            continue
        if isinstance(overridden, Mapping) and key in overridden:
            continue  # an explicit override replaced the variable's value
        out[key] = f"{name}={text!r}"
    return out


def _name_env_vars(message: str, set_by: Mapping[str, str]) -> str:
    """Append "(set by VAR='value')" to each error line about a key an env variable set."""
    lines = []
    for line in message.splitlines():
        for key, where in set_by.items():
            if line.startswith(f"reward_model.{key}:"):
                line = f"{line} (set by the environment variable {where})"
                break
        lines.append(line)
    return "\n".join(lines)


def env_key_error(exc: ValueError, env_kwargs: Mapping[str, Any]) -> ConfigError:
    """The base env's rejection of its ``env`` keyword arguments, as a :class:`ConfigError`
    whose message starts with the ``env.<key>`` path of the key it names.

    Example:
        >>> str(env_key_error(ValueError("num_settle_steps must be >= 0, got -1"),
        ...                   {"suite": "libero_10", "num_settle_steps": -1}))
        'env.num_settle_steps: num_settle_steps must be >= 0, got -1'
    """
    if isinstance(exc, ConfigError):
        return exc
    text = str(exc)
    key = next((k for k in env_kwargs if text.startswith(k)), None)
    if key is None:  # the key whose value the message quotes first, else whose name it names
        by_value = [(text.find(repr(v)), k) for k, v in env_kwargs.items() if repr(v) in text]
        by_name = [(text.find(k), k) for k in env_kwargs if k in text]
        key = min(by_value)[1] if by_value else (min(by_name)[1] if by_name else None)
    return ConfigError(f"env.{key}: {text}" if key else f"env: {text}")
