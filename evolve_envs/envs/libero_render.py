"""Rendering LIBERO's cameras only for the frames something reads (``render_cameras``).

robosuite renders every camera at every step, inside the step, at the sub-step its camera
sensors sample. With ``LiberoEnv(render_cameras="on_demand")`` (or a list of the cameras to
render at every step) the cameras' sensors are replaced by a :class:`SceneCapture`: at that same
sub-step it records the camera's MuJoCo scene (``mjv_updateScene``, well under a millisecond);
drawing the scene and reading its pixels back (``mjr_render`` + ``mjr_readPixels``, the costly
part) happens only when the frame is asked for, until the next step. The frame drawn then is the
frame robosuite would have rendered: the same scene, drawn by the same context.

Readers of a frame go through :func:`camera_frame`, which asks an env that renders on demand for
the frame and reads the observation otherwise:

>>> import numpy as np
>>> obs = {"agentview_image": np.zeros((2, 2, 3), np.uint8)}
>>> class Env:  # any env: LiberoEnv says which keys it renders on demand, other envs say nothing
...     unwrapped = None
>>> camera_frame(Env(), obs, "agentview_image").shape
(2, 2, 3)
>>> check_render_cameras("on_demand", ("agentview", "wrist")), check_render_cameras(
...     ["wrist"], ("agentview", "wrist"))
((), ('wrist',))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "RENDERED_CAMERAS",
    "RenderCameras",
    "SceneCapture",
    "camera_frame",
    "check_render_cameras",
]

#: ``render_cameras``: ``"always"`` (every camera at every step), ``"on_demand"`` (a camera only
#: when its frame is read), or the aliases of the cameras rendered at every step (the policy's),
#: the others on demand.
RenderCameras = Literal["always", "on_demand"] | Sequence[str]

#: The ``info`` key listing the observation's image keys that hold the current step's frame.
RENDERED_CAMERAS = "rendered_cameras"


def check_render_cameras(value: RenderCameras, cameras: Sequence[str]) -> tuple[str, ...]:
    """The camera aliases rendered at every step under ``value`` (``ValueError`` if invalid)."""
    if value == "always":
        return tuple(cameras)
    if value == "on_demand":
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(
            "render_cameras must be 'always', 'on_demand' or a list of the cameras rendered at "
            f"every step (a subset of {tuple(cameras)}), got {value!r}"
        )
    bad = [c for c in value if c not in cameras]
    if bad:
        raise ValueError(
            f"render_cameras: {bad[0]!r} is not one of this env's cameras {tuple(cameras)}"
        )
    return tuple(c for c in cameras if c in value)


def camera_frame(env: Any, obs: Mapping[str, Any], key: str) -> np.ndarray:
    """The current step's frame of camera ``key``: drawn by the base env when it renders that
    camera on demand (``key`` in its ``on_demand_keys``, see ``LiberoEnv.frame``), else
    ``obs[key]``. Call it before the next step; ``obs`` is the env's latest observation."""
    base = getattr(env, "unwrapped", None)
    if key in getattr(base, "on_demand_keys", ()):
        return base.frame(key)
    return np.asarray(obs[key])


class SceneCapture:
    """Record a robosuite env's camera scenes when its sensors sample; draw them when asked.

    ``problem`` returns the robosuite env (its ``sim`` is rebuilt at every hard reset, so it is
    looked up at each call). ``sensor(camera)`` is the robosuite sensor that records
    ``camera``'s scene; :meth:`draw` renders the recorded scene as robosuite's
    ``sim.render(camera_name=camera, height=h, width=w)`` would have (raw OpenGL row order, then
    robosuite's image convention).

    Example (needs LIBERO and a GL context)::

        capture = SceneCapture(lambda: sim_env.env, (128, 128))
        problem.modify_observable("agentview_image", "sensor", capture.sensor("agentview"))
        sim_env.step(action)          # records the scene, draws nothing
        capture.draw("agentview")     # (128, 128, 3) uint8
    """

    def __init__(self, problem: Callable[[], Any], image_hw: tuple[int, int]) -> None:
        self._problem = problem
        self.image_hw = image_hw
        self._scenes: dict[str, Any] = {}
        self._cameras: dict[str, Any] = {}
        self._model: Any = None
        self.captured: set[str] = set()

    def sensor(self, camera: str) -> Callable[[dict[str, Any]], np.ndarray]:
        """A robosuite sensor (for ``modify_observable(..., "sensor", ...)``) that records
        ``camera``'s scene and returns a 1x1 placeholder instead of an image."""
        from robosuite.utils.observables import sensor

        @sensor(modality="image")
        def capture_scene(obs_cache: dict[str, Any]) -> np.ndarray:
            self.capture(camera)
            return np.zeros((1, 1, 3), np.uint8)

        return capture_scene

    def capture(self, camera: str) -> None:
        """Record ``camera``'s scene from the sim's current data."""
        import mujoco

        sim = self._problem().sim
        model = sim.model._model
        if model is not self._model:  # a hard reset built a new model: new scenes
            self._scenes.clear()
            self._cameras.clear()
            self.captured.clear()
            self._model = model
        scene = self._scenes.get(camera)
        if scene is None:
            scene = self._scenes[camera] = mujoco.MjvScene(model, maxgeom=1000)
            cam = self._cameras[camera] = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            cam.fixedcamid = sim.model.camera_name2id(camera)
        ctx = sim._render_context_offscreen
        mujoco.mjv_updateScene(
            model,
            sim.data._data,
            ctx.vopt,
            ctx.pert,
            self._cameras[camera],
            mujoco.mjtCatBit.mjCAT_ALL,
            scene,
        )
        self.captured.add(camera)

    def draw(self, camera: str) -> np.ndarray:
        """Render ``camera``'s recorded scene: ``(h, w, 3)`` uint8 in robosuite's convention."""
        import mujoco
        from robosuite.utils import macros
        from robosuite.utils.binding_utils import _MjSim_render_lock
        from robosuite.utils.mjcf_utils import IMAGE_CONVENTION_MAPPING

        if camera not in self.captured:
            raise RuntimeError(f"no scene of camera {camera!r} was recorded at this step")
        h, w = self.image_hw
        ctx = self._problem().sim._render_context_offscreen
        with _MjSim_render_lock:  # as MjSim.render: resize the buffer if needed, draw, read
            if w > ctx.con.offWidth or h > ctx.con.offHeight:
                ctx.update_offscreen_size(
                    max(w, ctx.model.vis.global_.offwidth), max(h, ctx.model.vis.global_.offheight)
                )
            mujoco.mjr_render(
                viewport=mujoco.MjrRect(0, 0, w, h), scn=self._scenes[camera], con=ctx.con
            )
            rgb = ctx.read_pixels(w, h)
        return rgb[:: IMAGE_CONVENTION_MAPPING[macros.IMAGE_CONVENTION]]
