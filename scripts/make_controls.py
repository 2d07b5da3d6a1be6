"""Write the shipped ReachPlace control recordings (``evolve_envs/recording/shipped/reach_place``).

The episodes are played on ``evolve_envs/ReachPlace-v0`` (30 steps at most, no reward model)
with :func:`~evolve_envs.envs.synthetic.play_behaviours` from seed 0, recorded with the recording
wrapper, then given stable names (``<k>-<behaviour>``) in place of the writer's time-stamped
ids, so that writing them again gives the same episodes, frames and index.

Example (into the package's folder, or ``--out DIR``)::

    python scripts/make_controls.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BEHAVIOURS", "MAX_EPISODE_STEPS", "make_reach_place_controls", "main"]

#: Episodes of each scripted behaviour, in order (seeds count up from 0 across them).
BEHAVIOURS: dict[str, int] = {"task": 4, "distractor": 3, "random": 3}
MAX_EPISODE_STEPS = 30
_HERE = Path(__file__).resolve().parents[1] / "evolve_envs" / "recording" / "shipped"


def make_reach_place_controls(out: Path, behaviours: dict[str, int] | None = None) -> Path:
    """Record the control episodes into ``out`` (replaced if it exists); returns ``out``."""
    from evolve_envs.envs.synthetic import play_behaviours
    from evolve_envs.stack.factory import make_env

    behaviours = dict(BEHAVIOURS if behaviours is None else behaviours)
    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        env = make_env(
            {
                "env": {"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": MAX_EPISODE_STEPS},
                "record": {"dir": str(raw), "camera": "image"},
            }
        )
        try:
            play_behaviours(env, behaviours, seed=0)
        finally:
            env.close()
        labels = [goal for goal, count in behaviours.items() for _ in range(count)]
        lines = [json.loads(line) for line in (raw / "episodes.jsonl").read_text().splitlines()]
        if len(lines) != len(labels):
            raise RuntimeError(f"recorded {len(lines)} episodes, expected {len(labels)}")
        if out.exists():
            shutil.rmtree(out)
        (out / "episodes").mkdir(parents=True)
        meta = json.loads((raw / "meta.json").read_text())
        meta.update(
            {
                "description": "ReachPlace controls for evolve-envs calibrate",
                "behaviours": behaviours,
                "max_episode_steps": MAX_EPISODE_STEPS,
                "written_by": "python scripts/make_controls.py",
            }
        )
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        index = []
        for k, (line, label) in enumerate(zip(lines, labels, strict=True)):
            episode_id = f"{k:02d}-{label}"
            rel = f"episodes/{episode_id}.parquet"
            shutil.copyfile(raw / line["file"], out / rel)
            line.update({"behaviour": label, "episode_id": episode_id, "file": rel})
            index.append(json.dumps(line) + "\n")
        (out / "episodes.jsonl").write_text("".join(index))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python scripts/make_controls.py [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=_HERE / "reach_place", help="target folder")
    args = parser.parse_args(argv)
    out = make_reach_place_controls(args.out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {len(list((out / 'episodes').iterdir()))} episodes, {size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
