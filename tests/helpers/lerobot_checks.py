"""Checks of LeRobotDataset v3 folders with tools this package did not write.

``doctor``: runs ``lerobot-doctor --ci`` (PyPI ``lerobot-doctor``, the test extra) and returns
its exit status and JSON report. ``episode_video``: one episode's frames of a camera, decoded
with plain PyAV from the layout (``meta/episodes`` timestamps), not with this package's reader.
``psnr``: peak signal-to-noise ratio of two uint8 frame stacks.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq


def doctor(root: Path) -> tuple[int, dict[str, Any]]:
    """``lerobot-doctor <root> --ci``: its exit status and JSON report."""
    exe = shutil.which("lerobot-doctor") or str(Path(sys.executable).with_name("lerobot-doctor"))
    if not Path(exe).is_file():
        raise AssertionError("lerobot-doctor is missing: pip install 'evolve-envs[test]'")
    proc = subprocess.run(
        [exe, str(root), "--ci"], capture_output=True, text=True, timeout=120, check=False
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = {"unparsed": proc.stdout, "stderr": proc.stderr}
    return proc.returncode, report


def failures(report: dict[str, Any]) -> list[str]:
    """The FAIL messages of a doctor report."""
    return [
        f"{check['name']}: {m['message']}"
        for check in report.get("checks", [])
        for m in check["messages"]
        if m["severity"] == "FAIL"
    ]


def episodes_meta(root: Path) -> list[dict[str, Any]]:
    """The rows of ``meta/episodes``, in episode order."""
    rows = []
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return sorted(rows, key=lambda r: r["episode_index"])


def episode_video(root: Path, key: str, episode: int) -> np.ndarray:
    """Episode ``episode``'s frames of camera ``key``, decoded with PyAV: every frame of its
    video file whose presentation time falls in ``[from_timestamp, to_timestamp)``."""
    info = json.loads((root / "meta" / "info.json").read_text())
    row = episodes_meta(root)[episode]
    path = root / info["video_path"].format(
        video_key=key,
        chunk_index=row[f"videos/{key}/chunk_index"],
        file_index=row[f"videos/{key}/file_index"],
    )
    start, end = row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"]
    half = 0.5 / info["fps"]
    frames = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            t = float(frame.pts * stream.time_base)
            if start - half <= t < end - half:
                frames.append(frame.to_ndarray(format="rgb24"))
    return np.stack(frames)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays of one shape (inf when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)
