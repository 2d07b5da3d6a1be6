"""P2: rollout throughput with the reward model on / off, 500 ms service latency, 1 and 8 envs.

Env: :class:`_common.BenchEnv` (textured 256x256 frames, 20 ms step), episodes of ``--steps``
(default 300) steps ended by the time limit. Reward model: an embedded mock service (intensity
rule) whose backend sleeps ``--latency-ms`` (default 500) per batch, like a GPU model; pairwise
milestone critic with the shipped configs' schedule (start 64, every 16, milestones 64).
Configurations:

* ``off``: ``reward_model.enable: false``;
* ``sync``: ``calls: sync``, the blocking behaviour (a check blocks the step);
* ``async lag16`` / ``async lag32``: ``calls: async`` with ``max_lag_steps`` 16 (the shipped
  default) / 32: the answer is applied when it is back, and waited for at the latest that many
  steps after the request; the episode end waits for every outstanding answer.
* ``async lag32, 2 services``: the same against two such services behind one endpoint pool.
  One service finishes one backend batch per 500 ms while the envs ask for one every 16 x 20 ms
  = 320 ms, so a single service is over-subscribed whatever the client does; two services are
  not.
* ``..., fixed window``: the same against services whose batcher uses the fixed 5 ms window
  (``--max-batch-window-ms 0``, the behaviour before the adaptive window), side by side with the
  default adaptive window (``evolve_envs.reward.service.state.batching``).
* ``async auto`` / ``async auto, 2 services``: the schedule that hides the latency
  (``evolve_envs.progress.tracker``, "Async timing"): ``max_lag_steps: auto`` (wait only
  for an answer later than the measured 95th-percentile latency allows) and ``last_check:
  before_limit`` (the tracker knows the 300-step limit and sends its last check early enough for the
  answer to be back before it, so the final step does not wait).

* ``deferred`` / ``deferred, 2 services``: ``calls: deferred``: no step waits; checks are sent on
  the grid and each answer settles its own step later (``evolve_envs.progress.deferred``). The
  round's wall time includes the *drain*: after the last step, the settled episodes are fetched
  with ``wait=True`` (the answers of the last episode), so the ratio counts the time until the
  trainer has every reward. Checks and answers per episode come from the settled episodes;
  *waits* are the resets that waited at ``max_unsettled_episodes`` (the service saturated);
  *unsettled peak* and *frames MiB peak* are the most ended-but-unsettled episodes and the most
  frame bytes held for unanswered checks, per env.

``--episodes N`` plays N consecutive episodes per configuration and round (the env resets itself
between them, so a deferred episode's answers settle while the next one runs).

``--configs NAME ...`` runs only those configurations (and ``off``, the baseline), e.g. the old
and the new schedule side by side: ``--configs "async lag32, 2 services" "async auto, 2
services"``.

1 env: the stack stepped in a plain loop. 8 envs: ``gymnasium.vector.AsyncVectorEnv`` with
``context="spawn"`` — what ``evolve-envs rollout --num-envs 8`` builds — and one service shared by
all workers (its batcher coalesces their simultaneous checks). Each worker holds all four stacks
(:class:`_common.StackSwitch`) so configurations alternate episode by episode in one run.

Columns: env steps/s (all envs), ratio to ``off`` (median of per-round ratios), model calls per
episode and env, the wait at the episode's last step (settlement of outstanding answers), the
answers waited for per episode and env mid-episode (at the max lag) and at the end (from the
episode summary's ``lag_waits`` / ``end_waits``), mean backend batch size (critic items per
backend call, over all services).

Run::

    .venv/bin/python bench/p2_rollout_throughput.py           # ~4 min
    .venv/bin/python bench/p2_rollout_throughput.py --quick   # ~20 s
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
from _common import Rounds, machine_note, make_switch, print_table

from evolve_envs.reward.service.hosting.embedded import EmbeddedService

FIXED_WINDOW = ["--max-batch-window-ms", "0"]  # server args: the fixed 5 ms window only


def configs(
    url: str, url2: str, steps: int, start: int, every: int, fixed: tuple[str, str]
) -> dict[str, dict[str, Any]]:
    env = {"step_delay_s": 0.02, "max_episode_steps": steps}
    common = {
        "enable": True,
        "endpoint": url,
        "mode": "pairwise",
        "start_step": start,
        "call_every": every,
        "milestone_every": 4 * every,
        "timeout": 30,
    }
    lag32 = {**common, "calls": "async", "max_lag_steps": 2 * every}
    auto = {**common, "calls": "async", "max_lag_steps": "auto", "last_check": "before_limit"}
    deferred = {**common, "calls": "deferred"}
    return {
        "off": {"env": env, "reward_model": {"enable": False}},
        "sync, fixed window": {
            "env": env,
            "reward_model": {**common, "endpoint": fixed[0], "calls": "sync"},
        },
        "sync": {"env": env, "reward_model": {**common, "calls": "sync"}},
        "async lag16": {
            "env": env,
            "reward_model": {**common, "calls": "async", "max_lag_steps": every},
        },
        "async lag32": {
            "env": env,
            "reward_model": {**common, "calls": "async", "max_lag_steps": 2 * every},
        },
        "async lag32, 2 services, fixed window": {
            "env": env,
            "reward_model": {**lag32, "endpoint": list(fixed)},
        },
        "async lag32, 2 services": {"env": env, "reward_model": {**lag32, "endpoint": [url, url2]}},
        "async auto": {"env": env, "reward_model": auto},
        "async auto, 2 services": {"env": env, "reward_model": {**auto, "endpoint": [url, url2]}},
        "deferred": {"env": env, "reward_model": deferred},
        "deferred, 2 services": {"env": env, "reward_model": {**deferred, "endpoint": [url, url2]}},
    }


SERVE_REPLICAS: dict[str, int] = {}  # Serve URL -> replicas (each answers /metrics for itself)


def _snapshots(url: str) -> list[dict[str, Any]]:
    replicas = SERVE_REPLICAS.get(url, 1)
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(100 * replicas):
        snap = httpx.get(url + "/metrics", timeout=10).json()
        seen[snap["process"]["pid"]] = snap
        if len(seen) == replicas:
            break
    return list(seen.values())


def critic_batches(urls: tuple[str, ...]) -> tuple[int, int]:
    """(backend calls, items) of the critic kind, summed over the services' ``/metrics``
    (over every replica of a Ray Serve URL)."""
    count = items = 0
    for url in urls:
        for snap in _snapshots(url):
            kind = snap["batches"]["by_kind"].get("critic", {"count": 0, "items": 0})
            count, items = count + kind["count"], items + kind["items"]
    return count, items


def _calls(info: dict[str, Any]) -> float:
    calls = info.get("progress_calls")
    if calls is None:
        return 0.0
    return float(np.mean(np.asarray(calls, dtype=float)))


def _summary_mean(info: dict[str, Any], key: str) -> float | None:
    """Mean over envs of ``info["episode_reward_model"][key]`` at the episode's last step."""
    summary = info.get("episode_reward_model")
    if not isinstance(summary, dict) or summary.get(key) is None:
        return None
    return float(np.mean(np.asarray(summary[key], dtype=float)))


