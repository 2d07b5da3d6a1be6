"""A run folder holds one run: re-using it needs --resume or --overwrite, and --overwrite leaves
nothing of the run before."""

from __future__ import annotations

import io

import pytest
import yaml

from evolve_envs.training.driver import TrainOptions, run_train
from evolve_envs.training.run_dir import RUN_ARTEFACTS, claim_run_dir
from tests.e2e.test_train import TOY

#: what an earlier run with held-out evaluation left: a new run without eval writes none of these
EARLIER = {
    "best.pt": b"old policy",
    "best.safetensors": b"old policy",
    "eval.csv": b"updates,success\n3,0.9\n",
    "checkpoint.pt": b"old",
    "config.yaml": b"algo: distrl\n",
    "train.log": b"old\n",
}


def _plant(run_dir):
    run_dir.mkdir()
    for name, data in EARLIER.items():
        (run_dir / name).write_bytes(data)
    (run_dir / "eval_videos").mkdir()
    (run_dir / "eval_videos" / "update_00000003.mp4").write_bytes(b"old video")
    (run_dir / "notes.txt").write_text("the user's own file")


def _listing(run_dir):
    return sorted(
        (str(p.relative_to(run_dir)), p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
        for p in run_dir.rglob("*")
    )


def test_a_folder_holding_a_run_is_refused_in_one_line_and_left_as_it_was(tmp_path, capsys):
    from evolve_envs.cli.main import main

    run_dir = tmp_path / "run"
    _plant(run_dir)
    before = _listing(run_dir)
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(TOY))
    rc = main(["train", "--config", str(config), "--run-dir", str(run_dir), "--minutes", "0.1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"--run-dir {run_dir} holds a run" in err[0]
    assert "--resume" in err[0] and "--overwrite" in err[0]
    assert _listing(run_dir) == before  # nothing written, nothing removed
    # both at once is refused as well, before anything is read
    rc = main(["train", "--resume", str(run_dir), "--run-dir", str(run_dir), "--overwrite"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not both" in err[0], err
    # from Python too
    with pytest.raises(ValueError, match="holds a run"):
        run_train(TrainOptions(config=[TOY], run_dir=run_dir, log=io.StringIO()))
    assert _listing(run_dir) == before


def test_overwrite_clears_every_file_of_the_earlier_run(tmp_path):
    run_dir = tmp_path / "run"
    _plant(run_dir)
    (run_dir / "snapshots").mkdir()
    (run_dir / "snapshots" / "00000001-0000001.0.pt").write_bytes(b"old")
    cleared = claim_run_dir(run_dir, overwrite=True)
    assert set(cleared) == {*EARLIER, "eval_videos", "snapshots"}
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]  # the user's file stays
    assert not any((run_dir / n).exists() for n in RUN_ARTEFACTS)
    assert claim_run_dir(run_dir) == []  # an empty (or missing) folder is free


@pytest.mark.slow
def test_a_run_with_overwrite_lists_only_its_own_files(ray_local, tmp_path, capsys):
    from evolve_envs.cli.main import main

    run_dir = tmp_path / "run"
    _plant(run_dir)
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(TOY))
    argv = ["train", "--config", str(config), "--run-dir", str(run_dir), "--overwrite"]
    rc = main([*argv, "--no-progress-bar", "workers.num_workers=1", "run.max_updates=2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    closing = [ln for ln in out.splitlines() if ln.startswith(f"wrote {run_dir}:")]
    assert len(closing) == 1, out
    assert "checkpoint.pt" in closing[0] and "metrics.csv" in closing[0]
    # this run had no evaluation
    for old in ("best.pt", "best.safetensors", "eval.csv", "eval_videos"):
        assert old not in closing[0] and not (run_dir / old).exists(), old
    assert "old" not in (run_dir / "train.log").read_text().splitlines()[:1]
    assert (run_dir / "notes.txt").read_text() == "the user's own file"
