"""P9: real LIBERO steps/s with every camera rendered at every step vs only the frames read.

One ``LiberoEnv`` (LIBERO-Object task 0, agentview + wrist at 256x256, as in
``evolve_envs/configs/libero_object.yaml``) is built once and wrapped in one ``make_env`` stack
with the reward model on (pairwise critic, sync calls, a check every 16 steps from step 16,
against an embedded mock service with no latency, reading ``agentview_image``). Episodes
alternate between the env's render modes (``LiberoEnv.render_cameras``, set before each reset):

* ``always``: every camera rendered at every step (the default, as before);
* ``on_demand``: a camera is drawn only when read, here the reward model's checks
  (``env.render_cameras: on_demand`` in a stack config);
* ``on_demand, reward off``: nothing reads a frame (the floor: a state-only policy, no model).

Policy: uniform random actions (seeded), state-based (it reads no frame). Only steps are timed,
not resets. Columns: ms per env step (median over rounds), steps/s, speed-up against ``always``
(median of the per-round ratios, with a 95 % bootstrap interval over rounds), frames drawn per
episode (every ``mjr_render`` counted), checks per episode.

Run (needs the ``libero`` extra and a headless GL: ``MUJOCO_GL=egl`` or ``osmesa``)::

    .venv/bin/python bench/p9_render_on_demand.py            # ~4 min: 3 rounds of 96 steps
    .venv/bin/python bench/p9_render_on_demand.py --quick    # ~1 min: 32-step episodes, 1 round
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym
import numpy as np
from _common import Rounds, machine_note, print_table
from _stats import bootstrap_ci

from evolve_envs import make_env
from evolve_envs.reward.service.hosting.embedded import EmbeddedService

MODES = {"always": "always", "on_demand": "on_demand", "on_demand, reward off": "on_demand"}


def count_renders() -> list[int]:
    """Count every frame MuJoCo draws (robosuite's sensors and the on-demand path alike)."""
    import mujoco

    drawn = [0]
    draw = mujoco.mjr_render

    def counting(*args: Any, **kwargs: Any) -> None:
        drawn[0] += 1
        draw(*args, **kwargs)

    mujoco.mjr_render = counting
    return drawn


def run_episode(
    base: Any, env: gym.Env, mode: str, steps: int, seed: int, drawn: list[int]
) -> dict[str, Any]:
    base.render_cameras = mode  # takes effect at this reset
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    drawn[0] = 0
    info: dict[str, Any] = {}
    start = time.perf_counter()
    for k in range(steps):
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
        if term or trunc:
            steps = k + 1
            break
    wall = time.perf_counter() - start
    return {
        "ms_per_step": 1000 * wall / steps,
        "steps": steps,
        "drawn": drawn[0],
        "calls": int(info.get("progress_calls", 0)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="32-step episodes, one round")
    p.add_argument("--steps", type=int, default=96, help="steps per episode")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--cameras", nargs="+", default=["agentview", "wrist"])
    args = p.parse_args()
    start, every = 16, 16
    if args.quick:
        args.steps, args.repeats = 32, 1
    print(f"P9 on {machine_note()}", flush=True)
    from evolve_envs.envs.libero import LiberoEnv

    t0 = time.perf_counter()
    base = LiberoEnv("libero_object", 0, cameras=args.cameras, image_size=args.image_size)
    base.reset(seed=0)
    print(f"LIBERO env built and reset in {time.perf_counter() - t0:.1f} s", flush=True)
    drawn = count_renders()
    service = EmbeddedService("mock", {"rule": "change"}).start()

    def factory(**_: Any) -> gym.Env:
        return base

    env_cfg = {"max_episode_steps": args.steps}
    reward = {"enable": True, "mode": "pairwise", "start_step": start, "call_every": every,
              "milestone_every": 4 * every, "camera": "agentview_image",
              "endpoint": service.url, "calls": "sync"}  # fmt: skip
    on = make_env({"env": env_cfg, "reward_model": reward}, env_factory=factory)
    off = make_env({"env": env_cfg, "reward_model": {"enable": False}}, env_factory=factory)
    stacks = {"always": on, "on_demand": on, "on_demand, reward off": off}
    rounds = Rounds(list(MODES), args.repeats)
    try:
        for i, name in enumerate(rounds):
            r = run_episode(base, stacks[name], MODES[name], args.steps, i // len(MODES), drawn)
            rounds.record(name, r["ms_per_step"], **r)
            print(f"  {name}: {r['ms_per_step']:.1f} ms/step over {r['steps']} steps, "
                  f"{r['drawn']} frames drawn", flush=True)  # fmt: skip
    finally:
        on.close()  # the model and the shared base env
        off.close()
        service.stop()
    rows = []
    for name in rounds.names:
        pairs = zip(rounds.values["always"], rounds.values[name], strict=True)
        ratios = [a / b for a, b in pairs]
        lo, hi = bootstrap_ci(ratios)
        rows.append(
            [
                name,
                rounds.median(name),
                1000 / rounds.median(name),
                rounds.ratio(name, "always", invert=True),
                f"[{lo:.2f}, {hi:.2f}]",
                rounds.extra_median(name, "drawn"),
                rounds.extra_median(name, "calls"),
            ]
        )
    print_table(
        f"P9 real LIBERO-Object task 0 ({'+'.join(args.cameras)} {args.image_size}², random "
        f"state-based policy), {args.steps}-step episodes, checks from {start} every {every}, "
        f"{args.repeats} rounds",
        ["render", "ms/step", "steps/s", "× always", "95 % CI", "frames/episode", "checks"],
        rows,
    )


if __name__ == "__main__":
    main()
