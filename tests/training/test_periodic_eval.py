"""Training that evaluates itself, and logs where labs look.

One short ReachPlace run of ``evolve-envs train`` (rewards from the real embedded service) with
``eval.every_updates`` and ``--wandb`` in W&B's offline mode is shared by the tests: held-out
success lands in ``eval.csv``, the metrics rows, TensorBoard (scalars and the video) and the W&B
run files; ``best.safetensors`` holds the best evaluation; ``evolve-envs evaluate`` reproduces it
from the saved policy and writes its JSON and MP4. The D3 bench's snapshot evaluation runs on the
same code.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_train import ROOT, SHORT_REACH_PLACE

CONFIG = str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")
HAVE_WANDB = importlib.util.find_spec("wandb") is not None
EVAL = ["eval.every_updates=3", "eval.episodes=3", "eval.num_envs=3", "eval.video_episodes=1"]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def run(ray_module, tmp_path_factory) -> Iterator[Path]:
    """A 6-update run with held-out evaluation every 3 updates (and W&B offline if installed)."""
    from evolve_envs.cli.main import main

    run_dir = tmp_path_factory.mktemp("eval") / "run"
    saved = {k: os.environ.get(k) for k in ("WANDB_MODE", "WANDB_SILENT")}
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")  # no network, no chatter
    try:
        argv = ["train", "--config", CONFIG, "--run-dir", str(run_dir), "--no-progress-bar",
                *SHORT_REACH_PLACE, "run.max_updates=6", "run.snapshot_every_s=5",
                *EVAL]  # fmt: skip
        if HAVE_WANDB:
            argv += ["--wandb", "evolve-envs-test"]
        assert main(argv) == 0
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    yield run_dir


def test_held_out_success_is_logged_beside_the_training_metrics(run: Path) -> None:
    evals = _rows(run / "eval.csv")
    assert [int(r["updates"]) for r in evals][:2] == [3, 6]  # every 3 updates; none repeated
    assert len(evals) == len({r["updates"] for r in evals})
    for r in evals:
        assert r["episodes"] == "3"
        assert 0.0 <= float(r["success"]) <= 1.0 and 0.0 <= float(r["success_sampled"]) <= 1.0
    last = _rows(run / "metrics.csv")[-1]  # the final row carries the latest evaluation
    assert float(last["eval_success"]) == float(evals[-1]["success"])
    summary = json.loads((run / "summary.json").read_text())["eval"]
    assert summary["final"]["updates"] == int(evals[-1]["updates"])
    best = max(float(r["success"]) for r in evals)
    assert summary["best"]["success"] == best and summary["evaluations"] == len(evals)
    assert (run / "eval_videos" / "update_00000003.mp4").is_file()


def test_best_policy_file_holds_the_best_policy_and_evaluate_reproduces_its_number(
    run: Path,
) -> None:
    import imageio.v2 as imageio

    from evolve_envs.cli.main import main
    from evolve_envs.training.policy_file import read_policy_file

    saved = read_policy_file(run / "best.safetensors")
    best = saved.info
    assert saved.state_dict and {"config", "counters", "eval", "algo"} <= set(best)
    out = run.parent / "evaluated"
    argv = ["evaluate", str(run), "--best", "--episodes", "3", "--videos", "2", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads((out / "result.json").read_text())
    # the same policy on the same held-out scenes with its mean action: the same number
    assert result["deterministic"]["success_rate"] == best["eval"]["success"]
    assert result["deterministic"]["seeds"] == [2**31, 2**31 + 1, 2**31 + 2]
    assert result["sampled"]["episodes"] == 3 and result["video_episodes"] == 2
    lengths = result["deterministic"]["lengths"][:2]
    frames = imageio.get_reader(out / "episodes.mp4").count_frames()
    assert frames == sum(lengths) + 2  # each episode's first frame and one per step
    # a snapshot of the same run evaluates too (its config from the run's config.yaml)
    snap = sorted((run / "snapshots").glob("*.pt"))[-1]
    assert main(["evaluate", str(snap), "--episodes", "2", "--videos", "0"]) == 0
    assert (snap.parent / f"evaluate-{snap.stem}" / "result.json").is_file()


def test_evaluate_without_a_saved_policy_is_one_line(tmp_path: Path, capsys) -> None:
    from evolve_envs.cli.main import main

    assert main(["evaluate", str(tmp_path), "--best"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no saved policy" in err and "eval.every_s" in err


def test_tensorboard_gets_the_evaluation_and_its_video(run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()  # the framework-free writer's scalars are tensor summaries
    assert {"train/return", "eval/success", "eval/success_sampled"} <= set(tags["tensors"])
    assert [e.step for e in acc.Tensors("eval/success")][:2] == [3, 6]
    (video, *_) = acc.Images("eval/video")
    assert video.step == 3 and video.encoded_image_string[:6] == b"GIF89a"


@pytest.mark.skipif(not HAVE_WANDB, reason="the wandb extra is not installed")
def test_wandb_offline_run_holds_the_scalars_and_the_video(run: Path) -> None:
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    (run_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    store = datastore.DataStore()
    store.open_for_scan(str(run_file))
    history: list[dict[str, str]] = []
    config = None
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append(
                {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
            )
        elif kind == "run":  # the run's config comes with its first record
            config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
    keys = set().union(*history)
    assert {"train/return", "train/success", "eval/success", "eval/success_sampled"} <= keys
    evals = [json.loads(h["eval/success"]) for h in history if "eval/success" in h]
    assert evals == [float(r["success"]) for r in _rows(run / "eval.csv")]
    videos = [json.loads(h["eval/video/path"]) for h in history if "eval/video/path" in h]
    assert videos and (run_file.parent / "files" / videos[0]).is_file()
    assert config is not None and config["eval"]["every_updates"] == 3


def test_wandb_missing_is_one_line_before_anything_starts(monkeypatch, tmp_path, capsys) -> None:
    from evolve_envs.cli.main import main

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now fails
    rc = main(["train", "--config", CONFIG, "--run-dir", str(tmp_path / "r"), "--wandb", "p"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "pip install 'evolve-envs[wandb]'" in err and not (tmp_path / "r").exists()
