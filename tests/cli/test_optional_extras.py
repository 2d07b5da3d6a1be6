"""Reports and videos need optional extras; without them the error names the extra to install."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from evolve_envs.cli import rollout
from evolve_envs.cli.reports import calibrate as calibrate_report
from evolve_envs.cli.reports import media as rollout_media
from evolve_envs.cli.reports import rollout as rollout_report


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError


def test_rollout_plot_without_matplotlib_names_the_report_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without(monkeypatch, "matplotlib")
    rec = rollout_report.EpisodeRecord(index=0, env_index=0, steps=1, rewards=[0.0], progress=[0.0])
    with pytest.raises(ImportError, match=r"pip install 'evolve-envs\[report\]'"):
        rollout_media.write_plot(tmp_path / "p.png", rec, None)
    assert not (tmp_path / "p.png").exists()


def test_rollout_video_without_imageio_names_the_video_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without(monkeypatch, "imageio", "imageio.v2")
    rec = rollout_report.EpisodeRecord(index=0, env_index=0, frames=[np.zeros((8, 8, 3), np.uint8)])
    with pytest.raises(ImportError, match=r"pip install 'evolve-envs\[video\]'"):
        rollout_media.write_video(tmp_path / "e.mp4", rec, None)
    assert not (tmp_path / "e.mp4").exists()


def test_rollout_progress_bar_without_tqdm_names_the_report_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without(monkeypatch, "tqdm", "tqdm.auto")
    with pytest.raises(ImportError, match=r"pip install 'evolve-envs\[report\]'"):
        rollout._collect(None, None, "random", None)  # type: ignore[arg-type]


def test_calibration_plots_without_matplotlib_name_the_report_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without(monkeypatch, "matplotlib")
    with pytest.raises(ImportError, match=r"pip install 'evolve-envs\[report\]'"):
        calibrate_report._plots({"services": {}}, tmp_path)
    assert list(tmp_path.iterdir()) == []
