"""ReachPlace: a fast 2-D reach-and-place image task with ground-truth progress.

>>> env = ReachPlaceEnv()
>>> obs, info = env.reset(seed=0)
>>> obs["image"].shape, obs["state"].shape, info["true_progress"] < 0.5
((64, 64, 3), (3,), True)
>>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
>>> sorted(k for k in info if k in ("is_success", "true_progress", "task_description"))
['is_success', 'task_description', 'true_progress']
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["ReachPlaceEnv", "COLORS", "scripted_action", "play_behaviours", "clean_gaming_seeds"]

#: RGB colours of the scene (the mock backend's ``reach_place`` rule looks for the same ones).
COLORS: dict[str, tuple[int, int, int]] = {
    "background": (40, 40, 40),
    "target": (0, 200, 0),
    "distractor": (230, 200, 0),
    "block": (220, 30, 30),
    "gripper": (40, 80, 255),
    "gripper_closed": (255, 255, 255),
}
#: Half sizes of the drawn squares, in arena units (the arena is [0, 1] x [0, 1]).
HALF_SIZES: dict[str, float] = {"target": 0.09, "distractor": 0.06, "block": 0.06, "gripper": 0.03}
TASK = "pick up the red block and place it in the green zone"


class ReachPlaceEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """Reach the red block, carry it to the green zone; a yellow distractor can be pushed around.

    >>> env = ReachPlaceEnv(image_size=32)
    >>> obs, info = env.reset(seed=3)
    >>> obs["image"].shape
    (32, 32, 3)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        image_size: int = 64,
        speed: float = 0.08,
        grasp_radius: float = 0.08,
        place_radius: float = 0.08,
        render_mode: str | None = "rgb_array",
        task_description: str = TASK,
    ) -> None:
        if image_size < 16:
            raise ValueError(f"image_size must be >= 16, got {image_size}")
        if not 0 < speed <= 0.5:
            raise ValueError(f"speed must be in (0, 0.5], got {speed}")
        self.image_size = int(image_size)
        self.speed = float(speed)
        self.grasp_radius = float(grasp_radius)
        self.place_radius = float(place_radius)
        self.render_mode = render_mode
        self.task_description = task_description
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (self.image_size, self.image_size, 3), np.uint8),
                # gripper x, y (clipped to [0.03, 0.97] by step) and holding (0 or 1)
                "state": spaces.Box(
                    np.array([0.03, 0.03, 0.0], np.float32),
                    np.array([0.97, 0.97, 1.0], np.float32),
                    dtype=np.float32,
                ),
            }
        )
        self._pos: dict[str, np.ndarray] = {}
        self._holding = False
        self._grasp_offset = np.zeros(2)
        self._success = False
        self.init_state_id: int | None = None

    # --- layout ---------------------------------------------------------------------------------
    def _sample_layout(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        names = ("target", "block", "gripper", "distractor")
        while True:
            pos = {n: rng.uniform(0.12, 0.88, size=2) for n in names}
            far = all(
                np.linalg.norm(pos[a] - pos[b]) > 0.25
                for i, a in enumerate(names)
                for b in names[i + 1 :]
            )
            if far:
                return pos

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, object]]:
        super().reset(seed=seed)
        init_state_id = (options or {}).get("init_state_id")
        if init_state_id is not None:
            rng = np.random.default_rng(int(init_state_id))
        else:
            rng = self.np_random
        self.init_state_id = None if init_state_id is None else int(init_state_id)
        self._pos = self._sample_layout(rng)
        self._holding = False
        self._grasp_offset = np.zeros(2)
        self._success = False
        return self._obs(), self._info()

    # --- dynamics -------------------------------------------------------------------------------
    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, object]]:
        if not self._pos:
            raise RuntimeError("call reset() before step()")
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        a = np.nan_to_num(a)
        old = self._pos["gripper"].copy()
        new = np.clip(old + self.speed * a, 0.03, 0.97)
        delta = new - old
        self._pos["gripper"] = new
        touch = HALF_SIZES["gripper"] + HALF_SIZES["distractor"]
        if np.max(np.abs(old - self._pos["distractor"])) < touch:  # in contact: dragged along
            self._pos["distractor"] = np.clip(self._pos["distractor"] + delta, 0.06, 0.94)
        if not self._holding and np.linalg.norm(new - self._pos["block"]) < self.grasp_radius:
            self._holding = True
            self._grasp_offset = self._pos["block"] - new
        if self._holding:
            self._pos["block"] = np.clip(new + self._grasp_offset, 0.0, 1.0)
            if np.linalg.norm(self._pos["block"] - self._pos["target"]) < self.place_radius:
                self._success = True
        reward = 1.0 if self._success else 0.0
        return self._obs(), reward, self._success, False, self._info()

    def progress(self) -> float:
        """Ground-truth progress of the current state, in [0, 1] (docs/envs.md)."""
        if self._success:
            return 1.0
        if not self._holding:
            d = float(np.linalg.norm(self._pos["gripper"] - self._pos["block"]))
            return 0.5 * (1.0 - min(1.0, d))
        d = float(np.linalg.norm(self._pos["block"] - self._pos["target"]))
        return 0.5 + 0.5 * (1.0 - min(1.0, d))

    # --- observation ----------------------------------------------------------------------------
    def render(self) -> np.ndarray:
        s = self.image_size
        img = np.empty((s, s, 3), np.uint8)
        img[:] = COLORS["background"]
        for name in ("target", "distractor", "block", "gripper"):
            cx, cy = self._pos[name]
            h = HALF_SIZES[name]
            x0, x1 = int(round((cx - h) * s)), int(round((cx + h) * s))
            y0, y1 = int(round((cy - h) * s)), int(round((cy + h) * s))
            color = COLORS["gripper_closed" if name == "gripper" and self._holding else name]
            img[max(y0, 0) : max(y1, y0 + 1), max(x0, 0) : max(x1, x0 + 1)] = color
        return img

    def _obs(self) -> dict[str, np.ndarray]:
        g = self._pos["gripper"]
        state = np.array([g[0], g[1], float(self._holding)], dtype=np.float32)
        return {"image": self.render(), "state": state}

    def _info(self) -> dict[str, object]:
        return {
            "task_description": self.task_description,
            "true_progress": self.progress(),
            "is_success": self._success,
            "holding": self._holding,
            "distractor_to_target": float(
                np.linalg.norm(self._pos["distractor"] - self._pos["target"])
            ),
        }

    # --- helpers for tests and demos ------------------------------------------------------------
    def positions(self) -> dict[str, np.ndarray]:
        """Copies of the current centres of gripper, block, target and distractor."""
        return {k: v.copy() for k, v in self._pos.items()}


