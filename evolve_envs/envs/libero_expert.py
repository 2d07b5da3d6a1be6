"""A scripted pick-and-place expert for LIBERO, and the fixed rules that make its failures.

The expert reads the simulator's state (the goal object's and the receptacle's poses, the
gripper's site) and drives LIBERO's own controller (robosuite's ``OSC_POSE``: a position delta of
at most 5 cm a step, a rotation delta, the gripper) through six phases: above the object, down to
it (turning the gripper across a box that is wider than its opening), close, lift, carry over the
receptacle, lower and open. It needs no demonstrations and no download; it covers a task whose
goal is one ``In`` or ``On`` predicate between a movable object and a receptacle (every task of
LIBERO-Object; :func:`pick_place_goal` refuses the others in one line).

**Failures** come from rules fixed before any policy was trained on a reward fitted from them
(they are not shaped after what RL exploits). Each is the expert's motion with one thing wrong,
or none of it:

==================  ===========================================================================
``wrong_object``    the expert's motion on a distractor (one of the task's other movable objects,
                    drawn by the seed), placed in the receptacle
``near_miss``       the right object carried to 12-18 cm beside the receptacle (the direction drawn
                    by the seed) and released there at the same height
``drop``            the right object released mid-carry, 20-80 % of the way (drawn by the seed)
``stall``           the right object grasped and lifted, then held still above its start
``random``          uniform random actions in [-1, 1] for every dimension
==================  ===========================================================================

The env's success flag, not the rule's name, says whether an episode succeeded: a near miss
that still lands in the basket is recorded as a success.

Example (the rules, without a simulator):
    >>> BEHAVIOURS
    ('expert', 'wrong_object', 'near_miss', 'drop', 'stall', 'random')
    >>> ScriptedExpert("near_miss", seed=3).behaviour
    'near_miss'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "BEHAVIOURS",
    "GOAL_STATE_DIM",
    "Behaviour",
    "PickPlaceGoal",
    "ScriptedExpert",
    "pick_place_goal",
]

Behaviour = Literal["expert", "wrong_object", "near_miss", "drop", "stall", "random"]
BEHAVIOURS: tuple[Behaviour, ...] = (
    "expert",
    "wrong_object",
    "near_miss",
    "drop",
    "stall",
    "random",
)

_STEP_M = 0.05  # OSC_POSE: an action of 1 moves the hand 5 cm
_ROT_RAD = 0.5  # and turns it 0.5 rad
_CARRY_Z = 0.28  # hand height while carrying (m, world frame)
_CARRY_SPEED = 0.5  # the largest position action with an object in hand
_GRIPPER_HALF_OPENING = 0.03  # a box wider than this either way is gripped across its narrow side


#: Floats ``LiberoEnv(privileged_state=True)`` appends to the state: the goal object's and the
#: target's world positions.
GOAL_STATE_DIM = 6


@dataclass(frozen=True)
class PickPlaceGoal:
    """A task's goal as the expert reads it: move body ``obj`` ``relation`` body ``target``."""

    obj: str
    target: str
    relation: Literal["in", "on"]


def pick_place_goal(problem: object) -> PickPlaceGoal:
    """The one ``In``/``On`` predicate of a LIBERO problem's goal, as body names.

    ``problem`` is the robosuite environment of a LIBERO task (``LiberoEnv.problem``). A region
    (``basket_1_contain_region``) names the object it belongs to (``basket_1``). Raises
    ``ValueError`` for a goal the expert cannot do (several predicates, another relation).
    """
    goal = list(getattr(problem, "parsed_problem", {}).get("goal_state", []))
    bodies = dict(getattr(problem, "obj_body_id", {}))
    if len(goal) != 1 or str(goal[0][0]).lower() not in ("in", "on") or len(goal[0]) != 3:
        raise ValueError(f"the scripted expert does one In/On goal; this task's goal is {goal}")
    relation, obj, where = (str(x).lower() if i == 0 else str(x) for i, x in enumerate(goal[0]))
    target = where if where in bodies else next((b for b in bodies if where.startswith(b)), None)
    if obj not in bodies or target is None:
        raise ValueError(f"the scripted expert cannot find the bodies of the goal {goal[0]}")
    return PickPlaceGoal(obj, target, "in" if relation == "in" else "on")


