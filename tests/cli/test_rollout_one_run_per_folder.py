"""``rollout --out D`` into a folder an earlier rollout wrote: the report holds this run only."""

from __future__ import annotations

import json

from evolve_envs.cli.main import main


def test_a_second_rollout_leaves_nothing_of_the_first(tmp_path, capsys):
    out = tmp_path / "report"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "events.out.tfevents.earlier").write_bytes(b"earlier")
    for name in ("progress_7.png", "episode_7.mp4", "metrics.csv", "summary.json"):
        (out / name).write_text("an earlier rollout's")
    (out / "notes.txt").write_text("the user's own file")
    argv = ["rollout", "--config", "reach_place", "--episodes", "1", "--no-video"]
    rc = main([*argv, "--no-progress-bar", "--out", str(out), "env.max_episode_steps=10"])
    assert rc == 0, capsys.readouterr().err
    names = sorted(p.name for p in out.iterdir())
    assert "progress_7.png" not in names and "episode_7.mp4" not in names, names
    assert "progress_0.png" in names and (out / "notes.txt").read_text() == "the user's own file"
    assert not (out / "tensorboard" / "events.out.tfevents.earlier").exists()
    assert len(json.loads((out / "summary.json").read_text())["episodes"]) == 1
    assert "earlier" not in (out / "metrics.csv").read_text()
