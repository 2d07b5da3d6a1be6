"""The stack config's schema: the ``env``, ``reward_model`` (three kinds) and ``record`` blocks.

``reward_model`` is one of three strict models chosen by its ``kind`` (a pydantic discriminated
union, :data:`RewardModelBlock`); reading and layering the YAML files is
:mod:`evolve_envs.stack.loading` (docs/PROGRESS.md and docs/PRESETS.md list the keys).

>>> cfg = StackConfig.model_validate({"env": {"suite": "libero_10"},
...                                   "reward_model": {"start_step": 8}})
>>> cfg.reward_model.kind, cfg.reward_model.start_step
('progress', 8)
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.progress.tracker_config import (
    STRICT,
    DoneRuleConfig,
    ProgressKeys,
    RewardMode,
    RewardShaping,
    TrackerConfig,
)

__all__ = [
    "AlarmConfig",
    "DoneRuleConfig",
    "HorizonStageConfig",
    "ProgressiveScheduleConfig",
    "RewardModelConfig",
    "ProgressModelConfig",
    "EpisodeScoreConfig",
    "VideoScoreConfig",
    "PickleScorerConfig",
    "RecordConfig",
    "RewardModelBlock",
    "REWARD_KINDS",
    "StackConfig",
    "kind_of",
]

EMBEDDED = "embedded"


_STRICT = STRICT


class HorizonStageConfig(BaseModel):
    """One progressive-horizon stage: ``max_steps`` or ``fraction`` of the suite's, from
    ``after_episodes`` episodes or ``min_success_rate`` on.
    """

    model_config = _STRICT

    max_steps: int | None = Field(default=None, ge=1)
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    after_episodes: int = Field(default=0, ge=0)
    min_success_rate: float = Field(default=0.0, ge=0.0, le=1.0)

    def resolve(self, full_max_steps: int | None) -> dict[str, object]:
        """The stage as ``ProgressiveHorizon`` takes it.

        >>> HorizonStageConfig(fraction=0.5, after_episodes=100).resolve(full_max_steps=520)
        {'max_steps': 260, 'after_episodes': 100, 'min_success_rate': 0.0}
        """
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
    """Schedule of ``evolve_envs.wrappers.progressive_horizon.ProgressiveHorizon`` (data)."""

    model_config = _STRICT

    by: Literal["episodes", "success_rate"] = "episodes"
    window: int = Field(default=20, ge=1)
    stages: list[HorizonStageConfig] = Field(default_factory=_default_stages, min_length=1)


class AlarmConfig(BaseModel):
    """``reward_model.alarm``: the online reward-hacking alarm (``wrappers.hacking_alarm``)."""

    model_config = _STRICT

    enable: bool = False
    window: int = Field(default=20, ge=2)
    baseline: int = Field(default=20, ge=2)
    score: Literal["final", "max"] = "final"
    min_progress_rise: float = Field(default=0.15, gt=0.0, le=1.0)
    max_success_rise: float = Field(default=0.05, ge=0.0, le=1.0)
    high_progress: float = Field(default=0.9, gt=0.0, le=1.0)
    min_high_failure_rise: float = Field(default=0.2, gt=0.0, le=1.0)

    def detector_settings(self) -> dict[str, object]:
        """The keyword arguments of ``evolve_envs.progress.hacking.HackingDetectorConfig``."""
        return self.model_dump(exclude={"enable"})


class RewardModelConfig(BaseModel):
    """The ``reward_model:`` keys every ``kind`` shares (service, transport, camera, horizon).

    Calling this class (or its ``model_validate``) builds the model ``kind`` names.

    >>> type(RewardModelConfig(start_step=8)).__name__
    'ProgressModelConfig'
    """

    model_config = _STRICT

    def __new__(cls, *args: object, **values: object) -> RewardModelConfig:
        if cls is RewardModelConfig:  # dispatch on kind (unknown kinds fail in validation)
            cls = REWARD_KINDS.get(values.get("kind", "progress"), ProgressModelConfig)
        return super().__new__(cls)

    @classmethod
    def model_validate(cls, obj: object, **kwargs: object) -> RewardModelConfig:  # type: ignore[override]
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
    max_in_flight: int = Field(default=64, ge=1)
    token: SecretStr | None = None
    token_file: str | None = None
    require_service: bool = True
    fail_on_request_error: bool = False
    health_route: str = "/health"
    embedded_backend: str = "mock"
    embedded_backend_kwargs: dict[str, object] = Field(default_factory=lambda: {"rule": "change"})

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
    # (evolve_envs.wrappers.model_success_bonus); success_progress None: the block's done_threshold
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
        for v in items:  # a misspelt 'embedded' is not a host name
            if "://" not in v and v != EMBEDDED and difflib.get_close_matches(v, [EMBEDDED]):
                raise ValueError(
                    f"unknown endpoint {v!r} (did you mean 'embedded'?); expected 'embedded' "
                    "(a service started here) or a URL such as http://127.0.0.1:8111"
                )
        return value

    @field_validator("embedded_backend_kwargs")
    @classmethod
    def _check_mock_rule(cls, value: dict[str, object], info: ValidationInfo) -> dict[str, object]:
        rule = value.get("rule")
        if info.data.get("embedded_backend") == "mock" and rule is not None:
            from evolve_envs.reward.service.backends.mock import check_rule

            check_rule(rule)
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
        """The bearer token in clear: ``token``, ``token_file``, ``$EVOLVE_REWARD_TOKEN`` or
        ``$EVOLVE_REWARD_TOKEN_FILE`` (the first set; ``None``: none); an unusable source raises
        :class:`ConfigError`.
        """
        from evolve_envs.reward.protocol.token import TokenError, resolve_token

        value = self.token.get_secret_value() if self.token is not None else None
        try:
            return resolve_token(
                value, self.token_file, names=("reward_model.token", "reward_model.token_file")
            )
        except TokenError as exc:
            raise ConfigError(str(exc)) from None


class ProgressModelConfig(RewardModelConfig, ProgressKeys):
    """``kind: progress``: the shared keys, the tracker's keys and ``dense_reward``.

    Reward mode: ``dense_reward`` → dense; else ``binary_reward`` → binary; else sparse.
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

    def tracker_config(self) -> TrackerConfig:
        """The :class:`~evolve_envs.progress.tracker_config.TrackerConfig` this block describes."""
        keys = self.model_dump(include=set(ProgressKeys.model_fields))
        return TrackerConfig(**keys, reward_mode=self.reward_mode)