class ScriptedExpert:
    """Pick-and-place from the simulator's state through LIBERO's ``OSC_POSE`` controller.

    ``behaviour``: ``"expert"`` or one of the failure rules (module docstring); ``seed`` draws
    what a rule leaves open (the distractor, the miss's direction, where the drop happens) and
    the random actions. Call :meth:`reset` after each ``env.reset`` and :meth:`act` before each
    step; ``phase`` names what it is doing.

    Example (needs the simulator, so skipped here; tests/envs/test_libero_expert.py runs it):
        >>> from evolve_envs.envs.libero import LiberoEnv  # doctest: +SKIP
        >>> env = LiberoEnv("libero_object", 0, render_cameras="on_demand")  # doctest: +SKIP
        >>> _ = env.reset(seed=0, options={"init_state_id": 0})  # doctest: +SKIP
        >>> expert = ScriptedExpert()  # doctest: +SKIP
        >>> expert.reset(env)  # doctest: +SKIP
        >>> for _ in range(280):  # doctest: +SKIP
        ...     if env.step(expert.act(env))[2]:
        ...         break
        >>> env.check_success()  # doctest: +SKIP
        True
    """

    def __init__(self, behaviour: Behaviour = "expert", *, seed: int = 0, gain: float = 3.0):
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour must be one of {', '.join(BEHAVIOURS)}: {behaviour!r}")
        self.behaviour: Behaviour = behaviour
        self.seed = int(seed)
        self.gain = float(gain)
        self.phase = "above"
        self._rng = np.random.default_rng(self.seed)
        self._t = 0
        self._goal: PickPlaceGoal | None = None
        self._obj = ""
        self._start_xy = np.zeros(2)
        self._miss = np.zeros(2)
        self._drop_at = 1.0
        self._hand_xy = self._carry_start = self._carry_end = np.zeros(2)

    # ------------------------------------------------------------------ episode
    def reset(self, env: object) -> None:
        """Read the new episode's goal and draw what the behaviour leaves open."""
        problem = _problem(env)
        self._rng = np.random.default_rng(self.seed)
        self._goal = goal = pick_place_goal(problem)
        self._obj = goal.obj
        if self.behaviour == "wrong_object":
            bodies = dict(problem.obj_body_id)
            fixtures = set(getattr(problem, "fixtures_dict", {}) or {})
            others = sorted(b for b in bodies if b not in (goal.obj, goal.target, *fixtures))
            if not others:
                raise ValueError("wrong_object: this task has no other movable object")
            self._obj = others[int(self._rng.integers(len(others)))]
        angle = self._rng.uniform(0, 2 * np.pi)
        self._miss = self._rng.uniform(0.12, 0.18) * np.array([np.cos(angle), np.sin(angle)])
        self._drop_at = float(self._rng.uniform(0.2, 0.8))
        self._start_xy = self._body(problem, self._obj)[:2].copy()
        self.phase, self._t = "above", 0

    def act(self, env: object) -> np.ndarray:
        """The next action (7 floats in [-1, 1]) for the env's current state."""
        if self._goal is None:
            raise RuntimeError("ScriptedExpert.act() called before reset(env)")
        if self.behaviour == "random":
            return self._rng.uniform(-1.0, 1.0, 7).astype(np.float32)
        problem = _problem(env)
        hand = self._hand(problem)
        obj = self._body(problem, self._obj)
        goal = self._body(problem, self._goal.target)
        if self.behaviour == "near_miss":
            goal = goal + np.array([*self._miss, 0.0])
        target, grip, yaw = self._plan(problem, hand, obj, goal)
        self._t += 1
        action = np.zeros(7, dtype=np.float32)
        # an object in hand goes at half speed: a full-speed start shakes it out of the fingers
        speed = _CARRY_SPEED if self.phase in ("lift", "carry", "lower", "hold") else 1.0
        action[:3] = np.clip((target - hand) / _STEP_M * self.gain, -speed, speed)
        action[5] = np.clip(yaw / _ROT_RAD * 2.0, -1.0, 1.0)
        action[6] = grip
        return action

    # ------------------------------------------------------------------ the phases
    def _plan(
        self, problem: object, hand: np.ndarray, obj: np.ndarray, goal: np.ndarray
    ) -> tuple[np.ndarray, float, float]:
        """(hand target, gripper -1 open / 1 closed, yaw error) for this step; moves the phase."""
        grasp_z = _grasp_height(problem, self._obj, obj)
        phase, t = self.phase, self._t
        if phase == "above":
            target, yaw = np.array([obj[0], obj[1], grasp_z + 0.10]), self._yaw_error(problem)
            if np.linalg.norm(target - hand) < 0.01 and abs(yaw) < 0.05:
                self._next("descend")
            return target, -1.0, yaw
        if phase == "descend":
            target, yaw = np.array([obj[0], obj[1], grasp_z]), self._yaw_error(problem)
            if np.linalg.norm(target - hand) < 0.008 or t > 40:
                self._next("close")
            return target, -1.0, yaw
        if phase == "close":
            if t >= 15:
                self._next("lift")
            return hand.copy(), 1.0, 0.0
        if phase == "lift":  # slowly off the table, then up
            if hand[2] > _CARRY_Z - 0.03:
                self._next("hold" if self.behaviour == "stall" else "carry")
            rise = 0.01 if t < 8 else _CARRY_Z + 0.02 - hand[2]
            return np.array([hand[0], hand[1], hand[2] + rise]), 1.0, 0.0
        if phase == "hold":  # stall: still, above where the object started
            return np.array([*self._start_xy, _CARRY_Z]), 1.0, 0.0
        if phase == "carry":
            target = np.array([goal[0], goal[1], _CARRY_Z])
            if self.behaviour == "drop" and self._carried() >= self._drop_at:
                self._next("release")
            elif np.linalg.norm(target[:2] - hand[:2]) < 0.01:
                self._next("lower")
            return target, 1.0, 0.0
        if phase == "lower":
            above = 0.10
            target = np.array([goal[0], goal[1], goal[2] + above])
            if abs(target[2] - hand[2]) < 0.01 or t > 30:
                self._next("release")
            return target, 1.0, 0.0
        if phase == "release":
            if t > 25:
                self._next("retreat")
            return hand.copy(), -1.0, 0.0
        return np.array([hand[0], hand[1], 0.35]), -1.0, 0.0  # retreat

    def _next(self, phase: str) -> None:
        self.phase, self._t = phase, 0

    def _carried(self) -> float:
        """How far along the carry the hand is (0 at the lift, 1 over the receptacle)."""
        start, now, end = self._carry_start, self._hand_xy, self._carry_end
        span = float(np.linalg.norm(end - start))
        return 1.0 if span < 1e-6 else float(np.linalg.norm(now - start)) / span

    # ------------------------------------------------------------------ reading the sim
    def _hand(self, problem: object) -> np.ndarray:
        site = problem.robots[0].eef_site_id
        hand = np.array(problem.sim.data.site_xpos[site], dtype=np.float64)
        self._hand_xy = hand[:2].copy()
        if self.phase != "carry":
            self._carry_start = hand[:2].copy()
        if self._goal is not None:
            self._carry_end = self._body(problem, self._goal.target)[:2]
        return hand

    @staticmethod
    def _body(problem: object, name: str) -> np.ndarray:
        return np.array(problem.sim.data.body_xpos[problem.obj_body_id[name]], dtype=np.float64)

    def _yaw_error(self, problem: object) -> float:
        """Radians to turn the hand so its fingers close across the object's narrow side (0 for
        an object the open gripper spans either way); the gripper is symmetric under a half
        turn, so the error lies in [-pi/2, pi/2)."""
        across = _narrow_axis(problem, problem.obj_body_id[self._obj])
        if across is None:
            return 0.0
        site = problem.robots[0].eef_site_id
        fingers = np.asarray(problem.sim.data.site_xmat[site]).reshape(3, 3)[:, 1]
        error = np.arctan2(across[1], across[0]) - np.arctan2(fingers[1], fingers[0])
        return float((error + np.pi / 2) % np.pi - np.pi / 2)


