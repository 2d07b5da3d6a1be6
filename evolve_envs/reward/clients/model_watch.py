"""Notice when the model behind an endpoint changes mid-run.

A training run that silently switches reward model halfway (a redeploy, a replica started with
another checkpoint) mixes two reward scales and corrupts the run. The service names its model on
`GET /capabilities` and in the headers of every answer (``X-Reward-Model``,
``X-Reward-Model-Revision``, ``X-Reward-Config-Hash``, see
`evolve_envs.reward.service.middleware.model_headers`).
`ModelWatch` keeps, per endpoint, the identity seen
first (from the start-up `/capabilities` check, else from the first answer) and compares every
later answer, and every successful health probe of the endpoint pool (a restarted server is
re-checked as soon as it is probed), with it. A difference is logged at ERROR level on the
``evolve_envs.reward.clients`` logger, naming the endpoint, the old and the new identity, and
counted in `changes`; the new identity becomes the expected one, so each change is reported
once.

Servers that send no identity headers (older versions, third-party services) are never flagged.

Example:
    >>> watch = ModelWatch()
    >>> watch.observe("http://a", {"x-reward-model": "m1", "x-reward-model-revision": "r1"})
    >>> watch.observe("http://a", {"x-reward-model": "m2", "x-reward-model-revision": "r1"})
    >>> watch.changes, watch.identity("http://a").model_id
    (1, 'm2')
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evolve_envs.reward.protocol.wire import Capabilities

__all__ = ["ModelIdentity", "ModelWatch"]

logger = logging.getLogger("evolve_envs.reward.clients")

_MODEL = "x-reward-model"
_REVISION = "x-reward-model-revision"
_CONFIG = "x-reward-config-hash"


@dataclass(frozen=True)
class ModelIdentity:
    """Who answers: model id, revision and configuration hash (None when not reported)."""

    model_id: str | None
    model_revision: str | None = None
    config_hash: str | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> ModelIdentity | None:
        """The identity in an answer's headers, or None when the server sends none."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if _MODEL not in lowered:
            return None
        return cls(lowered[_MODEL], lowered.get(_REVISION), lowered.get(_CONFIG))

    @classmethod
    def from_capabilities(cls, caps: Capabilities | None) -> ModelIdentity | None:
        """The identity in a `Capabilities` answer, or None when it names no model."""
        if getattr(caps, "model_id", None) is None:
            return None
        return cls(caps.model_id, caps.model_revision, caps.config_hash)

    def __str__(self) -> str:
        rev = f"@{self.model_revision}" if self.model_revision else ""
        cfg = f" (config {self.config_hash})" if self.config_hash else ""
        return f"{self.model_id}{rev}{cfg}"


class ModelWatch:
    """Per-endpoint expected model identity; reports and counts changes (see module docs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: dict[str, ModelIdentity] = {}
        self.changes = 0

    def identity(self, endpoint: str) -> ModelIdentity | None:
        """The identity currently expected from `endpoint` (None before any was seen)."""
        with self._lock:
            return self._expected.get(endpoint)

    def expect(self, endpoint: str, caps: Capabilities | None) -> None:
        """Record (or re-check) the identity in `endpoint`'s `/capabilities` answer."""
        seen = ModelIdentity.from_capabilities(caps)
        if seen is not None:
            self._compare(endpoint, seen, "/capabilities")

    def observe(self, endpoint: str, headers: Mapping[str, str]) -> None:
        """Compare the identity headers of one answer from `endpoint` with the expected one."""
        seen = ModelIdentity.from_headers(headers)
        if seen is not None:
            self._compare(endpoint, seen, "answer headers")

    def _compare(self, endpoint: str, seen: ModelIdentity, source: str) -> None:
        with self._lock:
            before = self._expected.get(endpoint)
            # /capabilities carries no config hash on older servers: compare what both have
            if before is None:
                self._expected[endpoint] = seen
                return
            if before == seen:
                return
            self._expected[endpoint] = seen
            self.changes += 1
            count = self.changes
        logger.error(
            "REWARD MODEL CHANGED at %s (seen in %s): was %s, now %s. Rewards before and after "
            "this point come from different models (change #%d in this run).",
            endpoint,
            source,
            before,
            seen,
            count,
        )
