"""VLACBackend: adapter over the official VLAC library (`evo_vlac`, imported only when built);
how routes map onto its API is in docs/reward-models.md ("How the backends answer").

Example:
    >>> backend = VLACBackend("/models/VLAC", device="cuda:0")  # doctest: +SKIP
    >>> backend.critic_batch([CriticItem("pick", a, b, a)])  # doctest: +SKIP
    [12.0]
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from evolve_envs.reward.service.backends.base import (
    CKPT_ENV,
    Backend,
    BackendError,
    CriticItem,
    DoneItem,
)
from evolve_envs.reward.service.backends.prompt_text import template_safe

__all__ = ["VLACBackend", "VLAC_PACKAGE"]

VLAC_PACKAGE = "evo_vlac"


def _import_vlac() -> Any:
    try:
        return importlib.import_module(VLAC_PACKAGE)
    except ImportError as exc:
        raise BackendError(
            f"the vlac backend needs the official VLAC package {VLAC_PACKAGE!r}, which is not "
            "installed: clone https://github.com/InternRobotics/VLAC and `pip install -e .` it "
            f"into this environment ({exc})"
        ) from exc


def _number(value: object, what: str) -> float:
    """VLAC answers are strings or floats; anything that is not a finite number is an error."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise BackendError(f"VLAC returned a non-numeric {what}: {value!r}") from None
    if not math.isfinite(out):
        raise BackendError(f"VLAC returned a non-finite {what}: {value!r}")
    return out


def _chains(items: Sequence[CriticItem]) -> list[list[CriticItem]]:
    """Split `items` into runs that are one trajectory each (see module docs)."""
    runs: list[list[CriticItem]] = []
    for it in items:
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and it.image_a is last.image_b
            and it.first is last.first
            and it.task == last.task
            and it.reference is last.reference
        ):
            runs[-1].append(it)
        else:
            runs.append([it])
    return runs


class VLACBackend(Backend):
    """VLAC critic and done through `evo_vlac.GAC_model` (see module docs).

    Args:
        ckpt_path: VLAC checkpoint directory (default `$VLAC_CKPT_PATH`).
        device: torch device map, e.g. "cuda:0" ("auto": cuda:0 if available, else cpu).
        model_type: VLAC model type (default "internvl2").
        temperature, top_k: VLAC sampling settings (its examples use 0.5 and 1).
        batch_num: most prompts per VLAC inference batch.
        rich: VLAC's `rich` decimals (probability-weighted digits; needs logprobs).
        done_threshold: completion (0-1) at which `/done` says done.
    """

    name = "vlac"

    def __init__(
        self,
        ckpt_path: str | None = None,
        *,
        device: str = "auto",
        model_type: str = "internvl2",
        temperature: float = 0.5,
        top_k: int = 1,
        batch_num: int = 8,
        rich: bool = False,
        done_threshold: float = 0.95,
        disabled: Iterable[str] = (),
    ) -> None:
        super().__init__(disabled=disabled)
        if not 0.0 < done_threshold <= 1.0:
            raise ValueError(f"done_threshold is a completion in (0, 1], got {done_threshold}")
        vlac = _import_vlac()
        path = ckpt_path or os.environ.get(CKPT_ENV)
        if not path or not os.path.isdir(path):
            raise ValueError(
                f"the vlac backend needs an existing checkpoint directory (--ckpt-path or "
                f"${CKPT_ENV}); got {path!r}"
            )
        if device == "auto":
            import torch

            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        self.ckpt_path = path
        self.batch_num = int(batch_num)
        self.rich = bool(rich)
        self.done_threshold = float(done_threshold)
        critic = vlac.GAC_model(tag="critic")
        critic.init_model(model_path=path, model_type=model_type, device_map=device)
        critic.temperature = temperature
        critic.top_k = top_k
        critic.set_config()
        critic.set_system_prompt()
        self._critic = critic

    @staticmethod
    def _pil(frame: np.ndarray) -> Any:
        from PIL import Image

        return Image.fromarray(frame)

    def model_identity(self) -> tuple[str | None, str | None]:
        """The checkpoint directory's id and fingerprint (`model_fingerprint`)."""
        from evolve_envs.reward.service.backends.model_fingerprint import (
            model_fingerprint,
            model_id_from_path,
        )

        return model_id_from_path(self.ckpt_path), model_fingerprint(self.ckpt_path)

    def _reference(self, reference: Sequence[np.ndarray] | None) -> list[object] | None:
        if not reference:
            return None
        if len(reference) < 2:
            raise BackendError(
                "VLAC's trajectory critic needs a reference of at least 2 frames "
                f"(it samples ref_num >= 2 of them); got {len(reference)}"
            )
        return [self._pil(f) for f in reference]

    def _trajectory(self, run: Sequence[CriticItem]) -> list[float]:
        head = run[0]
        frames = [head.image_a] + [it.image_b for it in run]
        ref = self._reference(head.reference)
        critic_list, value_list = self._critic.get_trajectory_critic(
            task=template_safe(head.task),
            image_list=[self._pil(f) for f in frames],
            ref_image_list=ref,
            batch_num=self.batch_num,
            ref_num=len(ref) if ref else 0,
            think=False,
            skip=1,
            rich=self.rich,
            reverse_eval=False,
            frame_skip=True,
        )
        if len(critic_list) != len(run) or len(value_list) != len(frames):
            raise BackendError(
                f"VLAC returned {len(critic_list)} critics and {len(value_list)} values for "
                f"{len(frames)} images (expected {len(run)} and {len(frames)})"
            )
        return [min(100.0, max(-100.0, _number(c, "critic"))) for c in critic_list]

    def critic_batch(self, items: Sequence[CriticItem]) -> list[float]:
        out: list[float] = []
        for run in _chains(items):
            if run[0].image_a is run[0].first:
                out.extend(self._trajectory(run))
            else:  # pairs that do not start at the trajectory's first frame: one call each
                for it in run:
                    out.extend(self._trajectory([it]))
        return out

    def _done_one(self, it: DoneItem) -> float:
        task = template_safe(it.task)
        kwargs: dict[str, object] = {"task": task, "batch_num": self.batch_num, "rich": self.rich}
        if it.reference and len(it.reference) >= 2:
            frames = [it.first, it.curr] if it.prev is it.first else [it.first, it.prev, it.curr]
            kwargs["image_list"] = [self._pil(f) for f in frames]
            kwargs["ref_image_list"] = [self._pil(f) for f in it.reference]
            kwargs["ref_num"] = len(it.reference)
            expected = len(frames)
        elif it.reference:
            kwargs["image_list"] = [self._pil(it.curr)]
            kwargs["goal_image"] = self._pil(it.reference[0])
            expected = 1
        else:
            kwargs["image_list"] = [self._pil(it.curr)]
            expected = 1
        done_list = self._critic.get_trajectory_done(threshold=0, skip=1, **kwargs)
        if len(done_list) != expected:
            raise BackendError(f"VLAC returned {len(done_list)} done values for {expected} images")
        return min(1.0, max(0.0, _number(done_list[-1], "done value")))

    def done_batch(self, items: Sequence[DoneItem]) -> list[tuple[bool, float]]:
        out = []
        for it in items:
            prob = self._done_one(it)
            out.append((prob >= self.done_threshold, prob))
        return out