def _narrow_axis(problem: object, body: int) -> np.ndarray | None:
    """The world direction of the narrow horizontal side of a body's largest collision box, when
    its wide side is wider than the open gripper; else ``None``."""
    model, data = problem.sim.model, problem.sim.data
    boxes = [
        g
        for g in range(model.ngeom)
        if model.geom_bodyid[g] == body and model.geom_type[g] == 6 and model.geom_contype[g]
    ]
    if not boxes:
        return None
    box = max(boxes, key=lambda g: float(np.prod(model.geom_size[g])))
    axes = np.asarray(data.geom_xmat[box]).reshape(3, 3)
    size = model.geom_size[box]
    flat = sorted(
        ((float(size[i]), axes[:, i]) for i in range(3) if abs(axes[2, i]) < 0.7),
        key=lambda side: side[0],
    )
    if len(flat) < 2 or flat[-1][0] < _GRIPPER_HALF_OPENING:
        return None
    return flat[0][1]


def _grasp_height(problem: object, name: str, position: np.ndarray) -> float:
    """Where the hand closes on an object (world z): 2.5 cm below its top, and at least 8 mm
    above its bottom. A collision box gives the top and bottom as the object lies now (a box on
    its side is lower than its upright ``top_offset``); a mesh-only object, ``top_offset``."""
    model, data = problem.sim.model, problem.sim.data
    body = problem.obj_body_id[name]
    tops, bottoms = [], []
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == body and model.geom_type[g] == 6 and model.geom_contype[g]:
            axes = np.asarray(data.geom_xmat[g]).reshape(3, 3)
            half = float(np.abs(axes[2]) @ model.geom_size[g])
            tops.append(float(data.geom_xpos[g][2]) + half)
            bottoms.append(float(data.geom_xpos[g][2]) - half)
    if not tops:
        obj = problem.objects_dict[name]
        tops = [position[2] + float(np.asarray(obj.top_offset)[2])]
        bottoms = [position[2] + float(np.asarray(obj.bottom_offset)[2])]
    return max(max(tops) - 0.025, min(bottoms) + 0.008)


def _problem(env: object) -> object:
    """The robosuite environment of a LIBERO task under ``env`` (wrappers unwrapped)."""
    base = getattr(env, "unwrapped", env)
    problem = getattr(base, "problem", None)
    if problem is None:
        raise TypeError(f"the scripted expert drives a LiberoEnv, not {type(base).__name__}")
    return problem