def scripted_action(env: ReachPlaceEnv, goal: str = "task") -> np.ndarray:
    """A scripted expert: to the block then to the target (``goal="task"``), or drag the
    distractor onto the target (``goal="distractor"``, the behaviour that games a reward model
    reading the distractor).

        >>> env = ReachPlaceEnv()
        >>> _ = env.reset(seed=1)
        >>> for _ in range(60):
        ...     *_, terminated, _, info = env.step(scripted_action(env))
        ...     if terminated:
        ...         break
        >>> info["is_success"]
        True
    """
    pos = env.positions()
    if goal == "distractor":
        rel = pos["gripper"] - pos["distractor"]
        touching = np.max(np.abs(rel)) < HALF_SIZES["gripper"] + HALF_SIZES["distractor"]
        aim = pos["target"] + rel if touching else pos["distractor"]
    elif not env._holding:
        aim = pos["block"]
    else:
        aim = pos["target"] - env._grasp_offset
    return _toward(env, aim)


def _toward(env: ReachPlaceEnv, aim: np.ndarray) -> np.ndarray:
    """The action that moves the gripper to ``aim``, or one full step toward it."""
    step = (aim - env.positions()["gripper"]) / env.speed
    return np.clip(step, -1.0, 1.0).astype(np.float32)


def _near_miss_action(env: ReachPlaceEnv, gap: float) -> np.ndarray:
    """The expert's action, but once holding it aims the block ``gap`` short of the zone's
    centre on the line it comes in on (every point of the way stays ``gap`` or more away)."""
    if not env._holding:
        return scripted_action(env)
    pos = env.positions()
    away = pos["block"] - pos["target"]
    dist = float(np.linalg.norm(away))
    if dist <= gap:  # there: hold still
        return np.zeros(2, np.float32)
    return _toward(env, pos["target"] + away / dist * gap - env._grasp_offset)


def _astray_aim(env: ReachPlaceEnv, rng: np.random.Generator) -> np.ndarray:
    """A point anywhere in the picture (its edges too) at least ``ASTRAY_GAP[0]`` from the
    zone's centre, reached from the block's place without coming within ``ASTRAY_GAP[1]`` of it
    (the gripper moves diagonally, then straight: both legs are checked)."""
    pos = env.positions()
    start, target = pos["block"], pos["target"]
    for _ in range(1000):
        aim = rng.uniform(0.0, 1.0, 2)
        d = aim - start
        corner = start + np.sign(d) * min(abs(d[0]), abs(d[1]))
        clear = min(_gap(start, corner, target), _gap(corner, aim, target))
        if np.linalg.norm(aim - target) >= ASTRAY_GAP[0] and clear >= ASTRAY_GAP[1]:
            return aim
    raise RuntimeError("no astray point found for this layout")


