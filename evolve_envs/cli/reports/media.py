"""The rollout report's per-episode pictures: the progress plot (PNG, the ``report`` extra) and
the video (MP4, the ``video`` extra), each naming what its progress number is.

Example::

    write_plot(Path("runs/demo/progress_0.png"), record, 0.95, source="mock: pixel change")
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Protocol

import numpy as np

from evolve_envs.recording.media import overlay_progress


class EpisodeRecord(Protocol):
    """What the pictures read of an episode (the rollout report's ``EpisodeRecord`` has it)."""

    index: int
    steps: int
    task_description: str
    rewards: list[float]
    progress: list[float]
    check_steps: list[int]
    frames: list[np.ndarray]


__all__ = ["REPORT_EXTRA", "write_plot", "write_video"]

REPORT_EXTRA = "pip install 'evolve-envs[report]'"
"""The install line of the optional packages the report needs (tqdm, matplotlib)."""


def write_plot(
    path: Path, rec: EpisodeRecord, threshold: float | None, source: str | None = None
) -> str:
    """Model progress and reward against the step (checks and the done threshold marked) as a
    PNG at ``path``; the title says what the progress is (``source``). Returns the file name."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the rollout's progress plots need matplotlib: " + REPORT_EXTRA) from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, rec.steps + 1)
    fig, (ax_p, ax_r) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    ax_p.plot(steps, rec.progress, color="tab:blue", label="model progress")
    for k, s in enumerate(rec.check_steps):
        ax_p.axvline(s, color="tab:gray", lw=0.6, ls=":", label="check" if k == 0 else None)
    if threshold is not None:
        ax_p.axhline(threshold, color="tab:red", ls="--", label=f"done threshold ({threshold:g})")
    ax_p.set_ylim(-2, 102)
    ax_p.set_ylabel("model progress (%)")
    ax_p.legend(loc="upper left", fontsize=8)
    title = f"episode {rec.index}: {rec.task_description}"
    if source:  # what the number is: the mock's change rule is pixel change, not progress
        title += "\n" + "\n".join(textwrap.wrap(f"model progress = {source}", 110))
    ax_p.set_title(title, fontsize=8)
    ax_r.bar(steps, rec.rewards, color="tab:green", width=1.0)
    ax_r.plot(steps, np.cumsum(rec.rewards), color="tab:olive", label="cumulative")
    ax_r.set_xlabel("step")
    ax_r.set_ylabel("reward")
    ax_r.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def write_video(
    path: Path, rec: EpisodeRecord, threshold: float | None, fps: int = 20, label: str = "progress"
) -> str:
    """The episode's frames with the progress bar and ``label=<value>`` overlaid, as an MP4 at
    ``path``. Returns the file name."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the MP4 writer imageio uses)
    except ImportError as e:
        raise ImportError(
            "the rollout's videos need imageio and imageio-ffmpeg: "
            "pip install 'evolve-envs[video]' (or pass video=False / --no-video)"
        ) from e

    with imageio.get_writer(path, fps=fps, macro_block_size=1) as writer:
        for t, frame in enumerate(rec.frames):
            progress = rec.progress[t - 1] if t > 0 else 0.0
            writer.append_data(overlay_progress(frame, progress, t, threshold, label))
    return path.name
