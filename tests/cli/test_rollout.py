"""The rollout command from a user's seat: names, effective config, per-episode output, Ctrl-C."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from evolve_envs.cli.main import main
from evolve_envs.cli.rollout import RolloutOptions, run_rollout
from evolve_envs.cli.rollout_policy import resolve_policy
from evolve_envs.recording.metrics_log import EpisodeLog, tensorboard_available

TASK_1 = "put both the cream cheese box and the butter in the basket"  # libero_10 task 1

POLICY_MODULE = '''
import numpy as np

calls = []


def act(obs):
    """Open-gripper no-op; Ctrl-C (KeyboardInterrupt) on call {stop}."""
    calls.append(obs["agentview_image"].shape)
    if len(calls) == {stop}:
        raise KeyboardInterrupt
    action = np.zeros(7, dtype=np.float32)
    action[-1] = -1.0
    return action
'''


@pytest.mark.libero
@pytest.mark.slow
def test_cli_rollout_by_names_writes_per_episode_and_keeps_them_on_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # max_steps 10 under long_horizon's progressive horizon (first stage: half) -> 5-step
    # episodes; the policy interrupts during the third episode.
    (tmp_path / "ctrl_c_policy.py").write_text(POLICY_MODULE.replace("{stop}", "14"))
    monkeypatch.syspath_prepend(str(tmp_path))
    overlay = tmp_path / "small.yaml"
    overlay.write_text(
        "env: {image_size: 128, num_settle_steps: 2}\n"
        "reward_model: {start_step: 2, call_every: 2, calls: sync}\n"
    )
    out = tmp_path / "run"
    argv = ["rollout", "--config", "libero_10", "--config", "fast_dev", "--config",
            "long_horizon", "--config", str(overlay), "--task-id", TASK_1, "--episodes", "3",
            "--max-steps", "10", "--video-every", "2", "--policy", "ctrl_c_policy:act",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted; 2 finished episode(s) kept" in err
    assert "note: progressive_max_step is on: episodes stop at 5 steps" in err
    assert err.count("episode 0:") == 1 and err.count("episode 1:") == 1
    assert "steps:" not in err and "it/s" not in err  # no tqdm lines without a terminal

    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and not summary["complete"]
    eff = summary["effective"]
    assert eff["task_id"] == 1 and eff["task_description"] == TASK_1
    assert eff["max_episode_steps"] == 5 and eff["policy"] == "ctrl_c_policy:act"
    assert "horizon_note" in eff
    assert summary["config"]["env"]["max_episode_steps"] == 10
    assert summary["config"]["reward_model"]["service_num"] == 4  # fast_dev, yet embedded works
    eps = summary["episodes"]
    assert [e["episode"] for e in eps] == [0, 1]
    for e in eps:
        assert e["steps"] == 5 and e["check_steps"] == [2, 4]
        assert e["reward_model_calls"] == 2 and e["reward_model_errors"] == 0
    assert eps[0]["video"] == "episode_0.mp4" and "video" not in eps[1]
    assert (out / "episode_0.mp4").is_file() and not (out / "episode_1.mp4").exists()
    assert (out / "progress_1.png").is_file()
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [r["episode"] for r in rows] == ["0", "1"] and rows[0]["steps"] == "5"
    if tensorboard_available():
        assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    policy = sys.modules["ctrl_c_policy"]
    assert policy.calls[0] == (128, 128, 3)


def test_max_steps_zero_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    assert main(["rollout", "--max-steps", "0", "--out", str(out)]) == 2
    assert "max_steps must be an int >= 1" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match="video_every"):
        run_rollout(RolloutOptions(out=out, video_every=0))
    assert not out.exists()


def test_policy_names_resolve_or_fail_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert resolve_policy("numpy:zeros_like") is __import__("numpy").zeros_like
    fn = lambda obs: obs  # noqa: E731
    assert resolve_policy(fn) is fn
    for bad, words in [
        ("no_such_module_xyz:act", "cannot import 'no_such_module_xyz'"),
        ("numpy:no_such_fn", "has no attribute 'no_such_fn'"),
        ("numpy:pi", "'pi' is not callable"),
        ("greedy", "'random', 'zero', 'module:function' or 'path/to/file.py:function'"),
    ]:
        out = tmp_path / bad.replace(":", "_")
        assert main(["rollout", "--policy", bad, "--out", str(out)]) == 2
        assert words in capsys.readouterr().err
        assert not out.exists()


def test_episode_log_writes_csv_and_tensorboard(tmp_path: Path) -> None:
    with EpisodeLog(tmp_path) as log:
        log.add(0, {"steps": 80, "final_progress": 12.5, "latency_p50_s": None})
        log.add(1, {"steps": 40, "final_progress": float("nan"), "latency_p50_s": 0.01})
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert rows == [
        {"episode": "0", "steps": "80", "final_progress": "12.5", "latency_p50_s": ""},
        {"episode": "1", "steps": "40", "final_progress": "nan", "latency_p50_s": "0.01"},
    ]
    if not tensorboard_available():
        pytest.skip("tensorboard is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()
    series = tags.get("tensors", []) + tags.get("scalars", [])
    assert {"episode/steps", "episode/final_progress"} <= set(series)
    events = acc.Tensors("episode/steps") if "episode/steps" in tags["tensors"] else []
    assert [(e.step, float(e.tensor_proto.float_val[0])) for e in events] == [(0, 80.0), (1, 40.0)]


def test_closing_line_names_only_what_was_written(tmp_path: Path) -> None:
    from evolve_envs.cli.main import _written

    (tmp_path / "metrics.csv").write_text("episode\n0\n")
    no_video = [{"episode": 0, "plot": "progress_0.png"}, {"episode": 1, "plot": "progress_1.png"}]
    assert _written(tmp_path, no_video) == ["summary.json", "metrics.csv", "2 plots"]
    one_video = [{"episode": 0, "plot": "progress_0.png", "video": "episode_0.mp4"}]
    assert _written(tmp_path, one_video)[-1] == "1 video"


def test_wandb_without_wandb_fails_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evolve_envs.recording.metrics_log import import_wandb

    try:
        import_wandb("probe")
    except ImportError:
        pass
    else:
        pytest.skip("wandb is installed and importable here")
    out = tmp_path / "never"
    assert main(["rollout", "--wandb", "my-project", "--out", str(out)]) == 2
    assert "needs Weights & Biases" in capsys.readouterr().err
    assert not out.exists()
