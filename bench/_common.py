"""Shared pieces of the benchmark scripts: a textured synthetic env, interleaved timing, tables.

Every benchmark measures its configurations side by side in one run, in *rounds*: each round runs
every configuration once (the order reverses every other round so slow drifts of a shared machine
hit all configurations alike), and results are reported as medians over rounds and as medians of
per-round *ratios* against a baseline measured in the same round.

Example::

    from _common import BenchEnv, Rounds, print_table

    rounds = Rounds(["bare", "wrapped"], repeats=3)
    for name in rounds:                      # bare, wrapped, wrapped, bare, bare, wrapped
        rounds.record(name, run(name))       # seconds (or any "smaller is better" number)
    rounds.median("wrapped"), rounds.ratio("wrapped", "bare")
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # scripts run as `python bench/pN_name.py` from the checkout
    sys.path.insert(0, str(ROOT))

__all__ = [
    "ROOT",
    "BenchEnv",
    "scene_frames",
    "Rounds",
    "median",
    "percentile",
    "print_table",
    "machine_note",
    "TASK",
    "StackSwitch",
    "make_switch",
    "LoadResult",
    "closed_loop",
    "LoadLog",
    "load_samples",
    "load_summary",
]

TASK = "put the black bowl on the plate"


# ---------------------------------------------------------------------------- frames


def scene_frames(n: int, size: int = 256, seed: int = 0) -> list[np.ndarray]:
    """``n`` LIBERO-like RGB uint8 frames: a wall gradient, a textured table, coloured objects and
    a grey "arm" that moves from frame to frame, plus mild sensor noise.

    Uniform frames would make JPEG look unrealistically cheap and small; these compress to sizes
    close to real LIBERO agentview frames (see P3).
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    wall = np.stack([150 + 60 * yy, 160 + 50 * yy, 175 + 40 * yy], axis=-1)
    wood = 110 + 25 * np.sin(40 * xx + 6 * np.sin(9 * yy)) + 10 * np.sin(170 * yy)
    table = np.stack([wood * 1.15, wood * 0.85, wood * 0.55], axis=-1)
    base = np.where((yy > 0.45)[..., None], table, wall)
    objects = [
        (
            rng.uniform(0.5, 0.9),
            rng.uniform(0.1, 0.9),
            rng.uniform(0.05, 0.12),
            rng.uniform(0, 255, 3),
        )
        for _ in range(5)
    ]
    frames = []
    for k in range(n):
        img = base.copy()
        for cy, cx, r, colour in objects:
            mask = (yy - cy) ** 2 + ((xx - cx) * 1.4) ** 2 < r**2
            shade = 0.75 + 0.25 * (1 - (yy - cy) / (2 * r))
            img[mask] = colour * shade[mask][:, None]
        # the arm: a shaded bar sweeping with k
        ax = 0.2 + 0.6 * (0.5 + 0.5 * np.sin(k / 5.0))
        reach = 0.2 + 0.5 * (0.5 + 0.5 * np.cos(k / 7.0))
        arm = (np.abs(xx - ax - 0.3 * (yy - 0.2)) < 0.04) & (yy < reach)
        img[arm] = (90 + 80 * xx[arm])[:, None]
        img += rng.normal(0, 2.0, img.shape)
        frames.append(np.clip(img, 0, 255).astype(np.uint8))
    return frames


