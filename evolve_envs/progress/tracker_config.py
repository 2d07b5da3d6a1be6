"""The wrappers' part of the ``reward_model`` schema: progress keys, reward shaping, done rules.

>>> s = TrackerConfig(start_step=8, call_every=4)
>>> s.start_step, s.mode, s.reward_mode
(8, 'pairwise', 'dense')
>>> TrackerConfig(call_every=0)
Traceback (most recent call last):
...
evolve_envs.progress.config_error.ConfigError: call_every: must be >= 1, got 0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from evolve_envs.progress.arithmetic import Comparison, NegativeRule
from evolve_envs.progress.config_error import ConfigError
from evolve_envs.progress.done_rules import DoneRule
from evolve_envs.reward.protocol.wire import Capabilities

__all__ = [
    "ProgressMode",
    "RewardMode",
    "CallMode",
    "LastCheck",
    "DoneBy",
    "DoneName",
    "DoneRuleConfig",
    "NegativeRule",
    "Comparison",
    "STRICT",
    "RewardShaping",
    "ProgressKeys",
    "TrackerConfig",
    "check_capabilities",
]

ProgressMode = Literal["pairwise", "incremental", "trajectory"]
RewardMode = Literal["dense", "sparse", "binary"]
CallMode = Literal["sync", "async", "deferred"]
LastCheck = Literal["grid", "before_limit"]
DoneName = Literal["threshold", "backend", "either", "both"]


#: Strict validation: unknown keys and wrong types are errors (no coercion of ``"8"`` to 8).
STRICT = ConfigDict(extra="forbid", strict=True, validate_default=True)


class RewardShaping(BaseModel):
    """How a score in [0, 1] becomes the model reward (every reward kind reads these keys)."""

    model_config = STRICT

    success_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    reward_coef: float = 1.0
    use_rel_reward: bool = False


class DoneRuleConfig(BaseModel):
    """A done rule given as a mapping under ``reward_model.done_by``
    (:mod:`evolve_envs.progress.done_rules`): ``{kind: k_of_n, k: 2, n: 3}``, ``{kind: backend}``,
    ``{kind: any, rules: [...]}``.

    >>> DoneRuleConfig(kind="k_of_n", k=2, n=3).rule().describe()
    '2_of_3'
    """

    model_config = STRICT

    kind: Literal["threshold", "k_of_n", "backend", "any", "all"]
    k: int = Field(default=1, ge=1)
    n: int = Field(default=1, ge=1)
    rules: list[DoneRuleConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_rule(self) -> DoneRuleConfig:
        self.rule()  # one set of rules: the wrapper's
        return self

    def rule(self) -> DoneRule:
        """The :class:`~evolve_envs.progress.done_rules.DoneRule` this mapping describes."""
        return DoneRule.parse(self.model_dump())


def _rule_mapping(rule: DoneRule) -> dict[str, object]:
    return {
        "kind": rule.kind,
        "k": rule.k,
        "n": rule.n,
        "rules": [_rule_mapping(r) for r in rule.rules],
    }


#: ``reward_model.done_by``: one of the four names, or a rule mapping (the union's tags are left
#: out of error paths).
DoneBy = Annotated[
    Annotated[DoneName, Tag("done-by-name")] | Annotated[DoneRuleConfig, Tag("done-rule")],
    Discriminator(lambda v: "done-by-name" if isinstance(v, str) else "done-rule"),
]


#: ``reward_model.max_lag_steps``: a number of steps >= 0, or ``"auto"`` (sized from the observed
#: answer latency, see :mod:`evolve_envs.progress.tracker`).
MaxLag = Annotated[
    Annotated[Annotated[int, Field(ge=0)], Tag("int")] | Annotated[Literal["auto"], Tag("str")],
    Discriminator(lambda v: "str" if isinstance(v, str) else "int"),
]

_UNION_TAGS = ("done-by-name", "done-rule", "int", "str")


class ProgressKeys(RewardShaping):
    """The ``reward_model`` keys of ``kind: progress`` that the tracker reads (docs/PROGRESS.md)."""

    mode: ProgressMode = "pairwise"
    calls: CallMode = "sync"
    max_lag_steps: MaxLag = 16
    last_check: LastCheck = "grid"
    start_step: int = Field(default=64, ge=0)
    call_every: int = Field(default=16, ge=1)
    milestone_every: int = Field(default=64, ge=0)
    negative_rule: NegativeRule = "vlac"
    done_threshold: float = Field(default=0.95, ge=0.0, le=1.0)
    done_comparison: Comparison = ">="
    done_by: DoneBy = "threshold"
    terminate_on_done: bool = True
    check_at_episode_end: bool = False
    trajectory_max_frames: int = Field(default=32, ge=2)
    failure_warn_fraction: float = Field(default=0.1, ge=0.0, le=1.0)
    max_unsettled_episodes: int = Field(default=4, ge=1)
    answer_timeout_s: float = Field(default=60.0, gt=0.0)

    @field_validator("done_by", mode="before")
    @classmethod
    def _rule_as_mapping(cls, value: Any) -> Any:
        return _rule_mapping(value) if isinstance(value, DoneRule) else value


_BOUNDS = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "literal_error": "expected one of {expected}",
}


class TrackerConfig(ProgressKeys):
    """Everything a :class:`~evolve_envs.progress.tracker.ProgressTracker` needs: the
    progress keys and ``reward_mode`` (``dense`` / ``sparse`` / ``binary``). Immutable; invalid
    values raise :class:`ConfigError` naming the key.

    >>> TrackerConfig(mode="trajectory", calls="async", reward_mode="sparse").needs_pairwise
    False
    """

    model_config = ConfigDict(**STRICT, frozen=True)

    reward_mode: RewardMode = "dense"

    def __init__(self, **values: object) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> TrackerConfig:
        """Build settings from a mapping, ignoring keys that are not settings."""
        return cls(**{k: v for k, v in values.items() if k in cls.model_fields})

    def replace(self, **changes: object) -> TrackerConfig:
        """A copy with ``changes`` applied (and validated)."""
        return TrackerConfig(**{**self.model_dump(), **changes})

    @property
    def needs_pairwise(self) -> bool:
        return self.mode in ("pairwise", "incremental")

    @property
    def rule(self) -> DoneRule:
        """The done rule ``done_by`` describes (the four names mapped to their rules)."""
        if isinstance(self.done_by, str):
            return DoneRule.from_done_by(self.done_by)
        return self.done_by.rule()

    @property
    def needs_done(self) -> bool:
        return self.rule.needs_backend


def _describe(exc: ValidationError) -> str:
    """``<key>: <rule>, got <value>`` for each problem of a :class:`TrackerConfig`."""
    lines = []
    for err in exc.errors():
        loc = [p for p in err.get("loc", ()) if p not in _UNION_TAGS]
        key = ".".join(str(p) for p in loc) or "<settings>"
        template = _BOUNDS.get(err.get("type", ""))
        ctx = err.get("ctx") or {}
        why = template.format(**ctx) if template else str(err.get("msg", "invalid value"))
        if err.get("type") == "extra_forbidden":
            lines.append(f"{key}: unknown setting")
        else:
            lines.append(f"{key}: {why}, got {err.get('input')!r}")
    return "\n".join(lines)


def check_capabilities(
    settings: TrackerConfig, capabilities: Capabilities | Mapping[str, object] | None
) -> None:
    """Raise :class:`ConfigError` if the backend cannot serve ``settings``.

    >>> check_capabilities(TrackerConfig(mode="trajectory"), {"progress": True})
    >>> check_capabilities(TrackerConfig(), {"backend": "acme", "progress": True})
    Traceback (most recent call last):
    ...
    evolve_envs.progress.config_error.ConfigError: reward_model.mode='pairwise' needs the pairwise
    critic, \
but backend 'acme' offers progress only; use mode='trajectory'
    """

    def cap(name: str) -> bool:
        if isinstance(capabilities, Mapping):
            return bool(capabilities.get(name, False))
        return bool(getattr(capabilities, name, False))

    backend = (
        capabilities.get("backend") if isinstance(capabilities, Mapping) else None
    ) or getattr(capabilities, "backend", "?")
    if settings.needs_pairwise and not cap("pairwise"):
        raise ConfigError(
            f"reward_model.mode={settings.mode!r} needs the pairwise critic, but backend "
            f"{backend!r} offers progress only; use mode='trajectory'"
        )
    if settings.needs_done and not cap("done"):
        rule = settings.done_by if isinstance(settings.done_by, str) else settings.rule.describe()
        raise ConfigError(
            f"reward_model.done_by={rule!r} needs the backend's /done, but backend "
            f"{backend!r} does not offer it; use done_by='threshold'"
        )
    if settings.mode == "trajectory" and not cap("progress"):
        raise ConfigError(f"backend {backend!r} does not offer /trajectory-critic")
