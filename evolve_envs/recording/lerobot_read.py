"""Reading a local LeRobotDataset v3 with pyarrow and PyAV, as a recording's episodes.

>>> import tempfile, numpy as np
>>> from evolve_envs.recording.lerobot_v3 import LeRobotWriter
>>> root = tempfile.mkdtemp() + "/ds"
>>> features = {"observation.images.image": {"dtype": "video", "shape": [16, 16, 3]},
...             "action": {"dtype": "float32", "shape": [1]}}
>>> with LeRobotWriter(root, fps=10, features=features, codec="lossless") as writer:
...     frames = [np.full((16, 16, 3), 20 * k, np.uint8) for k in range(5)]
...     _ = writer.add_episode("push", {"action": np.arange(5)},
...                            {"observation.images.image": frames})
>>> (episode,) = LeRobotRecording(root)
>>> episode.meta["task"], len(episode), episode.frames([0, 4])[:, 0, 0, 0].tolist()
('push', 4, [0, 80])
>>> episode.meta["success"], episode.meta["success_known"], episode.column("step")[-1]
(True, False, 4)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.recording.lerobot_video import decode_frames
from evolve_envs.recording.orientation import MUJOCO_ORIENTATIONS, reorient

if TYPE_CHECKING:
    import pyarrow as pa


__all__ = ["LeRobotEpisode", "LeRobotRecording", "model_labels"]

RUN_LABEL = "run"


def model_labels(features: Sequence[str]) -> list[str]:
    """The labels of the ``reward_model.<label>.progress`` columns among ``features``.

    >>> model_labels(["action", "reward_model.run.progress", "reward_model.vlac.progress"])
    ['run', 'vlac']
    """
    out = []
    for name in features:
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "reward_model" and parts[2] == "progress":
            out.append(parts[1])
    return out


class LeRobotRecording(Sequence["LeRobotEpisode"]):
    """The episodes of a local LeRobotDataset v3 folder (docs/RECORDING.md)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        camera: str | None = None,
        stored_orientation: str | None = None,
        label: str | None = None,
    ) -> None:
        import pyarrow.parquet as pq

        self.root = Path(root)
        self.info = json.loads((self.root / "meta" / "info.json").read_text())
        version = str(self.info.get("codebase_version", ""))
        if not version.startswith("v3"):
            raise ValueError(
                f"{self.root} is a LeRobot dataset of version {version or '(none)'}; "
                "only v3 is read (lerobot's convert_dataset_v21_to_v30 converts older ones)"
            )
        if stored_orientation is not None and stored_orientation not in MUJOCO_ORIENTATIONS:
            raise ValueError(
                f"stored_orientation must be one of {', '.join(MUJOCO_ORIENTATIONS)}, "
                f"got {stored_orientation!r}"
            )
        self.features: dict[str, dict[str, object]] = self.info["features"]
        self.fps = float(self.info["fps"])
        self.cameras = [k for k, ft in self.features.items() if ft["dtype"] in ("video", "image")]
        self.camera = self._pick_camera(camera)
        self.stored_orientation = stored_orientation
        labels = model_labels(self.features)
        if label is not None and label not in labels:
            raise ValueError(
                f"{self.root} has no reward_model.{label}.* columns "
                f"(labels there: {', '.join(labels) or 'none'})"
            )
        fallback = RUN_LABEL if RUN_LABEL in labels else (labels[0] if labels else None)
        self.label = label or fallback
        self.meta: dict[str, object] = {
            "format": "lerobot",
            "codebase_version": version,
            "fps": self.fps,
            "camera": self.camera,
            "cameras": self.cameras,
        }
        tasks_path = self.root / "meta" / "tasks.parquet"
        self.tasks: dict[int, str] = {}
        if tasks_path.is_file():
            table = pq.read_table(tasks_path)
            pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
            name = (
                "task"
                if "task" in table.column_names
                else (pandas_meta.get("index_columns") or [None])[0]
            )
            if name in table.column_names:
                self.tasks = dict(
                    zip(
                        table.column("task_index").to_pylist(),
                        table.column(name).to_pylist(),
                        strict=True,
                    )
                )
        rows: list[dict[str, object]] = []
        for path in sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):
            table = pq.read_table(path)
            keep = [c for c in table.column_names if not c.startswith("stats/")]
            rows.extend(table.select(keep).to_pylist())
        rows.sort(key=lambda r: int(r["episode_index"]))
        self._tables: dict[Path, pa.Table] = {}
        self.episodes = [LeRobotEpisode(self, row) for row in rows]

    def _pick_camera(self, camera: str | None) -> str:
        if not self.cameras:
            raise ValueError(f"{self.root} has no camera (no video or image feature)")
        if camera is not None:
            for key in (camera, f"observation.images.{camera}"):
                if key in self.cameras:
                    return key
            raise ValueError(
                f"{self.root} has no camera {camera!r} (cameras: {', '.join(self.cameras)})"
            )
        marked = [
            k for k in self.cameras if (self.features[k].get("info") or {}).get("reward_camera")
        ]
        if marked:
            return marked[0]
        return (
            "observation.images.image"
            if "observation.images.image" in self.cameras
            else (self.cameras[0])
        )

    def path(self, template: str, **fields: object) -> Path:
        """A file of the dataset from one of ``info.json``'s path templates; one that would lie
        outside the dataset's folder is refused."""
        path = (self.root / str(self.info[template]).format(**fields)).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError(f"{self.root}: {template} points outside the dataset ({path})")
        return path

    def data_table(self, chunk: int, file: int) -> pa.Table:
        """One data file as a ``pyarrow.Table`` (the last two read are kept)."""
        import pyarrow.parquet as pq

        path = self.path("data_path", chunk_index=chunk, file_index=file)
        if path not in self._tables:
            if len(self._tables) >= 2:
                self._tables.pop(next(iter(self._tables)))
            self._tables[path] = pq.read_table(path)
        return self._tables[path]

    def orientation(self, camera: str) -> str | None:
        """The MuJoCo orientation of a camera's stored frames, where known."""
        stated = (self.features[camera].get("info") or {}).get("image_orientation")
        if stated in MUJOCO_ORIENTATIONS:
            return str(stated)
        return self.stored_orientation if stated is None else None

    def __getitem__(self, i: int) -> LeRobotEpisode:  # type: ignore[override]
        return self.episodes[i]

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[LeRobotEpisode]:
        return iter(self.episodes)


