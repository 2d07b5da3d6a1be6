"""A LeRobotDataset v3 written from the published layout with plain pyarrow, pandas and PyAV.

Nothing of :mod:`evolve_envs.recording` is used: the tests that read a dataset this package did
not write (``tests/cli/test_relabel.py``, ``tests/e2e/test_lerobot_fit.py``) build theirs here.
Every episode's frames go back to back into one H.264 file addressed by timestamps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

#: one episode: its frames, states and actions, and ``next.success`` per frame (or None: no column)
Episode = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[bool] | None]

SCALAR = {"shape": [1], "names": None}
INDEXES = ("frame_index", "episode_index", "index", "task_index")


def _write_video(path: Path, episodes: Sequence[Episode], fps: int) -> None:
    path.parent.mkdir(parents=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps, options={"g": "2", "crf": "18"})
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        k = 0
        for frames, *_ in episodes:
            for frame in frames:
                vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
                vf.pts, vf.time_base = k, Fraction(1, fps)
                out.mux(stream.encode(vf))
                k += 1
        out.mux(stream.encode())


def _episode_row(e: int, task: str, key: str, start: int, n: int, fps: int) -> dict:
    return {
        "episode_index": e,
        "tasks": [task],
        "length": n,
        "data/chunk_index": 0,
        "data/file_index": 0,
        "dataset_from_index": start,
        "dataset_to_index": start + n,
        f"videos/{key}/chunk_index": 0,
        f"videos/{key}/file_index": 0,
        f"videos/{key}/from_timestamp": start / fps,
        f"videos/{key}/to_timestamp": (start + n) / fps,
        "meta/episodes/chunk_index": 0,
        "meta/episodes/file_index": 0,
    }


def _features(key: str, fps: int, success: bool) -> dict:
    video_info = {"video.codec": "h264", "video.pix_fmt": "yuv420p", "video.fps": fps}
    features: dict = {
        key: {
            "dtype": "video",
            "shape": [64, 64, 3],
            "names": ["height", "width", "channels"],
            "info": video_info,
        },
        "observation.state": {"dtype": "float32", "shape": [3], "names": None},
        "action": {"dtype": "float32", "shape": [2], "names": None},
    }
    if success:
        features["next.success"] = {"dtype": "bool", **SCALAR}
    features["timestamp"] = {"dtype": "float32", **SCALAR}
    features.update({k: {"dtype": "int64", **SCALAR} for k in INDEXES})
    return features


def write_v3_dataset(
    root: Path, episodes: Sequence[Episode], *, key: str, task: str, fps: int = 10
) -> Path:
    """``episodes`` of one task in the v3 layout under ``root``, camera ``key``; returns root."""
    success = all(ep[3] is not None for ep in episodes)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    _write_video(root / "videos" / key / "chunk-000" / "file-000.mp4", episodes, fps)
    fields = [
        ("observation.state", pa.list_(pa.float32(), 3)),
        ("action", pa.list_(pa.float32(), 2)),
        *([("next.success", pa.bool_())] if success else []),
        ("timestamp", pa.float32()),
        *[(k, pa.int64()) for k in INDEXES],
    ]
    columns: dict[str, list] = {name: [] for name, _ in fields}
    rows, start = [], 0
    for e, (frames, states, actions, done) in enumerate(episodes):
        n = len(frames)
        columns["observation.state"] += [s.tolist() for s in states]
        columns["action"] += [a.tolist() for a in actions]
        if success:
            columns["next.success"] += done
        columns["timestamp"] += [i / fps for i in range(n)]
        columns["frame_index"] += list(range(n))
        columns["episode_index"] += [e] * n
        columns["index"] += list(range(start, start + n))
        columns["task_index"] += [0] * n
        rows.append(_episode_row(e, task, key, start, n, fps))
        start += n
    table = pa.table(columns, schema=pa.schema(fields))
    pq.write_table(table, root / "data/chunk-000/file-000.parquet")
    pq.write_table(pa.Table.from_pylist(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    pd.DataFrame({"task_index": [0]}, index=pd.Index([task], name="task")).to_parquet(
        root / "meta" / "tasks.parquet"
    )
    info = {
        "codebase_version": "v3.0",
        "robot_type": None,
        "fps": fps,
        "total_episodes": len(episodes),
        "total_frames": start,
        "total_tasks": 1,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "splits": {"train": f"0:{len(episodes)}"},
        "features": _features(key, fps, success),
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    return root