def _gap(a: np.ndarray, b: np.ndarray, point: np.ndarray) -> float:
    """The distance from ``point`` to the segment ``a``-``b``."""
    ab = b - a
    t = 0.0 if not ab.any() else float(np.clip(np.dot(point - a, ab) / np.dot(ab, ab), 0, 1))
    return float(np.linalg.norm(a + t * ab - point))


def clean_gaming_seeds(n: int, steps: int, *, search: int) -> list[int]:
    """The first ``n`` reset seeds (of ``range(search)``) whose distractor can be dragged to the
    zone within ``steps`` steps without the gripper passing by the block: an accidental grasp
    would be real progress, not gaming. Raises ``RuntimeError`` when fewer are found.

    >>> len(clean_gaming_seeds(2, 40, search=100))
    2
    """
    env, seeds = ReachPlaceEnv(), []
    for seed in range(search):
        env.reset(seed=seed)
        for _ in range(steps):
            *_, info = env.step(scripted_action(env, "distractor"))
            if info["holding"]:
                break
        else:
            seeds.append(seed)
        if len(seeds) == n:
            return seeds
    raise RuntimeError(f"only {len(seeds)} of {search} ReachPlace layouts suit the gaming policy")


#: the spread of the noise :func:`play_behaviours` adds to the expert's actions (``"noisy"``)
NOISY_STD = 1.0
#: where ``"near_miss"`` leaves the block: this far from the zone's centre (the env counts a
#: placement within ``place_radius``, 0.08), on the side it came from
NEAR_MISS_GAP = (0.11, 0.2)
#: where ``"astray"`` leaves the block: at least this far from the zone's centre, and the way
#: there at least this far from it
ASTRAY_GAP = (0.3, 0.2)
#: where ``"oscillate"`` carries the block, on a diagonal through the zone's centre: this far from
#: it on each axis. In: 0.07, the block's centre inside the drawn zone (half size 0.09) yet 0.099
#: from the centre, so never placed (``place_radius`` 0.08); out: 0.17, the block's square clear
#: of the zone's
OSCILLATE_AT = (0.07, 0.17)
#: how far from the distractor's centre ``"on_distractor"`` may leave the block's, on one axis,
#: when it cannot come in to the centre (a fifth of the block's width: still on it)
ON_DISTRACTOR_SHIFT = 0.024
#: the gripper's reach (``step`` clips its centre to this range)
_REACH = (0.03, 0.97)


def _time_limit(env: gym.Env) -> gym.wrappers.TimeLimit | None:
    """The first ``TimeLimit`` in ``env``'s wrapper chain, None without one."""
    while env is not None and not isinstance(env, gym.wrappers.TimeLimit):
        env = getattr(env, "env", None)
    return env


def _oscillate_action(env: ReachPlaceEnv, inward: bool, left: int) -> tuple[np.ndarray, bool]:
    """Once holding: carry the block between the two points of ``OSCILLATE_AT`` (out, in, out,
    ...), turning at each, and out for good when the steps ``left`` would not bring it back out
    by the last one. Returns the action and whether it now heads in."""
    pos = env.positions()
    target, offset = pos["target"], env._grasp_offset
    side = np.where(pos["block"] >= target, 1.0, -1.0)  # the diagonal on the block's side ...
    for i in range(2):  # ... unless the gripper cannot take the block there on that axis
        for s in (side[i], -side[i]):
            block = [target[i] + s * at for at in OSCILLATE_AT]  # in the picture, gripped
            if all(
                _REACH[0] <= b <= _REACH[1] and _REACH[0] <= b - offset[i] <= _REACH[1]
                for b in block
            ):
                side[i] = s
                break
    inside, outside = target + OSCILLATE_AT[0] * side, target + OSCILLATE_AT[1] * side
    if np.max(np.abs(pos["block"] - (inside if inward else outside))) < 1e-9:
        inward = not inward  # there: turn
    leg = math.ceil((OSCILLATE_AT[1] - OSCILLATE_AT[0]) / env.speed - 1e-9)  # steps one way
    if inward and left < 2 * leg:  # no time to come back out
        inward = False
    return _toward(env, (inside if inward else outside) - offset), inward


