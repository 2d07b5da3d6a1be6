"""VLACBackend: adapter over the official VLAC package (`evo_vlac`, InternRobotics/VLAC).

The package is imported only when this backend is built; without it, construction raises
`BackendError` naming the package and how to install it. The model directory comes from
`--ckpt-path`, `$VLAC_CKPT_PATH` or the `ckpt_path` kwarg (nothing is downloaded).

Capabilities: progress and pairwise (VLAC's pairwise critic through `get_trajectory_critic`
on each frame pair) and done (the critic from the first frame to the current one, accumulated,
compared with `done_threshold`). VLAC has no video or image-score answer.

Example:
    >>> backend = VLACBackend("/models/VLAC", device="cuda:0")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from reward_service.backends.base import CKPT_ENV, Backend, BackendError, CriticItem, DoneItem

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


class VLACBackend(Backend):
    """VLAC pairwise critic (see module docs).

    Args:
        ckpt_path: VLAC checkpoint directory (default `$VLAC_CKPT_PATH`).
        device: torch device map, e.g. "cuda:0" ("auto": cuda:0 if available, else cpu).
        model_type: VLAC model type (default "internvl2").
        temperature, top_k: VLAC sampling settings (its examples use 0.5 and 1).
        ref_num: reference frames sampled from a given reference trajectory.
        done_threshold: accumulated progress (percent) at which `/done` says done.
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
        ref_num: int = 6,
        done_threshold: float = 95.0,
        disabled: Iterable[str] = (),
    ) -> None:
        super().__init__(disabled=disabled)
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
        self.ref_num = ref_num
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

    def _pair_critic(
        self, task: str, a: np.ndarray, b: np.ndarray, reference: Sequence[np.ndarray] | None
    ) -> float:
        ref = [self._pil(f) for f in reference] if reference else None
        critic_list, _ = self._critic.get_trajectory_critic(
            task=task,
            image_list=[self._pil(a), self._pil(b)],
            ref_image_list=ref,
            batch_num=1,
            ref_num=min(self.ref_num, len(ref)) if ref else 0,
            skip=1,
            rich=False,
        )
        if len(critic_list) != 1:
            raise BackendError(f"VLAC returned {len(critic_list)} critics for one frame pair")
        return float(min(100.0, max(-100.0, float(critic_list[0]))))

    def critic_batch(self, items: Sequence[CriticItem]) -> list[float]:
        return [self._pair_critic(it.task, it.image_a, it.image_b, it.reference) for it in items]

    def done_batch(self, items: Sequence[DoneItem]) -> list[tuple[bool, float]]:
        out = []
        for it in items:
            critic = self._pair_critic(it.task, it.first, it.curr, it.reference)
            progress = max(0.0, critic)  # accumulated from 0: v = c for c >= 0
            out.append((progress >= self.done_threshold, progress / 100.0))
        return out
