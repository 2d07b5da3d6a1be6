"""Done rules: when the reward model judges an episode's task done, and an audit of those calls.

>>> rule = DoneRule.parse({"kind": "k_of_n", "k": 2, "n": 3})
>>> judge = rule.judge()
>>> [judge.update(above=a) for a in (True, False, None, True)]
[False, False, False, True]
>>> DoneRule.from_done_by("either").describe()
'any(threshold, backend)'
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DONE_BY",
    "DoneKind",
    "DoneRule",
    "DoneJudge",
    "TerminationAudit",
]

DoneKind = Literal["threshold", "k_of_n", "backend", "any", "all"]
KINDS: tuple[str, ...] = ("threshold", "k_of_n", "backend", "any", "all")
#: The values of the older ``done_by`` key.
DONE_BY: tuple[str, ...] = ("threshold", "backend", "either", "both")


@dataclass(frozen=True)
class DoneRule:
    """A done rule (docs/PROGRESS.md); validated on construction."""

    kind: DoneKind = "threshold"
    k: int = 1
    n: int = 1
    rules: tuple[DoneRule, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"done rule kind: expected one of {KINDS}, got {self.kind!r}")
        object.__setattr__(self, "rules", tuple(self.rules))
        for name in ("k", "n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"done rule {name}: expected int, got {value!r}")
        if self.kind == "k_of_n" and not 1 <= self.k <= self.n:
            raise ValueError(f"k_of_n needs 1 <= k <= n (k={self.k}, n={self.n})")
        if self.kind in ("any", "all"):
            if not self.rules:
                raise ValueError(f"{self.kind!r} needs at least one rule in 'rules'")
            if not all(isinstance(r, DoneRule) for r in self.rules):
                raise ValueError("done rule: rules must be DoneRule items")
        elif self.rules:
            raise ValueError(f"'rules' is only for any/all, not {self.kind!r}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_done_by(cls, done_by: str) -> DoneRule:
        """The rule equivalent to the older ``done_by`` value."""
        if done_by == "either":
            return cls("any", rules=(cls("threshold"), cls("backend")))
        if done_by == "both":
            return cls("all", rules=(cls("threshold"), cls("backend")))
        if done_by in ("threshold", "backend"):
            return cls(done_by)  # type: ignore[arg-type]
        raise ValueError(f"done_by: expected one of {DONE_BY}, got {done_by!r}")

    @classmethod
    def parse(cls, spec: DoneRule | Mapping[str, object] | str) -> DoneRule:
        """A rule from a mapping (``{kind, k, n, rules}``; ``rules`` a list of such mappings), a
        kind's name (``"backend"``) or a :class:`DoneRule`.

            >>> DoneRule.parse({"kind": "any", "rules": ["backend", {"kind": "k_of_n",
            ...                 "k": 3, "n": 3}]}).describe()
            'any(backend, 3_of_3)'
        """
        if isinstance(spec, DoneRule):
            return spec
        if isinstance(spec, str):
            if spec not in ("threshold", "backend"):
                raise ValueError(
                    f"a rule named alone must be 'threshold' or 'backend' (k_of_n, "
                    f"any and all need their keys), got {spec!r}"
                )
            return cls(spec)  # type: ignore[arg-type]
        if not isinstance(spec, Mapping):
            raise ValueError(f"expected a mapping or a kind, got {spec!r}")
        unknown = set(spec) - {"kind", "k", "n", "rules"}
        if unknown:
            raise ValueError(f"done rule: unknown key(s) {sorted(unknown)}")
        rules = spec.get("rules") or ()
        if isinstance(rules, str | bytes) or not isinstance(rules, Sequence):
            raise ValueError(f"done rule rules: expected a list, got {rules!r}")
        return cls(
            kind=spec.get("kind", "threshold"),
            k=spec.get("k", 1),
            n=spec.get("n", 1),
            rules=tuple(cls.parse(r) for r in rules),
        )

    # ------------------------------------------------------------------ reading
    @property
    def needs_backend(self) -> bool:
        """The rule reads the service's ``/done`` (anywhere in the tree)."""
        if self.kind == "backend":
            return True
        return any(r.needs_backend for r in self.rules)

    def describe(self) -> str:
        """A short text of the rule, e.g. ``any(2_of_3, backend)``."""
        if self.kind == "k_of_n":
            return f"{self.k}_of_{self.n}"
        if self.kind in ("any", "all"):
            return f"{self.kind}({', '.join(r.describe() for r in self.rules)})"
        return self.kind

    def judge(self) -> DoneJudge:
        """A fresh :class:`DoneJudge` for this rule."""
        return DoneJudge(self)


class DoneJudge:
    """Applies a :class:`DoneRule` to one episode's checks (call :meth:`reset` per episode).

    >>> judge = DoneRule("all", rules=(DoneRule("threshold"), DoneRule("backend"))).judge()
    >>> judge.update(above=True, backend=False), judge.update(above=True, backend=True)
    (False, True)
    """

    def __init__(self, rule: DoneRule) -> None:
        self.rule = rule
        self._children = [DoneJudge(r) for r in rule.rules]
        self._votes: collections.deque[bool] = collections.deque(maxlen=max(1, rule.n))

    def reset(self) -> None:
        """Forget the previous episode's checks."""
        self._votes.clear()
        for child in self._children:
            child.reset()

    def update(self, *, above: bool | None = None, backend: bool | None = None) -> bool:
        """Account one check and say whether the rule judges the task done at it."""
        kind = self.rule.kind
        if kind == "threshold":
            return bool(above)
        if kind == "backend":
            return bool(backend)
        if kind == "k_of_n":
            if above is not None:
                self._votes.append(bool(above))
            return sum(self._votes) >= self.rule.k
        results = [child.update(above=above, backend=backend) for child in self._children]
        return any(results) if kind == "any" else all(results)


class TerminationAudit:
    """Running counts, per task, of reward-model done decisions against the env's success.

    >>> audit = TerminationAudit()
    >>> audit.record("open the drawer", model_done=True, success_at_done=True,
    ...              env_success=True)
    >>> audit.record("open the drawer", model_done=True, success_at_done=False,
    ...              env_success=False)
    >>> audit.counts("open the drawer")["precision"]
    0.5
    """

    _KEYS = (
        "episodes",
        "model_done",
        "model_done_success",
        "env_success",
        "success_model_done",
        "unknown",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, dict[str, int]] = {}

    def record(
        self,
        task: str,
        *,
        model_done: bool,
        success_at_done: bool | None,
        env_success: bool | None,
    ) -> None:
        """Count one finished episode of ``task``."""
        with self._lock:
            c = self._tasks.setdefault(task, dict.fromkeys(self._KEYS, 0))
            c["episodes"] += 1
            if env_success is None:
                c["unknown"] += 1
                return
            c["env_success"] += int(bool(env_success))
            if model_done:
                c["model_done"] += 1
                c["model_done_success"] += int(bool(success_at_done))
                c["success_model_done"] += int(bool(env_success))

    @property
    def tasks(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def counts(self, task: str | None = None) -> dict[str, object]:
        """The counts and rates of ``task`` (all tasks summed when ``None``)."""
        with self._lock:
            if task is None:
                c = {k: sum(t[k] for t in self._tasks.values()) for k in self._KEYS}
            else:
                c = dict(self._tasks.get(task, dict.fromkeys(self._KEYS, 0)))
        done, succ = c["model_done"], c["env_success"]
        return {
            **c,
            "precision": c["model_done_success"] / done if done else None,
            "recall": c["success_model_done"] / succ if succ else None,
        }