def _active(env: Any, vector: bool, name: str, *args: Any) -> list[Any]:
    """``name(*args)`` of the active stack of every (sub-)env."""
    if vector:
        return list(env.call("call_active", name, *args))
    return [env.call_active(name, *args)]


def run_round(
    env: Any, name: str, steps: int, n: int, urls: tuple[str, ...], episodes: int, deferred: bool
) -> dict:
    """``episodes`` consecutive episodes of ``steps`` steps on every env, then (deferred) the
    drain: every settled episode fetched, waiting for the last answers."""
    vector = isinstance(env, gym.vector.VectorEnv)
    action = np.zeros((n, 7) if vector else 7, np.float32)
    env.reset(seed=0, options={"stack": name})
    waits0 = 0.0
    if deferred:
        _active(env, vector, "settled_episodes", True)  # the previous round's, if any
        waits0 = sum(st["saturation_waits"] for st in _active(env, vector, "deferred_stats"))
    b0, i0 = critic_batches(urls)
    start = time.perf_counter()
    last, ends, k = 0.0, 0, 0
    while ends < episodes:
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        last = time.perf_counter() - t0
        k += 1
        if np.any(term):
            raise RuntimeError(f"{name}: an episode terminated early at step {k}")
        if np.all(trunc):
            ends += 1
            if ends < episodes:
                if vector:  # next-step autoreset: this step resets every sub-env
                    env.step(action)
                else:
                    env.reset()
        elif np.any(trunc):
            raise RuntimeError(f"{name}: episodes did not end together at step {k}")
    stepped = time.perf_counter() - start
    row: dict[str, Any] = {"calls": _calls(info), "last_step_ms": 1000 * last}
    row["lag_waits"] = _summary_mean(info, "lag_waits")
    row["end_waits"] = _summary_mean(info, "end_waits")
    if deferred:
        settled = [ep for eps in _active(env, vector, "settled_episodes", True) for ep in eps]
        if len(settled) != n * episodes:
            raise RuntimeError(f"{name}: {len(settled)} settled episodes, {n * episodes} played")
        stats = _active(env, vector, "deferred_stats")
        row["calls"] = float(np.mean([ep.summary["progress_calls"] for ep in settled]))
        row["answers"] = float(np.mean([ep.summary["answers"] for ep in settled]))
        row["errors"] = sum(ep.summary["reward_model_errors"] for ep in settled)
        waits = sum(st["saturation_waits"] for st in stats) - waits0
        row["lag_waits"] = waits / (n * episodes)  # resets that waited, per episode and env
        row["unsettled"] = max(st["peak_unsettled_episodes"] for st in stats)
        row["frame_mib"] = max(st["peak_unsettled_frame_bytes"] for st in stats) / 2**20
    wall = time.perf_counter() - start
    b1, i1 = critic_batches(urls)
    row.update(
        steps_per_s=n * steps * episodes / wall,
        wall_s=wall,
        drain_ms=1000 * (wall - stepped),
        batch=(i1 - i0) / (b1 - b0) if b1 > b0 else None,
    )
    return row