class LeRobotEpisode:
    """One episode of a :class:`LeRobotRecording`; ``len()`` is its frames after the first.
    The module docstring has a runnable example."""

    def __init__(self, dataset: LeRobotRecording, row: dict[str, object]) -> None:
        self.dataset = dataset
        self.row = row
        self.index = int(row["episode_index"])
        self._table: pa.Table | None = None
        tasks = row.get("tasks") or []
        data_path = dataset.info["data_path"].format(
            chunk_index=row.get("data/chunk_index", 0), file_index=row.get("data/file_index", 0)
        )
        self.meta: dict[str, object] = {
            "episode_id": f"episode_{self.index:06d}",
            "episode_index": self.index,
            "task": str(tasks[0]) if tasks else None,
            "length": int(row["length"]) - 1,
            "file": data_path,
            "camera": dataset.camera,
            "seed": None,
            "init_state_id": None,
        }
        if "next.success" in dataset.features:
            self.meta["success_known"] = True
            self.meta["success"] = None  # read with the data, below
        else:
            self.meta["success_known"] = False
            self.meta["success"] = True  # a dataset of demonstrations
        if self.meta["task"] is None:
            self.meta["task"] = self._task_from_index()
        if self.meta["success"] is None:
            self.meta["success"] = bool(any(self.column("next.success")))

    def _task_from_index(self) -> str:
        indices = set(self.column("task_index"))
        found = [self.dataset.tasks[i] for i in sorted(indices) if i in self.dataset.tasks]
        if not found:
            raise ValueError(
                f"{self.dataset.root}: episode {self.index} has no task (meta/episodes has no "
                f"'tasks' for it and task_index {sorted(indices)} is not in meta/tasks.parquet)"
            )
        return str(found[0])

    @property
    def cameras(self) -> list[str]:
        """The dataset's cameras, the default one first."""
        return [self.dataset.camera, *(c for c in self.dataset.cameras if c != self.dataset.camera)]

    def table(self) -> pa.Table:
        """The episode's rows as a ``pyarrow.Table``, in frame order."""
        if self._table is None:
            import pyarrow.compute as pc

            data = self.dataset.data_table(
                int(self.row.get("data/chunk_index", 0)), int(self.row.get("data/file_index", 0))
            )
            start, count = self.row.get("dataset_from_index"), int(self.row["length"])
            if start is not None and data.num_rows and "index" in data.column_names:
                rows = data.slice(int(start) - int(data.column("index")[0].as_py()), count)
                ours = pc.all(pc.equal(rows.column("episode_index"), self.index)).as_py()
                if rows.num_rows == count and ours:  # a file in index order: the fast way
                    self._table = rows.sort_by("frame_index")
                    return self._table
            rows = data.filter(pc.equal(data.column("episode_index"), self.index))
            self._table = rows.sort_by("frame_index")
        return self._table

    def column(self, name: str) -> list[object]:
        """A column of the dataset, or a recording's name for one (docs/RECORDING.md)."""
        table = self.table()
        label = self.dataset.label
        if name == "step":
            return table.column("frame_index").to_pylist()
        if name == "state":
            name = "observation.state"
        elif name == "is_success":
            name = "next.success"
        elif name in ("model_progress", "is_check"):
            if label is None:
                raise ValueError(f"{self.dataset.root} has no reward_model.<label>.* columns")
            flags = f"reward_model.{label}.is_check"  # without it: every frame was judged
            checks = (
                table.column(flags).to_pylist()
                if flags in table.column_names
                else [True] * table.num_rows
            )
            if name == "is_check":
                return checks
            values = table.column(f"reward_model.{label}.progress").to_pylist()
            return [v if c else None for v, c in zip(values, checks, strict=True)]
        if name not in table.column_names:
            raise ValueError(f"{self.dataset.root} has no column {name!r}")
        return table.column(name).to_pylist()

    def frames(
        self, indices: Sequence[int] | None = None, *, camera: str | None = None
    ) -> np.ndarray:
        """Decoded frames ``[N, H, W, 3]`` of ``camera`` (default: the dataset's), upright where
        their orientation is known."""
        key = self.dataset._pick_camera(camera) if camera is not None else self.dataset.camera
        count = int(self.row["length"])
        picks = list(range(count)) if indices is None else [int(i) for i in indices]
        bad = [i for i in picks if not 0 <= i < count]
        if bad:
            raise IndexError(f"episode {self.index} has {count} frames; no frame {bad[0]}")
        feature = self.dataset.features[key]
        if feature["dtype"] == "video":
            path = self.dataset.path(
                "video_path",
                video_key=key,
                chunk_index=int(self.row[f"videos/{key}/chunk_index"]),
                file_index=int(self.row[f"videos/{key}/file_index"]),
            )
            frames = decode_frames(
                path,
                from_timestamp=float(self.row[f"videos/{key}/from_timestamp"]),
                count=count,
                fps=self.dataset.fps,
                indices=picks,
            )
        else:
            frames = self._images(key, picks)
        stored = self.dataset.orientation(key)
        return frames if stored is None else reorient(frames, stored, "upright")

    def _images(self, key: str, picks: list[int]) -> np.ndarray:
        import io

        from PIL import Image

        cells = self.table().column(key)
        out = []
        for i in picks:
            cell = cells[i].as_py()
            raw = cell["bytes"] if isinstance(cell, dict) else cell
            if raw is None:
                path = (self.dataset.root / str(cell["path"])).resolve()
                if self.dataset.root.resolve() not in path.parents:
                    raise ValueError(f"{self.dataset.root}: image {path} is outside the dataset")
                raw = path.read_bytes()
            out.append(np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")))
        return np.stack(out)

    def __len__(self) -> int:
        return int(self.row["length"]) - 1