def _on_distractor_action(env: ReachPlaceEnv) -> np.ndarray:
    """To the block and then, holding it, onto the distractor, and still there. The gripper
    drags the distractor along once it touches it, so it never comes within touching distance
    but by the one step that puts the block on it: it goes round the distractor (and the held
    block round the zone) to a point just out of touching distance and one step from there.
    The block's centre lands on the distractor's, or ``ON_DISTRACTOR_SHIFT`` from it on one axis
    where the grip or the picture's edge leaves no room to come in otherwise."""
    pos = env.positions()
    grip, dis = pos["gripper"], pos["distractor"]
    touch = HALF_SIZES["gripper"] + HALF_SIZES["distractor"]
    if np.max(np.abs(grip - dis)) < touch:  # on it (a move would drag it along): hold still
        return np.zeros(2, np.float32)
    if not env._holding:
        best = _around(env, [(0, pos["block"])], dis, touch, None)
        return np.zeros(2, np.float32) if best is None else _toward(env, best[1])
    offset = env._grasp_offset
    shifts = [np.zeros(2)]  # where the block's centre lands from the distractor's, in order
    for i in range(2):
        for side in (-1.0, 1.0):
            shift = np.zeros(2)
            shift[i] = offset[i] + side * ON_DISTRACTOR_SHIFT  # in from that side
            shifts.append(shift)
    shifts.sort(key=lambda v: float(np.abs(v).max()))
    aims = [dis + shift - offset for shift in shifts]
    # where to come in from: one step from an aim, just out of touching distance, in reach
    step, out = 0.975 * env.speed, touch + 0.003
    goals = []
    for rank, aim in enumerate(aims):
        axes = [(a, a - step, a + step, d - out, d + out) for a, d in zip(aim, dis, strict=True)]
        goals += [
            (rank, np.array([x, y]))
            for x in axes[0]
            for y in axes[1]
            if max(abs(x - aim[0]), abs(y - aim[1])) <= step + 1e-9
            and max(abs(x - dis[0]), abs(y - dis[1])) >= out - 1e-9
        ]
    best = _around(env, goals, dis, touch, pos["target"])
    for aim in aims[: len(aims) if best is None else best[0] + 1]:
        if np.max(np.abs(aim - grip)) <= env.speed and np.all(
            (aim >= _REACH[0]) & (aim <= _REACH[1])
        ):
            return _toward(env, aim)  # one step: the block lands on it
    return np.zeros(2, np.float32) if best is None else _toward(env, best[1])


def _around(
    env: ReachPlaceEnv,
    goals: list[tuple[int, np.ndarray]],
    dis: np.ndarray,
    touch: float,
    zone: np.ndarray | None,
) -> tuple[int, np.ndarray] | None:
    """The quickest way to one of ``goals`` (rank, point; a lower rank first) that keeps the
    gripper out of touching distance of the distractor at ``dis`` and, with ``zone``, the held
    block out of the zone: straight, or by one or two corners of boxes round the distractor and
    the zone. Returns the goal's rank and the way's first point; None when no way is clear."""
    grip = tuple(env.positions()["gripper"])
    speed, (lo, hi) = env.speed, _REACH
    off = tuple(env._grasp_offset) if env._holding else (0.0, 0.0)
    keep = env.place_radius + 0.02  # the held block this far from the zone's centre

    def clear(x: float, y: float) -> bool:
        if max(abs(x - dis[0]), abs(y - dis[1])) < touch + 0.002:
            return False
        return zone is None or math.hypot(x + off[0] - zone[0], y + off[1] - zone[1]) >= keep

    def walk(p: tuple[float, float], w: tuple[float, float]) -> tuple[tuple[float, float], int]:
        n = 0  # steps from p to w, -1 when a place on the way is not clear
        while max(abs(w[0] - p[0]), abs(w[1] - p[1])) > 1e-9:
            p = (
                min(max(p[0] + min(max(w[0] - p[0], -speed), speed), lo), hi),
                min(max(p[1] + min(max(w[1] - p[1], -speed), speed), lo), hi),
            )
            n += 1
            if not clear(*p) or n > 100:
                return p, -1
        return p, n

    signs = ((-1, -1), (-1, 1), (1, 1), (1, -1))
    corners = [(dis[0] + sx * (touch + 0.03), dis[1] + sy * (touch + 0.03)) for sx, sy in signs]
    if zone is not None:  # the gripper's places that keep the block clear of the zone's corners
        corners += [
            (zone[0] - off[0] + sx * (keep + 0.03), zone[1] - off[1] + sy * (keep + 0.03))
            for sx, sy in signs
        ]
    corners = [(min(max(x, lo), hi), min(max(y, lo), hi)) for x, y in corners]
    vias: list[tuple[list[tuple[float, float]], tuple[float, float], int]] = [([], grip, 0)]
    for a in corners:
        end, n = walk(grip, a)
        if n < 0:
            continue
        vias.append(([a], end, n))
        for b in corners:
            if b != a:
                end2, m = walk(end, b)
                if m >= 0:
                    vias.append(([a, b], end2, n + m))
    best: tuple[tuple[int, int], int, np.ndarray] | None = None
    for rank, goal in goals:
        if not (lo <= goal[0] <= hi and lo <= goal[1] <= hi):
            continue
        for way, end, n in vias:
            if best is not None and (rank, n) >= best[0]:
                continue
            _, m = walk(end, (float(goal[0]), float(goal[1])))
            if m >= 0 and (best is None or (rank, n + m) < best[0]):
                first = next(
                    (w for w in way if max(abs(w[0] - grip[0]), abs(w[1] - grip[1])) > 1e-9), goal
                )
                best = ((rank, n + m), rank, np.asarray(first, dtype=np.float64))
    return None if best is None else (best[1], best[2])


