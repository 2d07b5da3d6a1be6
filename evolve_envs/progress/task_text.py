"""The task instruction a reward wrapper sends to the reward model.

>>> import gymnasium as gym
>>> env = gym.make("CartPole-v1")
>>> task_text(env, None, {"task_description": "balance the pole"}, "ProgressReward")
'balance the pole'
>>> task_text(env, None, {}, "ProgressReward")
Traceback (most recent call last):
...
ValueError: ProgressReward needs the task text: pass task=... or have the env put \
'task_description' in the reset info
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

__all__ = ["task_text"]


def task_text(env: gym.Env, task: str | None, info: Mapping[str, object], owner: str) -> str:
    """``task`` if given, else ``info["task_description"]``, else the env's ``task_description``."""
    text = task or info.get("task_description")
    if not text:
        text = getattr(env.unwrapped, "task_description", None)
    if not text:
        raise ValueError(
            f"{owner} needs the task text: pass task=... or have the env put "
            "'task_description' in the reset info"
        )
    return str(text)
