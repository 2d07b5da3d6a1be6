"""Named judge backends: a published reward model behind an OpenAI-compatible server.

Each is the `openai` backend with its preset fixed, so that one YAML line selects the model::

    embedded_backend: roboreward      # or robodopamine, topreward

and its kwargs are the `openai` backend's (`base_url`, `model`, ...) plus `preset_options`.
For TOPReward on a local transformers checkpoint, use the `vlm` backend with
``preset: topreward`` (probabilities from the next-token logits).

Example:
    >>> backend = RoboRewardBackend("http://127.0.0.1:8000/v1", model="teetone/RoboReward-8B")  # doctest: +SKIP
    >>> backend.capabilities().backend  # doctest: +SKIP
    'roboreward'
"""  # noqa: E501

from __future__ import annotations

from typing import Any, ClassVar

from evolve_envs.reward.service.backends.openai_compat import OpenAICompatBackend

__all__ = ["RoboRewardBackend", "RoboDopamineBackend", "TopRewardBackend"]


class _PresetBackend(OpenAICompatBackend):
    """The `openai` backend with `preset` fixed to the class's `preset_name`."""

    preset_name: ClassVar[str] = ""

    def __init__(self, base_url: str, model: str, **kwargs: Any) -> None:
        if kwargs.pop("preset", self.preset_name) != self.preset_name:
            raise ValueError(f"the {self.name} backend's preset is {self.preset_name!r}")
        kwargs.setdefault("system_prompt", None)  # the published prompts carry their own
        super().__init__(base_url, model, preset=self.preset_name, **kwargs)


class RoboRewardBackend(_PresetBackend):
    """RoboReward (1..5 rubric, ``ANSWER: <n>``) through an OpenAI-compatible server."""

    name = "roboreward"
    preset_name = "roboreward"


class RoboDopamineBackend(_PresetBackend):
    """Robo-Dopamine GRM (``<score>±NN%</score>`` hops) through an OpenAI-compatible server."""

    name = "robodopamine"
    preset_name = "robodopamine"


class TopRewardBackend(_PresetBackend):
    """TOPReward (P("True") from `top_logprobs`) through an OpenAI-compatible server."""

    name = "topreward"
    preset_name = "topreward"