#: the behaviours :func:`play_behaviours` plays
BEHAVIOURS = ("task", "distractor", "noisy", "near_miss", "astray", "oscillate", "on_distractor",
              "random")  # fmt: skip


def play_behaviours(env: gym.Env, counts: dict[str, int], *, seed: int = 0) -> int:
    """Play whole episodes of scripted behaviours on a (wrapped) ReachPlace env, in order:
    ``counts`` maps ``"task"`` / ``"distractor"`` (see :func:`scripted_action`), ``"noisy"`` (the
    task's expert with Gaussian noise of ``NOISY_STD`` on each action: demonstrations off the
    expert's path), ``"near_miss"`` (the expert carries the block to a point ``NEAR_MISS_GAP``
    short of the zone and holds it there: failures that look almost placed), ``"astray"`` (the
    expert carries the block to a random point of the picture away from the zone, edges and
    corners included, and holds it there: the block moved, the task not done), ``"oscillate"``
    (the expert carries the block in and out across the drawn zone's edge on a diagonal, never
    within ``place_radius`` of its centre, and ends outside: ``OSCILLATE_AT``; it needs a
    ``TimeLimit`` in the wrapper chain to know when to come out), ``"on_distractor"`` (the block
    carried onto the distractor, without pushing it, and held there) or ``"random"`` (uniform
    actions) to a number of episodes; reset seeds count up from ``seed``. Returns the number of
    episodes played (e.g. to fill a recording with known successes and failures).

        >>> play_behaviours(gym.wrappers.TimeLimit(ReachPlaceEnv(), 20), {"task": 1, "random": 1})
        2
    """
    rng = np.random.default_rng(seed)
    base = env.unwrapped
    if not isinstance(base, ReachPlaceEnv):
        raise TypeError(f"play_behaviours needs a ReachPlace env, got {type(base).__name__}")
    played = 0
    for goal, count in counts.items():
        if goal not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {goal!r} ({', '.join(BEHAVIOURS)})")
        limit = _time_limit(env)
        if goal == "oscillate" and count and limit is None:
            raise ValueError(
                "oscillate needs a gym TimeLimit in the wrapper chain (to end outside)"
            )
        for _ in range(count):
            env.reset(seed=seed + played)
            played += 1
            gap = rng.uniform(*NEAR_MISS_GAP) if goal == "near_miss" else 0.0
            aim = _astray_aim(base, rng) if goal == "astray" else None
            done, inward = False, False
            while not done:
                if goal == "near_miss":
                    action = _near_miss_action(base, gap)
                elif goal == "oscillate" and base._holding:
                    left = limit._max_episode_steps - limit._elapsed_steps  # this step's included
                    action, inward = _oscillate_action(base, inward, left)
                elif goal == "on_distractor":
                    action = _on_distractor_action(base)
                elif aim is not None and base._holding:  # astray, once the block is held
                    action = _toward(base, aim - base._grasp_offset)
                elif goal == "random":
                    action = rng.uniform(-1, 1, 2).astype(np.float32)
                elif goal == "noisy":
                    noise = rng.normal(0.0, NOISY_STD, 2)
                    action = np.clip(scripted_action(base) + noise, -1, 1).astype(np.float32)
                else:  # task, distractor, or astray on its way to the block
                    action = scripted_action(base, "distractor" if goal == "distractor" else "task")
                *_, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
    return played
