"""A STAND-IN for the official VLAC library (`evo_vlac`, InternRobotics/VLAC), used by the tests.

It is not VLAC: no model, no ms-swift. It has VLAC's import path (`evo_vlac.GAC_model`), set-up
calls and the exact signatures of `get_trajectory_critic` and `get_trajectory_done` (names,
defaults, return shapes and value ranges as in VLAC's `evo_vlac/utils/model_utils.py`), so an
adapter that calls any of them wrongly fails here with a `TypeError` or a shape mismatch. Its
answers come from the painted grey level of each frame (the mock backend's intensity rule), so the
tests can check values end to end. Every call is appended to `CALLS` for the tests to inspect.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CALLS: list[tuple[str, dict[str, Any]]] = []


def _progress(image: Any) -> float:
    return round(100.0 * float(np.asarray(image, dtype=np.float64).mean()) / 255.0)


def _critic(pa: float, pb: float) -> float:
    if pa >= 100.0:
        return 0.0
    return max(-100.0, min(100.0, 100.0 * (pb - pa) / (100.0 - pa)))


class GAC_model:  # noqa: N801 - VLAC's name
    def __init__(self, tag: str = "critic") -> None:
        self.tag = tag
        self.ready = False

    def init_model(
        self,
        model_path: str,
        model_type: str = "internvl2",
        device_map: str = "auto",
        torch_dtype: Any = None,
        adapter: str | None = None,
    ) -> None:
        CALLS.append(("init_model", {"model_path": model_path, "device_map": device_map}))

    def set_config(self) -> None:
        self.ready = True

    def set_system_prompt(self, system_prompt: str | None = None) -> None:
        return None

    def critic_to_value_simple(self, critic_list: list[float], simple: bool = True) -> list[float]:
        value_list = [0.0]
        for c in critic_list:
            value_list.append(value_list[-1] + (100 - value_list[-1]) * float(c) / 100.0)
        return value_list

    def get_trajectory_critic(
        self,
        task: str,
        image_list: list[Any],
        ref_image_list: list[Any] | None = None,
        batch_num: int = 20,
        ref_num: int = 9,
        think: bool = False,
        skip: int = 1,
        rich: bool = False,
        reverse_eval: bool = False,
        frame_skip: bool = True,
        addition_scale: float = 1,
        bias: float = 0,
        related_critic: bool = False,
        positive_clip: float = 0,
        negative_clip: float = 0,
        value_simple: bool = True,
    ) -> tuple[list[float], list[float]]:
        assert self.ready, "set_config() was not called"
        if ref_image_list is not None:
            assert ref_num >= 2, "VLAC divides by ref_num - 1"
        CALLS.append(
            ("critic", {"task": task, "n": len(image_list), "ref_num": ref_num, "skip": skip})
        )
        idx = range(skip, len(image_list), skip) if frame_skip else range(skip, len(image_list))
        p = [_progress(im) for im in image_list]
        critic_list = [_critic(p[i - skip], p[i]) for i in idx]
        return critic_list, self.critic_to_value_simple(critic_list, value_simple)

    def get_trajectory_done(
        self,
        task: str,
        image_list: list[Any],
        ref_image_list: list[Any] | None = None,
        batch_num: int = 20,
        rich: bool = False,
        ref_num: int = 9,
        threshold: float = 0,
        skip: int = 1,
        goal_image: Any = None,
    ) -> list[float]:
        assert self.ready, "set_config() was not called"
        mode = "goal" if goal_image is not None else "ref" if ref_image_list else "plain"
        CALLS.append(("done", {"task": task, "n": len(image_list), "mode": mode}))
        images = image_list[::skip]
        values = [_progress(im) / 100.0 for im in images]
        if mode == "ref":
            values = [0.0] + values[1:]
        return [v if v > threshold else 0.0 for v in values]