class EpisodeScoreConfig(RewardModelConfig, RewardShaping):
    """The keys both episode-score kinds share: the frame cache and how the score is paid."""

    last_frames: int = Field(default=1, ge=1)
    cache_encoding: Literal["jpeg", "raw"] = "jpeg"
    cache_max_frames: int = Field(default=1024, ge=3)
    pickle_route: str = "/"


class VideoScoreConfig(EpisodeScoreConfig):
    """``kind: video_score``: a VLM scores the episode's video at its end."""

    kind: Literal["video_score"] = "video_score"
    nframes: int = Field(default=16, ge=1, le=128)
    max_pixels: int = Field(default=200704, ge=1)
    video_fps: float = Field(default=4.0, gt=0)
    backend: str | None = None
    backend_kwargs: dict[str, object] = Field(default_factory=dict)
    video_transport: Literal["inline", "path", "auto"] = "inline"
    shared_dir: str | None = None


class PickleScorerConfig(EpisodeScoreConfig):
    """``kind: pickle_scorer``: a pickle-protocol scorer rates the episode's last frame(s)."""

    kind: Literal["pickle_scorer"] = "pickle_scorer"


#: ``reward_model.kind`` -> the model of that kind.
REWARD_KINDS: dict[str, type[RewardModelConfig]] = {
    "progress": ProgressModelConfig,
    "video_score": VideoScoreConfig,
    "pickle_scorer": PickleScorerConfig,
}


def kind_of(block: object) -> str:
    """The ``kind`` a ``reward_model`` block (mapping or model) names; ``progress`` if none."""
    if isinstance(block, Mapping):
        return str(block.get("kind", "progress"))
    return str(getattr(block, "kind", "progress"))


RewardModelBlock = Annotated[
    Annotated[ProgressModelConfig, Tag("progress")]
    | Annotated[VideoScoreConfig, Tag("video_score")]
    | Annotated[PickleScorerConfig, Tag("pickle_scorer")],
    Discriminator(kind_of),
]


class RecordConfig(BaseModel):
    """``record``: write every episode to ``dir`` (docs/RECORDING.md)."""

    model_config = _STRICT

    dir: str
    camera: str | None = None  # default: reward_model.camera
    cameras: list[str] | None = None  # cameras kept besides it; default: every camera
    jpeg_quality: int = Field(default=90, ge=1, le=100)
    reward_model: str | None = None  # stored with each episode; default: from reward_model


class StackConfig(BaseModel):
    """A whole stack config: ``env`` (base env keyword arguments), ``reward_model``, ``record``."""

    model_config = _STRICT

    env: dict[str, object] = Field(default_factory=dict)
    reward_model: RewardModelBlock = Field(default_factory=ProgressModelConfig)
    record: RecordConfig | None = None

    def handoff(self) -> dict[str, object]:
        """The config as JSON-typed data for another process or an env spec, the token kept as a
        ``SecretStr`` (masked when printed or dumped).

        >>> hop = StackConfig.model_validate({"reward_model": {"token": "s3cret"}}).handoff()
        >>> hop["reward_model"]["token"], hop["reward_model"]["token"].get_secret_value()
        (SecretStr('**********'), 's3cret')
        """
        out = self.model_dump(mode="json")
        out["reward_model"]["token"] = self.reward_model.token
        return out
