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


def _write_video(path: Path, episodes: Sequence[Episode], fps: int, flip: bool = False) -> None:
    path.parent.mkdir(parents=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps, options={"g": "2", "crf": "18"})
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        k = 0
        for frames, *_ in episodes:
            for frame in frames:
                frame = np.ascontiguousarray(frame[::-1]) if flip else frame
                vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
                vf.pts, vf.time_base = k, Fraction(1, fps)
                out.mux(stream.encode(vf))
                k += 1
        out.mux(stream.encode())


def _episode_row(e: int, task: str, keys: Sequence[str], start: int, n: int, fps: int) -> dict:
    row: dict = {
        "episode_index": e,
        "tasks": [task],
        "length": n,
        "data/chunk_index": 0,
        "data/file_index": 0,
        "dataset_from_index": start,
        "dataset_to_index": start + n,
    }
    for key in keys:
        row[f"videos/{key}/chunk_index"] = 0
        row[f"videos/{key}/file_index"] = 0
        row[f"videos/{key}/from_timestamp"] = start / fps
        row[f"videos/{key}/to_timestamp"] = (start + n) / fps
    row["meta/episodes/chunk_index"] = 0
    row["meta/episodes/file_index"] = 0
    return row


def _features(keys: Sequence[str], fps: int, success: bool, dims: tuple[int, int]) -> dict:
    video_info = {"video.codec": "h264", "video.pix_fmt": "yuv420p", "video.fps": fps}
    features: dict = {
        key: {
            "dtype": "video",
            "shape": [64, 64, 3],
            "names": ["height", "width", "channels"],
            "info": video_info,
        }
        for key in keys
    }
    features["observation.state"] = {"dtype": "float32", "shape": [dims[0]], "names": None}
    features["action"] = {"dtype": "float32", "shape": [dims[1]], "names": None}
    if success:
        features["next.success"] = {"dtype": "bool", **SCALAR}
    features["timestamp"] = {"dtype": "float32", **SCALAR}
    features.update({k: {"dtype": "int64", **SCALAR} for k in INDEXES})
    return features


def write_v3_dataset(
    root: Path,
    episodes: Sequence[Episode],
    *,
    key: str | Sequence[str],
    task: str | Sequence[str],
    fps: int = 10,
    robot_type: str | None = None,
) -> Path:
    """``episodes`` in the v3 layout under ``root``; returns root. ``key``: the camera, or several
    (the second and later get the frames upside down, a camera of their own); ``task``: one
    instruction, or one per episode. State and action sizes are the episodes' own."""
    keys = [key] if isinstance(key, str) else list(key)
    tasks = [task] * len(episodes) if isinstance(task, str) else list(task)
    names = list(dict.fromkeys(tasks))
    dims = (len(episodes[0][1][0]), len(episodes[0][2][0]))
    success = all(ep[3] is not None for ep in episodes)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    for i, k in enumerate(keys):
        _write_video(root / "videos" / k / "chunk-000" / "file-000.mp4", episodes, fps, i > 0)
    fields = [
        ("observation.state", pa.list_(pa.float32(), dims[0])),
        ("action", pa.list_(pa.float32(), dims[1])),
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
        columns["task_index"] += [names.index(tasks[e])] * n
        rows.append(_episode_row(e, tasks[e], keys, start, n, fps))
        start += n
    table = pa.table(columns, schema=pa.schema(fields))
    pq.write_table(table, root / "data/chunk-000/file-000.parquet")
    pq.write_table(pa.Table.from_pylist(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    pd.DataFrame(
        {"task_index": list(range(len(names)))}, index=pd.Index(names, name="task")
    ).to_parquet(root / "meta" / "tasks.parquet")
    info = {
        "codebase_version": "v3.0",
        "robot_type": robot_type,
        "fps": fps,
        "total_episodes": len(episodes),
        "total_frames": start,
        "total_tasks": len(names),
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "splits": {"train": f"0:{len(episodes)}"},
        "features": _features(keys, fps, success, dims),
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    return root
