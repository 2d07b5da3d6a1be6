"""R2's judges: how each fitted model scores placed blocks, near misses, blocks carried astray
and other scripted behaviours (``separation``), and where the trained policies end and which of
those endings each fit judges done (``endings``); the phases of ``r2_fitted_reward.py`` of those
names."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from _common import ROOT, machine_note

#: fitted arm -> the suffix of the model folder it serves (``<runs>/model<suffix>``)
FITTED = {
    "fitted": "",
    "fitted_cap03": "-cap03",
    "fitted_noisy": "-noisy",
    "fitted_nearmiss": "-nearmiss",
    "fitted_gap": "-gap",
    "fitted_frame": "-frame",
    "fitted_big_frame": "-big-frame",
    "fitted_astray_frame": "-big-astray-frame",
}


#: the fits whose verdict on every policy's failed endings ``endings`` keeps (done far from the
#: zone), beside the policy's own model's
JUDGES = ("fitted_big_frame", "fitted_astray_frame")


#: reset seeds of the separation probe's scenes (apart from every recording's)
PROBE_SEED = 20_000
#: the behaviours the separation probe plays by default: placed blocks, near misses, astray
SEPARATION_BEHAVIOURS = ("task", "near_miss", "astray")
#: a fit has a hole where it judges at least this many last frames done with the block outside
#: the zone (of a behaviour's episodes, or of a run's failed endings)
HOLE = 2


def separation(
    out: Path,
    episodes: int,
    runs: Path,
    behaviours: tuple[str, ...] = SEPARATION_BEHAVIOURS,
    probe_seed: int = PROBE_SEED,
) -> None:
    """How each fitted model scores the last frame of each of ``behaviours`` (``play_behaviours``'
    names; by default a placed block against a block held just short of the zone, ``near_miss``,
    and one carried away from it, ``astray``), on scenes no recording holds (reset seeds from
    ``probe_seed``): per behaviour the scores, how many last frames it judges done, how many of
    those with the block outside the zone (the env's own check), and the behaviours where that
    is a hole (``HOLE`` or more)."""
    import gymnasium as gym
    import numpy as np

    from evolve_envs.envs.synthetic import TASK as TEXT
    from evolve_envs.envs.synthetic import ReachPlaceEnv, play_behaviours
    from evolve_envs.reward.service.backends.progress_net import load_model

    class LastFrame(gym.Wrapper):
        def step(self, action):  # noqa: ANN001, ANN201
            out = self.env.step(action)
            self.frame = out[0]["image"]
            return out

    finals: dict[str, list[np.ndarray]] = {goal: [] for goal in behaviours}
    outside: dict[str, np.ndarray] = {}
    for goal, frames in finals.items():
        ends = []
        for k in range(episodes):
            env = LastFrame(gym.wrappers.TimeLimit(ReachPlaceEnv(), 30))
            play_behaviours(env, {goal: 1}, seed=probe_seed + k)
            frames.append(env.frame)
            ends.append(not block_in_zone(env.unwrapped))
        outside[goal] = np.array(ends, dtype=bool)
    names = {goal: "placed" if goal == "task" else goal for goal in behaviours}
    rows = {}
    for arm, suffix in FITTED.items():
        folder = runs / f"model{suffix}"
        if not folder.is_dir():
            continue
        net = load_model(folder)
        score = {g: net.predict(np.stack(f), [TEXT] * len(f)) for g, f in finals.items()}
        thr = net.config.done_threshold
        done = {g: v >= thr for g, v in score.items()}
        rows[arm] = {
            "model": model_hash(str(folder)),
            "done_threshold": thr,
            **{f"{g}_mean": float(v.mean()) for g, v in score.items()},
            **{f"{g}_min": float(v.min()) for g, v in score.items()},
            **{f"{g}_max": float(v.max()) for g, v in score.items()},
            **{f"{names[g]}_judged_done": int(d.sum()) for g, d in done.items()},
            **{
                f"{names[g]}_judged_done_outside": int((d & outside[g]).sum())
                for g, d in done.items()
            },  # fmt: skip
        }
        r = rows[arm]
        r["holes"] = [names[g] for g in behaviours if r[f"{names[g]}_judged_done_outside"] >= HOLE]
        scores = ", ".join(f"{names[g]} {r[f'{g}_mean']:.3f} [{r[f'{g}_min']:.3f}, "
                           f"{r[f'{g}_max']:.3f}]" for g in behaviours)  # fmt: skip
        judged = ", ".join(f"{names[g]} {r[f'{names[g]}_judged_done']}/{episodes} "
                           f"({r[f'{names[g]}_judged_done_outside']} outside the zone)"
                           for g in behaviours)  # fmt: skip
        print(f"{arm}: {scores}; done at {thr:.2f}: {judged}; holes (>= {HOLE} done outside): "
              f"{', '.join(r['holes']) or 'none'}")  # fmt: skip
    body = {"episodes_per_behaviour": episodes, "seed": probe_seed,
            "behaviours": list(behaviours), "rows": rows, "machine": machine_note()}  # fmt: skip
    (out / "separation.json").write_text(json.dumps(body, indent=1) + "\n")


def block_in_zone(env: Any) -> bool:
    """Whether the block of a ReachPlace env (``ReachPlaceEnv``) lies in the zone, by the env's
    own test: its centre within ``place_radius`` of the zone's, as ``step`` counts a placement."""
    import numpy as np

    pos = env.positions()
    return bool(np.linalg.norm(pos["block"] - pos["target"]) < env.place_radius)


def model_hash(model: str) -> str:
    from evolve_envs.reward.service.backends.progress_net import content_hash

    return content_hash(model)


def endings(out: Path, episodes: int, arms: list[str], runs: Path, scene_offset: int = 0) -> None:
    """Where each DistRL record's last policy ends (mean action), and what each model says of
    its failed episodes' last frames (see the module docstring); the records of ``arms`` only,
    played on the held-out scenes ``held_out_seeds(episodes, scene_offset)``, merged into
    ``endings.json`` (each row keeps its ``scene_offset``)."""
    import numpy as np
    from d3_learning_curves import snapshots

    from evolve_envs.envs.synthetic import TASK as TEXT
    from evolve_envs.reward.service.backends import scene_rules
    from evolve_envs.reward.service.backends.progress_net import load_model
    from evolve_envs.training.evaluation import HeldOutEvaluator, held_out_seeds, read_saved

    # the two earlier fits judge every ending beside the policy's own, where they are on the machine
    folders = {arm: runs / f"model{FITTED[arm]}" for arm in ("fitted", "fitted_gap")}
    models = {arm: load_model(folder) for arm, folder in folders.items() if folder.is_dir()}
    print(f"judged also by: {sorted(models) or 'none (no earlier fits in ' + str(runs) + ')'}")
    own_models = dict(models)  # each fitted arm's own model, loaded once
    target = out / "endings.json"
    rows = json.loads(target.read_text())["rows"] if target.is_file() else {}
    for path in sorted(out.glob("distrl-*.json")):
        record = json.loads(path.read_text())
        if record["arm"] not in arms:
            continue
        snap = snapshots(ROOT / record["run_dir"])[-1]
        saved = read_saved(snap)
        with HeldOutEvaluator(saved.cfg) as evaluator:
            policy = evaluator.policy(saved.payload["policy"])
            res = evaluator.run(policy, held_out_seeds(episodes, scene_offset), record=episodes)
        last = np.stack([frames[-1] for frames in res.frames])
        scores = {"rule": np.array([scene_rules.reach_place_progress(f) / 100 for f in last])}
        scores |= {arm: net.predict(last, [TEXT] * len(last)) for arm, net in models.items()}
        ok = np.array(res.success, dtype=bool)
        row = {"snapshot": snap.name, "env_steps": saved.payload["counters"]["env_steps_in"],
               "successes": int(ok.sum()), "episodes": episodes,
               "failed_true_progress": _mean(np.array(res.progress)[~ok]),
               "scene_offset": scene_offset}  # fmt: skip
        judged = {}  # fit -> the failed endings it judges done
        for arm in sorted({*JUDGES, record["arm"]} & set(FITTED)):
            if arm not in own_models:
                folder = runs / f"model{FITTED[arm]}"
                if arm != record["arm"] and not folder.is_dir():
                    continue  # a judge that was never fitted here
                own_models[arm] = load_model(folder)
            net = own_models[arm]
            score = scores[arm] if arm in scores else net.predict(last, [TEXT] * len(last))
            judged[arm] = ~ok & (score >= net.config.done_threshold)
        astray = scores["rule"] < 0.9  # the block far from the zone
        row["failed_done_far_by"] = {arm: int((d & astray).sum()) for arm, d in judged.items()}
        if record["arm"] in FITTED:  # its own model: the failed endings it judges done
            row["failed_judged_done"] = int(judged[record["arm"]].sum())
            far = judged[record["arm"]] & astray
            row["failed_judged_done_far"] = int(far.sum())
            if far.any():  # what those frames show: up to four, side by side
                from PIL import Image

                strip = np.concatenate(list(last[far][:4]), axis=1)
                big = Image.fromarray(strip).resize((strip.shape[1] * 4, strip.shape[0] * 4))
                big.save(out / f"endings-{path.stem}.png")
        for name, values in scores.items():
            row[f"failed_{name}"], row[f"succeeded_{name}"] = _mean(values[~ok]), _mean(values[ok])
        rows[path.stem] = row
        print(
            f"{path.stem}: {row['successes']}/{episodes} solved; the failed end at true progress "
            f"{row['failed_true_progress']:.2f}, rule {row['failed_rule']:.2f}, default fit "
            f"{row.get('failed_fitted', math.nan):.2f}, gap fit "
            f"{row.get('failed_fitted_gap', math.nan):.2f}; judged done by "
            f"its own model: {row.get('failed_judged_done', '-')} "
            f"({row.get('failed_judged_done_far', '-')} far from the zone)",
            flush=True,
        )
    body = {"episodes": episodes, "held_out_offset": scene_offset, "rows": rows,
            "machine": machine_note()}  # fmt: skip
    target.write_text(json.dumps(body, indent=1) + "\n")


def _mean(values: object) -> float:
    """The mean of an array, NaN when it is empty."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    return float(values.mean()) if values.size else math.nan
