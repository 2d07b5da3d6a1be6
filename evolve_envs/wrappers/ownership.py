"""What a reward wrapper owns and closes: its client, when handed over, a reward service, and
the reward model ``make_env`` opened for it.

Both :class:`~evolve_envs.wrappers.progress_reward.ProgressReward` and
:class:`~evolve_envs.wrappers.episode_score.EpisodeScoreReward` close in the same order: the client
first (no request outlives it), then the wrapped env, then the service they were given to stop,
then the reward model (its client, pool and embedded service).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

__all__ = ["close_owned"]


def close_owned(
    close_env: Callable[[], None],
    client: Any,
    close_client: bool,
    service: Any,
    reward_model: Any = None,
) -> None:
    """Close ``client`` (when ``close_client`` and it has ``close``), then the wrapped env
    (``close_env``), then stop ``service`` and close ``reward_model`` (each unless ``None``).
    Each step runs even when an earlier one raised; the error is raised after the last step.

    >>> class Part:
    ...     def __init__(self, name): self.name = name
    ...     def close(self): print("close", self.name)
    ...     def stop(self): print("stop", self.name)
    >>> close_owned(lambda: print("close env"), Part("client"), True, Part("service"))
    close client
    close env
    stop service
    >>> close_owned(lambda: print("close env"), Part("client"), False, None)
    close env
    """
    with contextlib.ExitStack() as stack:  # callbacks run last-registered first
        if reward_model is not None:
            stack.callback(reward_model.close)
        if service is not None:
            stack.callback(service.stop)
        stack.callback(close_env)
        if close_client and hasattr(client, "close"):
            stack.callback(client.close)
