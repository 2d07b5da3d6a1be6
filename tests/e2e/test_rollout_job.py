"""The main job end to end: real LIBERO, the embedded mock service, report files."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v2 as imageio
import pytest

from evolve_envs.cli.main import main
from evolve_envs.cli.rollout import RolloutOptions, run_rollout

CONFIG = {
    "env": {"suite": "libero_10", "task_id": 0, "image_size": 128, "num_settle_steps": 2},
    "reward_model": {"enable": True, "endpoint": "embedded", "start_step": 4, "call_every": 4},
}


@pytest.mark.libero
def test_rollout_writes_report(tmp_path: Path) -> None:
    report = run_rollout(
        RolloutOptions(config=CONFIG, episodes=1, out=tmp_path, max_steps=14, progress_bar=False)
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    (ep,) = summary["episodes"]
    assert ep["steps"] == 14 and ep["truncated"] and not ep["terminated"]
    assert ep["check_steps"] == [4, 8, 12]
    assert ep["reward_model_calls"] == 3 and ep["reward_model_errors"] == 0
    assert ep["latency_s"]["p50"] is not None and ep["latency_s"]["p50"] > 0
    # dense rewards telescope to the final progress
    assert ep["reward_sum"] == pytest.approx(ep["final_progress"] / 100, abs=1e-9)
    assert ep["task_description"] == "put both the alphabet soup and the tomato sauce in the basket"
    with imageio.get_reader(str(tmp_path / ep["video"]), format="FFMPEG") as reader:
        frames = [f for f in reader]  # list(reader) trips over the reader's unknown length
    assert len(frames) == 15 and frames[0].shape == (128, 128, 3)
    assert (tmp_path / ep["plot"]).stat().st_size > 10_000
    assert "reward" in report.table and "\n 0 " in report.table  # a row for episode 0


def test_cli_reports_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward_model:\n  call_every: often\n")
    assert main(["rollout", "--config", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "reward_model.call_every" in err


def test_rollout_embeds_the_configured_backend(tmp_path: Path) -> None:
    """The embedded service uses the config's ``embedded_backend`` and its kwargs (the model id
    it reports names the rule); a rule the mock does not know is refused with the config."""
    from evolve_envs import ConfigError

    cfg = {
        **CONFIG,
        "reward_model": {**CONFIG["reward_model"], "embedded_backend_kwargs": {"rule": "bogus"}},
    }
    with pytest.raises(ConfigError, match="unknown mock rule 'bogus'"):
        run_rollout(RolloutOptions(config=cfg, out=tmp_path, max_steps=4, progress_bar=False))
    assert not any(tmp_path.iterdir())
    cfg["reward_model"]["embedded_backend_kwargs"] = {"rule": "intensity"}
    run_rollout(RolloutOptions(config=cfg, out=tmp_path, max_steps=4, progress_bar=False))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["effective"]["reward_model_id"] == "mock-intensity"