def bench(
    n_envs: int, urls: tuple[str, ...], args: argparse.Namespace, cfgs: dict
) -> list[list[Any]]:
    if n_envs == 1:
        env: Any = make_switch(cfgs)
    else:
        env = gym.vector.AsyncVectorEnv(
            [functools.partial(make_switch, cfgs)] * n_envs, context="spawn"
        )
    rounds = Rounds(list(cfgs), args.repeats)
    try:
        for name in rounds:
            deferred = cfgs[name]["reward_model"].get("calls") == "deferred"
            r = run_round(env, name, args.steps, n_envs, urls, args.episodes, deferred)
            # throughput: bigger is better; store wall time so ratios read "slowdown"
            rounds.record(name, r["wall_s"], **r)
    finally:
        env.close()
    rows = []
    for name in cfgs:
        rows.append(
            [
                n_envs,
                name,
                rounds.extra_median(name, "steps_per_s"),
                rounds.ratio(name, "off", invert=True),
                rounds.extra_median(name, "calls"),
                rounds.extra_median(name, "last_step_ms"),
                rounds.extra_median(name, "answers"),
                rounds.extra_median(name, "lag_waits"),
                rounds.extra_median(name, "end_waits"),
                rounds.extra_median(name, "drain_ms"),
                rounds.extra_median(name, "unsettled"),
                rounds.extra_median(name, "frame_mib"),
                rounds.extra_median(name, "batch"),
            ]
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--steps", type=int, default=300, help="steps per episode")
    p.add_argument("--latency-ms", type=float, default=500.0, help="mock backend latency")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    p.add_argument("--episodes", type=int, default=1, help="consecutive episodes per round")
    p.add_argument("--envs", type=int, nargs="+", default=[1, 8], help="env counts")
    p.add_argument(
        "--serve-replicas",
        type=int,
        default=0,
        help="also run 'async lag32' and 'async auto' against a local Ray Serve app with this "
        "many replicas",
    )
    p.add_argument(
        "--configs",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only these configurations (and 'off'); default: all",
    )
    args = p.parse_args()
    start, every = 64, 16
    if args.quick:
        args.steps, args.latency_ms, args.repeats, args.envs = 48, 100.0, 1, [1, 2]
        start, every = 8, 8
    print(f"P2 on {machine_note()}", flush=True)
    backend = {"rule": "intensity", "latency_ms": args.latency_ms}
    with (
        EmbeddedService("mock", backend) as svc,
        EmbeddedService("mock", backend) as svc2,
        EmbeddedService("mock", backend, extra_args=FIXED_WINDOW) as fix,
        EmbeddedService("mock", backend, extra_args=FIXED_WINDOW) as fix2,
    ):
        cfgs = configs(svc.url, svc2.url, args.steps, start, every, (fix.url, fix2.url))
        urls: tuple[str, ...] = (svc.url, svc2.url, fix.url, fix2.url)
        ray = None
        if args.serve_replicas:
            import socket

            import ray
            from ray import serve

            from evolve_envs.reward.service.hosting.ray_serve import build_app

            ray.init(
                address="local",
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=150 * 1024**2,
            )
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            n = args.serve_replicas
            app = {"backend": "mock", "backend_kwargs": backend, "replicas": n, "num_cpus": 0.25}
            serve.run(build_app(app), name="p2", route_prefix="/")
            serve_url = f"http://127.0.0.1:{port}"
            SERVE_REPLICAS[serve_url] = n
            for schedule in ("lag32", "auto"):
                cfg = cfgs[f"async {schedule}"]
                cfgs[f"async {schedule}, Serve {n} replicas"] = {
                    **cfg,
                    "reward_model": {**cfg["reward_model"], "endpoint": serve_url},
                }
            urls = (*urls, serve_url)
        if args.configs:
            unknown = sorted(set(args.configs) - set(cfgs))
            if unknown:
                raise SystemExit(f"unknown configurations {unknown}; known: {sorted(cfgs)}")
            cfgs = {k: v for k, v in cfgs.items() if k == "off" or k in args.configs}
        rows = []
        try:
            for n in args.envs:
                rows += bench(n, urls, args, cfgs)
        finally:
            if ray is not None:
                serve.shutdown()
                ray.shutdown()
    print_table(
        f"P2 rollout throughput, {args.steps}-step episodes, 20 ms env step, service latency "
        f"{args.latency_ms:.0f} ms, start {start} / every {every}",
        [
            "envs",
            "reward",
            "env steps/s",
            "ratio vs off",
            "calls/episode",
            "last-step wait ms",
            "answers/episode",
            "mid-episode waits",
            "end waits",
            "drain ms",
            "unsettled peak",
            "frames MiB peak",
            "batch fill",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
