"""What the reward wrappers take: an open reward model, which they close after the env.

>>> class Client:
...     closed = False
...     def close(self):
...         self.closed = True
>>> client = Client()
>>> model = lend(client)
>>> model.close()
>>> model.client is client, client.closed
(True, False)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.protocol.wire import Capabilities

__all__ = ["LentClient", "OpenModel", "check_open_model", "lend"]


class OpenModel(Protocol):
    """An open reward model as the reward wrappers use it (docs/wrappers.md)."""

    @property
    def client(self) -> Any: ...

    @property
    def capabilities(self) -> Capabilities | Mapping[str, object] | None: ...

    @property
    def settings(self) -> TrackerConfig | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class LentClient:
    """A client lent to a reward wrapper: the wrapper's ``close`` leaves it open."""

    client: Any
    settings: TrackerConfig | None = None
    capabilities: Capabilities | Mapping[str, object] | None = None

    def close(self) -> None:
        """Nothing: the client is closed by whoever opened it."""


def lend(
    client: Any,
    settings: TrackerConfig | None = None,
    capabilities: Capabilities | Mapping[str, object] | None = None,
) -> LentClient:
    """``client`` for a reward wrapper that must not close it (docs/wrappers.md)."""
    return LentClient(client, settings, capabilities)


def check_open_model(model: object, wrapper: str) -> OpenModel:
    """``model`` if it has an open reward model's shape, else a ``TypeError`` naming the fix.

    >>> check_open_model("http://127.0.0.1:8111", "ProgressReward")
    Traceback (most recent call last):
    ...
    TypeError: ProgressReward takes an open reward model, got str: open one with \
evolve_envs.open_reward_model({'enable': True, 'endpoint': URL}), or lend a client you close \
yourself with evolve_envs.wrappers.lend(client)
    """
    if all(hasattr(model, name) for name in ("client", "capabilities", "close")):
        return model  # type: ignore[return-value]
    raise TypeError(
        f"{wrapper} takes an open reward model, got {type(model).__name__}: open one with "
        "evolve_envs.open_reward_model({'enable': True, 'endpoint': URL}), or lend a client you "
        "close yourself with evolve_envs.wrappers.lend(client)"
    )
