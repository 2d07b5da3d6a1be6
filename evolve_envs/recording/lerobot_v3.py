"""Writing LeRobotDataset v3 (``codebase_version: "v3.0"``) with pyarrow and PyAV, no lerobot.

>>> import json, tempfile, numpy as np
>>> root = tempfile.mkdtemp() + "/ds"
>>> features = {"observation.images.image": {"dtype": "video", "shape": [16, 16, 3]},
...             "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]}}
>>> with LeRobotWriter(root, fps=10, features=features, codec="lossless") as writer:
...     for n in (4, 3):
...         frames = [np.full((16, 16, 3), 9 * k, np.uint8) for k in range(n)]
...         _ = writer.add_episode("reach", {"action": np.zeros((n, 2))},
...                                {"observation.images.image": frames})
>>> info = json.load(open(root + "/meta/info.json"))
>>> info["codebase_version"], info["total_episodes"], info["total_frames"], info["splits"]
('v3.0', 2, 7, {'train': '0:2'})
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from evolve_envs.recording.lerobot_arrow import arrow_type, pyarrow_modules, tasks_table
from evolve_envs.recording.lerobot_stats import aggregate_stats, feature_stats, image_stats
from evolve_envs.recording.lerobot_video import VideoFile, check_codec, video_info

__all__ = [
    "CODEBASE_VERSION",
    "DATA_PATH",
    "DEFAULT_FEATURES",
    "EPISODES_PATH",
    "LeRobotWriter",
    "TASKS_PATH",
    "VIDEO_PATH",
]

CODEBASE_VERSION = "v3.0"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
TASKS_PATH = "meta/tasks.parquet"
#: the columns every v3 data file has, after the dataset's own features
DEFAULT_FEATURES: dict[str, dict[str, object]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
_NUMPY = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
          "bool": np.bool_}  # fmt: skip


def _plain(stats: Mapping[str, np.ndarray]) -> dict[str, object]:
    return {k: np.asarray(v).tolist() for k, v in stats.items()}


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


class LeRobotWriter:
    """Writes a LeRobotDataset v3 folder episode by episode (docs/RECORDING.md)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fps: int,
        features: Mapping[str, Mapping[str, object]],
        codec: str = "av1",
        robot_type: str | None = None,
        video_info_extra: Mapping[str, Mapping[str, object]] | None = None,
        chunks_size: int = 1000,
        data_files_size_in_mb: int = 100,
        video_files_size_in_mb: int = 200,
    ) -> None:
        self.root = Path(root)
        if self.root.exists():
            raise FileExistsError(f"{self.root} exists; give a new folder for the dataset")
        if int(fps) != fps or fps <= 0:
            raise ValueError(f"fps must be a positive integer, got {fps}")
        self.fps = int(fps)
        self.codec = check_codec(codec)
        self.features = {k: {"names": None, **dict(v)} for k, v in features.items()}
        for ft in self.features.values():
            if ft["dtype"] != "video":
                arrow_type(ft)  # refuses what cannot be written, now
            ft["shape"] = list(ft["shape"])
        self.video_keys = [k for k, ft in self.features.items() if ft["dtype"] == "video"]
        self.robot_type = robot_type
        self.video_info_extra = {k: dict(v) for k, v in (video_info_extra or {}).items()}
        self.chunks_size = int(chunks_size)
        self.data_mb = int(data_files_size_in_mb)
        self.video_mb = int(video_files_size_in_mb)
        self._tmp = self.root.parent / f".{self.root.name}.writing-{uuid.uuid4().hex[:8]}"
        self._tmp.mkdir(parents=True)
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict[str, object]] = []
        self._stats: list[dict[str, dict[str, np.ndarray]]] = []
        self._frames = 0
        self._data: dict[str, object] = {"chunk": 0, "file": 0, "writer": None, "bytes": 0}
        self._videos: dict[str, dict[str, object]] = {
            k: {"chunk": 0, "file": 0, "video": None} for k in self.video_keys
        }
        self._first_video: dict[str, Path] = {}

    # ------------------------------------------------------------------ episodes
    def add_episode(
        self,
        task: str,
        data: Mapping[str, object],
        videos: Mapping[str, Sequence[np.ndarray]] | None = None,
        *,
        extra: Mapping[str, object] | None = None,
    ) -> int:
        """Add one episode: ``data`` holds one column (``[L, ...]``) per non-video feature,
        ``videos`` the ``L`` frames of each camera. ``extra``: more columns of its row in
        ``meta/episodes``. Returns the episode's index."""
        videos = dict(videos or {})
        expected = [k for k, ft in self.features.items() if ft["dtype"] != "video"]
        if set(data) != set(expected) or set(videos) != set(self.video_keys):
            raise ValueError(
                f"episode columns {sorted(data)} and videos {sorted(videos)} do not match the "
                f"features {sorted(expected)} and {sorted(self.video_keys)}"
            )
        lengths = {len(v) for v in [*data.values(), *videos.values()]}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"an episode's columns and videos differ in length: {lengths}")
        (length,) = lengths
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"an episode needs a task (its instruction), got {task!r}")
        index = len(self.episodes)
        task_index = self.tasks.setdefault(task, len(self.tasks))
        frame_index = np.arange(length, dtype=np.int64)
        columns: dict[str, np.ndarray | list[str]] = {}
        for name in expected:
            ft = self.features[name]
            if ft["dtype"] == "string":
                columns[name] = [str(v) for v in data[name]]
                continue
            arr = np.asarray(data[name], dtype=_NUMPY[ft["dtype"]])
            columns[name] = arr.reshape(length, *([] if ft["shape"] == [1] else ft["shape"]))
        columns.update(
            {
                "timestamp": (frame_index / self.fps).astype(np.float32),
                "frame_index": frame_index,
                "episode_index": np.full(length, index, np.int64),
                "index": np.arange(self._frames, self._frames + length, dtype=np.int64),
                "task_index": np.full(length, task_index, np.int64),
            }
        )
        row: dict[str, object] = {"episode_index": index, "tasks": [task], "length": length}
        row.update(self._write_data(columns, length))
        for key in self.video_keys:
            row.update(self._write_video(key, videos[key]))
        stats = {
            name: feature_stats(np.asarray(col))
            for name, col in columns.items()
            if self._ft(name)["dtype"] != "string"
        }
        stats.update({key: image_stats(videos[key]) for key in self.video_keys})
        for name, feature_stat in stats.items():
            for stat, value in feature_stat.items():
                row[f"stats/{name}/{stat}"] = np.asarray(value).tolist()
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        row.update(dict(extra or {}))
        self.episodes.append(row)
        self._stats.append(stats)
        self._frames += length
        return index

    def _ft(self, name: str) -> dict[str, object]:
        return self.features.get(name) or DEFAULT_FEATURES[name]

    def _write_data(self, columns: Mapping[str, object], length: int) -> dict[str, object]:
        pa, pq = pyarrow_modules()
        names = [*[k for k in self.features if k not in self.video_keys], *DEFAULT_FEATURES]
        schema = pa.schema([(n, arrow_type(self._ft(n))) for n in names])
        arrays = []
        for name in names:
            col = columns[name]
            if isinstance(col, np.ndarray) and col.ndim == 2:
                flat = pa.array(col.reshape(-1), type=schema.field(name).type.value_type)
                arrays.append(pa.FixedSizeListArray.from_arrays(flat, col.shape[1]))
            else:
                arrays.append(pa.array(col, type=schema.field(name).type))
        table = pa.Table.from_arrays(arrays, schema=schema)
        d = self._data
        if d["writer"] is not None and d["bytes"] + table.nbytes >= self.data_mb * 2**20:
            d["writer"].close()
            d["writer"], d["bytes"] = None, 0
            d["chunk"], d["file"] = _next_file(d["chunk"], d["file"], self.chunks_size)
        if d["writer"] is None:
            path = self._tmp / DATA_PATH.format(chunk_index=d["chunk"], file_index=d["file"])
            path.parent.mkdir(parents=True, exist_ok=True)
            d["writer"] = pq.ParquetWriter(path, schema, compression="snappy")
            d["from"] = self._frames
        d["writer"].write_table(table)
        d["bytes"] += table.nbytes
        return {
            "data/chunk_index": d["chunk"],
            "data/file_index": d["file"],
            "dataset_from_index": self._frames,
            "dataset_to_index": self._frames + length,
        }

    def _write_video(self, key: str, frames: Sequence[np.ndarray]) -> dict[str, object]:
        v = self._videos[key]
        if v["video"] is not None and v["video"].size >= self.video_mb * 2**20:
            v["video"].close()
            v["video"] = None
            v["chunk"], v["file"] = _next_file(v["chunk"], v["file"], self.chunks_size)
        if v["video"] is None:
            rel = VIDEO_PATH.format(video_key=key, chunk_index=v["chunk"], file_index=v["file"])
            v["video"] = VideoFile(self._tmp / rel, self.codec, self.fps)
            self._first_video.setdefault(key, self.root / rel)
        video = v["video"]
        start = video.frames
        for frame in frames:
            video.add(frame)
        return {
            f"videos/{key}/chunk_index": v["chunk"],
            f"videos/{key}/file_index": v["file"],
            f"videos/{key}/from_timestamp": start / self.fps,
            f"videos/{key}/to_timestamp": video.frames / self.fps,
        }

    # ------------------------------------------------------------------ finishing
    def close(self) -> Path:
        """Finish every file, write the metadata and move the dataset to ``root``."""
        pa, pq = pyarrow_modules()
        if not self.episodes:
            self.abort()
            raise ValueError(f"no episode to write into {self.root}")
        try:
            self._finish(pa, pq)
        except BaseException:
            self.abort()
            raise
        os.replace(self._tmp, self.root)
        return self.root

    def _finish(self, pa: ModuleType, pq: ModuleType) -> None:
        if self._data["writer"] is not None:
            self._data["writer"].close()
            self._data["writer"] = None
        for v in self._videos.values():
            if v["video"] is not None:
                v["video"].close()
                v["video"] = None
        meta = self._tmp / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        pq.write_table(tasks_table(list(self.tasks)), meta / "tasks.parquet")
        episodes = self._tmp / EPISODES_PATH.format(chunk_index=0, file_index=0)
        episodes.parent.mkdir(parents=True, exist_ok=True)
        columns = {k: [row.get(k) for row in self.episodes] for k in self.episodes[0]}
        pq.write_table(pa.Table.from_pydict(columns), episodes)
        stats = {
            name: _plain(aggregate_stats([s[name] for s in self._stats])) for name in self._stats[0]
        }
        (meta / "stats.json").write_text(json.dumps(stats, indent=2))
        (meta / "info.json").write_text(json.dumps(self.info(), indent=2))

    def info(self) -> dict[str, object]:
        """``meta/info.json`` as it stands (video info read from the first finished files)."""
        features = {}
        for name, ft in self.features.items():
            ft = dict(ft)
            if ft["dtype"] == "video":
                ft["names"] = ft.get("names") or ["height", "width", "channels"]
                rel = self._first_video[name].relative_to(self.root)
                ft["info"] = {
                    **video_info(self._tmp / rel, self.codec),
                    **self.video_info_extra.get(name, {}),
                }
            features[name] = ft
        features.update({k: dict(v) for k, v in DEFAULT_FEATURES.items()})
        n = len(self.episodes)
        return {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.robot_type,
            "total_episodes": n,
            "total_frames": self._frames,
            "total_tasks": len(self.tasks),
            "chunks_size": self.chunks_size,
            "data_files_size_in_mb": self.data_mb,
            "video_files_size_in_mb": self.video_mb,
            "fps": self.fps,
            "splits": {"train": f"0:{n}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.video_keys else None,
            "features": features,
        }

    def abort(self) -> None:
        """Drop everything written so far (``root`` is never created)."""
        if self._data["writer"] is not None:
            try:
                self._data["writer"].close()
            except Exception:  # noqa: BLE001 - the folder is dropped either way
                pass
            self._data["writer"] = None
        for v in self._videos.values():
            if v["video"] is not None:
                v["video"].abort()
                v["video"] = None
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> LeRobotWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