class BenchEnv(gym.Env):
    """A LIBERO-shaped env with textured ``size``² frames and a fixed step time (``time.sleep``).

    Observations: ``{"agentview_image": HxWx3 uint8, "state": float32[8]}``; ``info`` has
    ``task_description`` and ``is_success`` (always false). Episodes never end on their own (use a
    time limit). Frames cycle through a precomputed bank, so producing one costs only a copy.

    Args:
        size: frame side in pixels.
        step_delay_s: seconds each ``step`` sleeps (the simulator's step time).
        bank: number of distinct frames.
        **ignored: other ``env`` keys from a stack config.

    Example::

        env = BenchEnv(step_delay_s=0.02)
        obs, info = env.reset(seed=0)
        obs["agentview_image"].shape    # (256, 256, 3)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}
    _banks: dict[tuple[int, int], list[np.ndarray]] = {}

    def __init__(
        self, size: int = 256, step_delay_s: float = 0.02, bank: int = 32, **ignored: Any
    ) -> None:
        key = (int(size), int(bank))
        if key not in self._banks:
            self._banks[key] = scene_frames(bank, size)
        self.frames = self._banks[key]
        self.step_delay_s = float(step_delay_s)
        self.render_mode = "rgb_array"
        self.observation_space = spaces.Dict(
            {
                "agentview_image": spaces.Box(0, 255, (size, size, 3), np.uint8),
                "state": spaces.Box(-np.inf, np.inf, (8,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (7,), np.float32)
        self.t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        frame = self.frames[self.t % len(self.frames)].copy()
        return {"agentview_image": frame, "state": np.full(8, self.t, np.float32)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"task_description": TASK, "is_success": False}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)
        self.t += 1
        return self._obs(), 0.0, False, False, {"task_description": TASK, "is_success": False}

    def render(self) -> np.ndarray:
        return self.frames[self.t % len(self.frames)].copy()


class StackSwitch(gym.Env):
    """Several wrapper stacks behind one env; ``reset(options={"stack": name})`` picks the one
    that plays the episode (default: the first). Lets a vector env alternate configurations
    between episodes without rebuilding its workers.

    Example::

        env = StackSwitch({"off": make_env(off_cfg, env_factory=BenchEnv),
                           "on": make_env(on_cfg, env_factory=BenchEnv)})
        env.reset(options={"stack": "on"})
    """

    def __init__(self, stacks: dict[str, gym.Env]) -> None:
        self.stacks = dict(stacks)
        self.active = next(iter(self.stacks))
        first = self.stacks[self.active]
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self.metadata = first.metadata
        self.render_mode = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if options and "stack" in options:
            self.active = options["stack"]
        return self.stacks[self.active].reset(seed=seed)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.stacks[self.active].step(action)

    def call_active(self, name: str, *args: Any) -> Any:
        """``name(*args)`` of the active stack (a wrapper's method, e.g. ``settled_episodes``)."""
        return self.stacks[self.active].get_wrapper_attr(name)(*args)

    def close(self) -> None:
        for env in self.stacks.values():
            env.close()


def make_switch(configs: dict[str, dict[str, Any]]) -> StackSwitch:
    """A :class:`StackSwitch` of ``make_env(config, env_factory=BenchEnv)`` stacks (picklable,
    for ``AsyncVectorEnv`` workers: pass ``functools.partial(make_switch, configs)``)."""
    from evolve_envs import make_env

    return StackSwitch({name: make_env(cfg, env_factory=BenchEnv) for name, cfg in configs.items()})


# ---------------------------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=float), q))


class Rounds:
    """Interleaved repetitions of several configurations (see the module docstring)."""

    def __init__(self, names: Sequence[str], repeats: int) -> None:
        self.names = list(names)
        self.repeats = int(repeats)
        self.values: dict[str, list[float]] = {n: [] for n in self.names}
        self.extra: dict[str, list[dict[str, Any]]] = {n: [] for n in self.names}

    def __iter__(self) -> Iterator[str]:
        for r in range(self.repeats):
            order = self.names if r % 2 == 0 else list(reversed(self.names))
            yield from order

    def record(self, name: str, value: float, **extra: Any) -> None:
        self.values[name].append(float(value))
        self.extra[name].append(extra)

    def median(self, name: str) -> float:
        return median(self.values[name])

    def ratio(self, name: str, base: str, invert: bool = False) -> float:
        """Median over rounds of ``value(name) / value(base)`` (``invert``: ``base / name``)."""
        pairs = zip(self.values[name], self.values[base], strict=False)
        return median([(b / a if invert else a / b) for a, b in pairs if a > 0 and b > 0])

    def extra_median(self, name: str, key: str) -> float:
        return median([e[key] for e in self.extra[name] if key in e and e[key] is not None])


# ---------------------------------------------------------------------------- output


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        if abs(value) >= 10:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A compact Markdown table (cells as ``str`` gives them, no padding) for summary files."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print (and return) a Markdown table under a ``title`` line."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = [title, ""]
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def machine_note(load: str | None = None) -> str:
    """One line describing the machine and its load (numbers come from a shared box).

    ``load`` replaces the load average of this moment, e.g. a summary over a whole run.
    """
    if load is None:
        try:
            load = "load avg {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
        except OSError:
            load = "load avg n/a"
    return f"{os.cpu_count()} CPUs, {load}, python {sys.version.split()[0]}"


# ---------------------------------------------------------------------------- load


class LoadLog:
    """Appends ``HH:MM:SS load1 load5 load15`` to ``path`` every ``every_s`` while the bench runs,
    so the report can say what load the runs shared the machine with (:func:`load_samples`,
    :func:`load_summary` read it back).

    Example::

        with LoadLog(out / "load.log"):
            run_the_experiment()
        load_summary(out / "load.log")   # 'load avg (1 min, every minute) 1.2-3.4, mean ...'
    """

    def __init__(self, path: Path, every_s: float = 60.0):
        self.path, self.every_s = path, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            with self.path.open("a") as fh:
                fh.write(time.strftime("%H:%M:%S ", time.gmtime())
                         + " ".join(f"{x:.2f}" for x in os.getloadavg()) + "\n")  # fmt: skip
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadLog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def load_samples(path: Path) -> list[float]:
    """The 1-minute load averages a :class:`LoadLog` wrote to ``path`` ([] when none)."""
    if not path.is_file():
        return []
    return [float(line.split()[1]) for line in path.read_text().splitlines() if line.strip()]


def load_summary(path: Path) -> str | None:
    """``load avg (1 min) LO-HI, mean M over N samples`` from a :class:`LoadLog` file (None
    when there is none)."""
    ones = load_samples(path)
    if not ones:
        return None
    return (f"load avg (1 min, every minute) {min(ones):.1f}-{max(ones):.1f}, "
            f"mean {np.mean(ones):.1f} over {len(ones)} samples")  # fmt: skip


@dataclass
class LoadResult:
    """What :func:`closed_loop` measured inside its window."""

    wall_s: float
    latencies_s: list[float] = field(default_factory=list)  # completed, successful requests
    errors: int = 0
    before: Any = None  # the ``snapshot()`` at the window's start and end
    after: Any = None

    @property
    def req_s(self) -> float:
        return len(self.latencies_s) / self.wall_s

    @property
    def p50_ms(self) -> float:
        return 1000 * percentile(self.latencies_s, 50)

    @property
    def p99_ms(self) -> float:
        return 1000 * percentile(self.latencies_s, 99)


def closed_loop(
    make_call: Callable[[int, contextlib.ExitStack], Callable[[int], bool]],
    clients: int,
    seconds: float,
    *,
    settle_s: float = 1.0,
    snapshot: Callable[[], Any] | None = None,
) -> LoadResult:
    """Closed-loop load, measured one way for every benchmark: ``clients`` threads each send a
    request, wait for the answer, send the next. ``make_call(i, stack)`` runs in thread ``i``
    before the clock starts (open connections there; register cleanups on ``stack``) and returns
    ``call(k) -> ok`` for the thread's ``k``-th request. After ``settle_s`` of load the window
    opens for ``seconds``: a request counts when it *ends* inside the window (the rate is the
    completions per second of the window, which stays right when one request takes a good part
    of the window), its latency timed around ``call``. ``snapshot()`` (server counters,
    endpoint stats) is taken as the window opens and closes.

    >>> r = closed_loop(lambda i, stack: (lambda k: True), clients=2, seconds=0.05,
    ...                 settle_s=0.0)
    >>> r.errors, r.req_s > 0
    (0, True)
    """
    ready = threading.Barrier(clients + 1)
    stop = threading.Event()
    window: dict[str, float] = {}
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients

    def worker(i: int) -> None:
        with contextlib.ExitStack() as stack:
            call = make_call(i, stack)
            ready.wait()
            k = i
            while not stop.is_set():
                t0 = time.perf_counter()
                ok = call(k)
                t1 = time.perf_counter()
                start = window.get("start")
                if start is not None and t1 >= start and not stop.is_set():
                    if ok:
                        latencies[i].append(t1 - t0)
                    else:
                        errors[i] += 1
                k += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(settle_s)
    before = snapshot() if snapshot else None
    window["start"] = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    wall = time.perf_counter() - window["start"]
    after = snapshot() if snapshot else None
    for t in threads:
        t.join()
    return LoadResult(
        wall, [x for lat in latencies for x in lat], sum(errors), before=before, after=after
    )
