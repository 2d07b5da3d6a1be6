"""Learner updates from saved DistRL states, with subnormal floats kept and flushed to zero.

Each state is a run's ``checkpoint.pt`` (policy, Adam moments, counters, config). The learner is
rebuilt from it, fed ``--episodes`` episodes its own policy plays on held-out scenes, warmed up,
then timed over ``--updates`` updates, in rounds: kept, flushed, kept, ... (``Rounds``: the
order reverses every other round). A state whose Adam moments have decayed into the subnormal
range computes its updates many times slower unless they are flushed
(``evolve_envs/training/common/subnormal.py``).

    python bench/subnormal_updates.py bench/results/subnormal_updates/*.pt

Records: ``bench/results/subnormal_updates/subnormal_updates.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import numpy as np
from _common import ROOT, Rounds, machine_note, md_table


def subnormal_share(state: dict[str, object]) -> float:
    """Share of the Adam moments' values that are subnormal (float32)."""
    import torch

    tiny = torch.finfo(torch.float32).tiny
    n = total = 0
    for moments in state["optimizer"]["state"].values():  # type: ignore[index]
        for t in moments.values():
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                a = t.abs()
                n += int(((a > 0) & (a < tiny)).sum())
                total += t.numel()
    return n / max(1, total)


def episodes(evaluator, policy, n: int, seed: int, version: int) -> list:  # noqa: ANN001
    """``n`` episodes of ``policy`` (sampled actions) as trajectories of learner ``version``."""
    from evolve_envs.training.common.trajectory import Trajectory

    env = evaluator.envs(1)[0]
    out = []
    for k in range(n):
        obs, _ = env.reset(seed=seed + k)
        rows, acts, logps, rewards, dones = [policy.encode_obs(obs)], [], [], [], []
        while True:
            a, logp = policy.act(rows[-1])
            obs, r, term, trunc, _ = env.step(np.clip(a[0], env.action_space.low,
                                                      env.action_space.high))  # fmt: skip
            rows.append(policy.encode_obs(obs))
            acts.append(a[0])
            logps.append(logp[0])
            rewards.append(r)
            dones.append(term)
            if term or trunc:
                break
        out.append(Trajectory(obs={key: np.concatenate([x[key] for x in rows]) for key in rows[0]},
                              actions=np.stack(acts), behaviour_logp=np.asarray(logps, np.float32),
                              rewards=np.asarray(rewards, np.float32),
                              dones=np.asarray(dones, bool), policy_version=version))  # fmt: skip
    return out


def time_updates(path: Path, flush: bool, n_episodes: int, updates: int) -> float:
    """Milliseconds per learner update from the state at ``path``."""
    import torch

    from evolve_envs.training.common.subnormal import flush_subnormals
    from evolve_envs.training.config import load_train_config, read_stored
    from evolve_envs.training.distrl.learner import Learner
    from evolve_envs.training.evaluation import HeldOutEvaluator

    state = torch.load(path, map_location="cpu", weights_only=False)
    cfg = load_train_config(read_stored(state["config"]))
    torch.set_num_threads(1)
    with flush_subnormals() if flush else contextlib.nullcontext():
        with HeldOutEvaluator(cfg, num_envs=1) as evaluator:
            policy = evaluator.policy(state["policy"])
            learner = Learner(policy, cfg.distrl, evaluator.envs(1)[0].action_space, seed=0)
            learner.load_state_dict(state)
            learner.ingest(episodes(evaluator, policy, n_episodes, 5000, learner.version))
            for _ in range(10):
                learner.update(0.5)
            t0 = time.perf_counter()
            for _ in range(updates):
                learner.update(0.5)
            return 1000 * (time.perf_counter() - t0) / updates


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("states", nargs="+", type=Path, help="checkpoint.pt files")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--updates", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench" / "results" / "subnormal_updates" /
                    "subnormal_updates.md")  # fmt: skip
    args = ap.parse_args(argv)
    import torch

    from evolve_envs.training.config import read_stored

    rows = []
    for path in args.states:
        rounds = Rounds(["kept", "flushed"], repeats=args.rounds)
        for name in rounds:
            rounds.record(name, time_updates(path, name == "flushed", args.episodes, args.updates))
        state = torch.load(path, map_location="cpu", weights_only=False)
        rows.append([path.name, read_stored(state["config"])["distrl"]["batch_size"],
                     f"{subnormal_share(state):.2f}", f"{rounds.median('kept'):.1f}",
                     f"{rounds.median('flushed'):.1f}",
                     f"{rounds.ratio('kept', 'flushed'):.2f}"])  # fmt: skip
    headers = ["state", "batch", "subnormal share of Adam's moments", "ms/update, kept",
               "ms/update, flushed", "kept ÷ flushed"]  # fmt: skip
    text = (f"Learner updates from saved states, {args.updates} updates per timing, "
            f"{args.rounds} rounds, {machine_note()}\n\n{md_table(headers, rows)}\n")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
