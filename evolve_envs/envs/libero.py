"""LIBERO as a :class:`gymnasium.Env`."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from evolve_envs.envs.headless import configure_process
from evolve_envs.envs.libero_expert import GOAL_STATE_DIM, pick_place_goal
from evolve_envs.envs.libero_process import (
    check_not_forked,
    claim_gl_context,
    close_at_exit,
    forget_at_exit,
    raise_setup_error,
    stdout_to_log,
)
from evolve_envs.envs.libero_render import (
    RENDERED_CAMERAS,
    RenderCameras,
    SceneCapture,
    check_render_cameras,
)
from evolve_envs.envs.libero_tasks import (
    ACTION_DIM,
    CAMERAS,
    STATE_DIM,
    ImageOrientation,
    InitStateMode,
    check_cameras,
    check_image_size,
    check_init_state,
    check_init_state_ids,
    check_suite,
    load_suite,
    resolve_task,
)

SETTLE_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)


class LiberoEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """One LIBERO task as a Gymnasium environment.

    >>> env = LiberoEnv("libero_10", task_id=0, image_size=128)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> obs["agentview_image"].shape  # doctest: +SKIP
    (128, 128, 3)
    >>> env.close()  # doctest: +SKIP

    Scenes: ``init_state`` picks the task's init state at each reset, ``"random"``,
    ``"ordered"``, ``"by_seed"`` (a reset with ``seed=s`` plays ``init_state_ids[s % len]``, one
    without a seed a random one) or a fixed id; ``init_state_ids`` limits the first three to
    those ids (a training split and a held-out split of the 50). ``privileged_state=True``
    appends the goal object's and target's world positions to ``state`` (8 + 6 floats), the
    state the scripted expert reads.

    Rendering only the frames that are read (docs/envs.md): with ``render_cameras="on_demand"``
    the image entries of cameras nobody asked for hold zeros, ``info["rendered_cameras"]`` lists
    those that hold this step's frame, and :meth:`frame` draws one when it is read:

    >>> env = LiberoEnv("libero_10", image_size=128, render_cameras="on_demand")  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> info["rendered_cameras"], int(obs["agentview_image"].max())  # doctest: +SKIP
    ([], 0)
    >>> env.frame("agentview_image").max() > 0, info["rendered_cameras"]  # doctest: +SKIP
    (True, ['agentview_image'])
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        suite: str = "libero_10",
        task_id: int | str = 0,
        *,
        cameras: Sequence[str] = ("agentview", "wrist"),
        image_size: int | Sequence[int] = 256,
        image_orientation: ImageOrientation = "upright",
        init_state: InitStateMode | int = "random",
        num_settle_steps: int = 10,
        render_mode: str | None = "rgb_array",
        render_cameras: RenderCameras = "always",
        init_state_ids: Sequence[int] | None = None,
        privileged_state: bool = False,
    ) -> None:
        configure_process()
        check_suite(suite)
        self.suite = suite
        self.cameras = check_cameras(cameras)
        self.image_hw = check_image_size(image_size)
        if image_orientation not in ("upright", "rot180", "raw"):
            raise ValueError(
                f"image_orientation must be 'upright', 'rot180' or 'raw', got {image_orientation!r}"
            )
        self.image_orientation = image_orientation
        if num_settle_steps < 0:
            raise ValueError(f"num_settle_steps must be >= 0, got {num_settle_steps}")
        self.num_settle_steps = int(num_settle_steps)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be 'rgb_array' or None, got {render_mode!r}")
        self.render_mode = render_mode
        # the cameras rendered at every step, the others only when read (see ``frame``): as
        # requested, and in effect (the request applies at the next reset)
        self._requested = check_render_cameras(render_cameras, self.cameras)
        self._every_step = self.cameras
        self._capture: SceneCapture | None = None  # installed while some camera is on demand
        self._rendered: list[str] = []  # this step's image keys holding its frame (info's list)

        self._benchmark = load_suite(suite)
        self.task_id = resolve_task(self._benchmark, task_id, suite)
        self._task = self._benchmark.get_task(self.task_id)
        self.task_name: str = self._task.name
        self.task_description: str = self._task.language
        self._init_states: np.ndarray | None = None
        self._init_state_mode = check_init_state(init_state)
        self.init_state_ids = check_init_state_ids(init_state_ids)
        self.privileged_state = bool(privileged_state)
        self._goal_bodies: tuple[str, str] | None = None
        self._ordered_next = 0
        self._init_state_id = -1

        h, w = self.image_hw
        image_space = spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(
            {
                **{f"{alias}_image": image_space for alias in self.cameras},
                "state": spaces.Box(
                    -np.inf,
                    np.inf,
                    shape=(STATE_DIM + (GOAL_STATE_DIM if self.privileged_state else 0),),
                    dtype=np.float32,
                ),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(ACTION_DIM,), dtype=np.float32)
        self._sim_env: Any = None
        self._last_obs: dict[str, np.ndarray] | None = None

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, object]]:
        super().reset(seed=seed)
        sim_env = self._ensure_sim()
        init_state_id = self._choose_init_state(options, seed)
        self._reset_sim(init_state_id)
        raw = sim_env.set_init_state(self.init_states[init_state_id])
        if self.privileged_state:
            goal = pick_place_goal(sim_env.env)
            self._goal_bodies = (goal.obj, goal.target)
        for _ in range(self.num_settle_steps):
            raw, _, _, _ = sim_env.step(SETTLE_ACTION)
        self._init_state_id = init_state_id
        obs = self._convert_obs(raw)
        return obs, self._info(success=bool(sim_env.check_success()))

    def step(
        self, action: Any
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, object]]:
        if self._sim_env is None:
            raise RuntimeError("LiberoEnv.step() called before reset()")
        act = self._check_action(action)
        raw, _, _, _ = self._sim_env.step(act)
        success = bool(self._sim_env.check_success())
        obs = self._convert_obs(raw)
        return obs, float(success), success, False, self._info(success=success)

    def render(self) -> np.ndarray | None:
        if self.render_mode is None or self._last_obs is None:
            return None
        return self.frame(f"{self.cameras[0]}_image")

    def close(self) -> None:
        """Free the simulator and its GL context (idempotent)."""
        forget_at_exit(self)
        if self._sim_env is not None:
            try:
                self._sim_env.close()
            finally:
                self._sim_env = None
        super().close()

    # ------------------------------------------------------------------ rendering on demand
    @property
    def render_cameras(self) -> tuple[str, ...]:
        """The cameras rendered at every step from the next reset on (all of them unless some
        render on demand)."""
        return self._requested

    @render_cameras.setter
    def render_cameras(self, value: RenderCameras) -> None:
        """Change which cameras render at every step; takes effect at the next ``reset()``."""
        self._requested = check_render_cameras(value, self.cameras)

    @property
    def on_demand_keys(self) -> frozenset[str]:
        """The image keys whose frames are drawn only when read (through :meth:`frame`) in the
        current episode; empty when every camera renders at every step."""
        if self._capture is None:
            return frozenset()
        return frozenset(f"{c}_image" for c in self.cameras if c not in self._every_step)

    def frame(self, key: str) -> np.ndarray:
        """The latest observation's frame of camera ``key`` (e.g. ``"agentview_image"``).

        A camera rendered on demand is drawn now, from the scene recorded when robosuite would
        have rendered it, into the observation's entry (filled in place) and added to ``info``'s
        ``rendered_cameras``; later calls before the next step return the same array. Ask
        before the next ``step()``/``reset()``: only the latest scene is kept.
        """
        obs = self._last_obs
        if obs is None:
            raise RuntimeError("LiberoEnv.frame() called before reset()")
        if key not in obs or key == "state":
            images = [k for k in obs if k != "state"]
            raise KeyError(f"LiberoEnv.frame(): {key!r} is not an image key ({images})")
        if key not in self._rendered:
            assert self._capture is not None
            alias = key[: -len("_image")]
            obs[key][...] = self._orient(self._capture.draw(CAMERAS[alias]))
            self._rendered.append(key)
        return obs[key]

    def _install_capture(self) -> None:
        """Replace the camera sensors by scene captures (robosuite's hard reset leaves them)."""
        problem = self._ensure_sim().env
        if self._capture is None:
            self._capture = SceneCapture(lambda: self._sim_env.env, self.image_hw)
        for alias in self.cameras:
            name = CAMERAS[alias]
            problem.modify_observable(f"{name}_image", "sensor", self._capture.sensor(name))

    # ------------------------------------------------------------------ extras
    @property
    def init_states(self) -> np.ndarray:
        """The task's init states (``(50, D)`` for the standard suites)."""
        if self._init_states is None:
            self._init_states = np.asarray(self._benchmark.get_task_init_states(self.task_id))
        return self._init_states

    def scene_seed(self, init_state_id: int) -> int:
        """The seed LIBERO's placement samplers get when resetting to ``init_state_id``."""
        return zlib.crc32(f"{self.suite}/{self.task_name}/{int(init_state_id)}".encode())

    @property
    def num_init_states(self) -> int:
        return int(len(self.init_states))

    @property
    def sim(self) -> Any:
        """The underlying MuJoCo sim (robosuite ``MjSim``); built on first access."""
        return self._ensure_sim().sim

    @property
    def problem(self) -> Any:
        """The LIBERO task's robosuite environment (its objects, goal and robot); built on first
        access. The scripted expert reads the goal and the poses from it."""
        return self._ensure_sim().env

    def get_sim_state(self) -> np.ndarray:
        """The flattened MuJoCo state (restorable with :meth:`set_sim_state`)."""
        return np.asarray(self._ensure_sim().get_sim_state()).copy()

    def set_sim_state(self, state: np.ndarray) -> dict[str, np.ndarray]:
        """Restore a flattened MuJoCo state and return the observation rendered from it."""
        raw = self._ensure_sim().regenerate_obs_from_state(np.asarray(state))
        return self._convert_obs(raw)

    def refresh_observation(self) -> dict[str, np.ndarray]:
        """Re-render the observation after the sim was edited in place (``sim.forward()`` first)."""
        return self.set_sim_state(self.get_sim_state())

    def check_success(self) -> bool:
        return bool(self._ensure_sim().check_success())

    # ------------------------------------------------------------------ internals
    def _ensure_sim(self) -> Any:
        if self._sim_env is None:
            self._capture = None  # a new simulator renders every camera until its first reset
            self._sim_env = self._build_sim()
        return self._sim_env

    def _build_sim(self) -> Any:
        configure_process()
        check_not_forked()
        h, w = self.image_hw
        try:
            from libero.libero import get_libero_path
            from libero.libero.envs import OffScreenRenderEnv

            bddl = os.path.join(
                get_libero_path("bddl_files"), self._task.problem_folder, self._task.bddl_file
            )
            # Building runs a first reset; it draws from the global RNG like any other.
            with stdout_to_log(), seeded_global_rng(self.scene_seed(0)):
                sim_env = OffScreenRenderEnv(
                    bddl_file_name=bddl,
                    camera_names=[CAMERAS[c] for c in self.cameras],
                    camera_heights=h,
                    camera_widths=w,
                )
            claim_gl_context()
        except Exception as exc:  # GL failures surface as assorted exception types
            raise_setup_error(exc)
        close_at_exit(self)
        return sim_env

    def _reset_sim(self, init_state_id: int) -> None:
        """LIBERO's (hard) reset with its random draws made a function of the init state."""
        sim_env = self._ensure_sim()
        problem = sim_env.env
        rebuilds = problem.hard_reset and not problem.deterministic_reset
        if rebuilds and isinstance(getattr(problem, "object_property_initializers", None), list):
            problem.object_property_initializers.clear()
        self._every_step = self._requested
        on_demand = len(self._every_step) < len(self.cameras)
        # robosuite's reset re-creates the camera sensors (and renders them twice) unless told
        # that it has no camera observations; the capture sensors installed stay in place
        problem.use_camera_obs = self._capture is None or not on_demand
        try:
            with seeded_global_rng(self.scene_seed(init_state_id)):
                sim_env.reset()
        finally:
            problem.use_camera_obs = True
        if not on_demand:
            self._capture = None  # the reset put robosuite's rendering sensors back
        elif self._capture is None:
            self._install_capture()

    def _choose_init_state(self, options: dict[str, object] | None, seed: int | None = None) -> int:
        n = self.num_init_states
        requested = (options or {}).get("init_state_id", self._init_state_mode)
        if isinstance(requested, str):
            ids = self.init_state_ids or tuple(range(n))
            if max(ids) >= n:
                raise ValueError(f"init_state_ids {list(ids)} out of range: task has {n}")
            if requested == "by_seed" and seed is not None:
                return ids[int(seed) % len(ids)]
            if requested in ("random", "by_seed"):
                return ids[int(self.np_random.integers(len(ids)))]
            k = self._ordered_next
            self._ordered_next = (k + 1) % len(ids)
            return ids[k]
        if isinstance(requested, bool) or not isinstance(requested, int | np.integer):
            raise ValueError(f"init_state_id must be an int in [0, {n}), got {requested!r}")
        if not 0 <= int(requested) < n:
            raise ValueError(f"init_state_id {requested} out of range: task has {n} init states")
        return int(requested)

    def _check_action(self, action: Any) -> np.ndarray:
        try:
            act = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"action must be numeric with shape ({ACTION_DIM},): {exc}") from exc
        if act.shape != (ACTION_DIM,):
            raise ValueError(
                f"action must have shape ({ACTION_DIM},) (OSC_POSE delta + gripper), "
                f"got shape {act.shape}"
            )
        if not np.all(np.isfinite(act)):
            raise ValueError(f"action contains NaN or inf: {act.tolist()}")
        return np.clip(act, -1.0, 1.0)

    def _orient(self, image: np.ndarray) -> np.ndarray:
        if self.image_orientation == "upright":
            image = image[::-1]
        elif self.image_orientation == "rot180":
            image = image[::-1, ::-1]
        return np.ascontiguousarray(image, dtype=np.uint8)

    def _convert_obs(self, raw: dict[str, object]) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {}
        self._rendered = []  # a new list: the previous step's info keeps its own
        h, w = self.image_hw
        for alias in self.cameras:
            key = f"{alias}_image"
            if self._capture is None:
                obs[key] = self._orient(raw[f"{CAMERAS[alias]}_image"])
                self._rendered.append(key)
            else:  # drawn below when rendered at every step, else when read (``frame``)
                obs[key] = np.zeros((h, w, 3), np.uint8)
        obs["state"] = np.concatenate(
            [
                raw["robot0_eef_pos"],
                quat_to_axis_angle(raw["robot0_eef_quat"]),
                raw["robot0_gripper_qpos"],
                *self._goal_positions(),
            ]
        ).astype(np.float32)
        self._last_obs = obs
        if self._capture is not None:
            for alias in self._every_step:
                self.frame(f"{alias}_image")
        return obs

    def _goal_positions(self) -> list[np.ndarray]:
        """With ``privileged_state``: the world positions of the goal's object and target."""
        if not self.privileged_state or self._goal_bodies is None:
            return []
        problem = self._sim_env.env
        data, body = problem.sim.data, problem.obj_body_id
        return [
            np.asarray(data.body_xpos[body[name]], dtype=np.float64) for name in self._goal_bodies
        ]

    def _info(self, *, success: bool) -> dict[str, object]:
        return {
            "task_description": self.task_description,
            "task_name": self.task_name,
            "suite": self.suite,
            "task_id": self.task_id,
            "init_state_id": self._init_state_id,
            "is_success": success,
            RENDERED_CAMERAS: self._rendered,
        }


@contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
    """Run a block under ``np.random.seed(seed)``, then restore the global RNG's previous state.

    >>> import numpy as np
    >>> with seeded_global_rng(7):
    ...     a = np.random.uniform()
    >>> with seeded_global_rng(7):
    ...     b = np.random.uniform()
    >>> a == b
    True
    """
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """(x, y, z, w) quaternion → axis-angle 3-vector (robosuite's convention)."""
    x, y, z, w = (float(v) for v in quat)
    w = min(max(w, -1.0), 1.0)
    den = np.sqrt(max(1.0 - w * w, 0.0))
    if den < 1e-8:
        return np.zeros(3)
    return np.array([x, y, z]) * 2.0 * np.arccos(w) / den
