"""The recorded-episode format: one Parquet file per episode plus an append-only index.

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> w = EpisodeWriter(d)
>>> frames = [np.zeros((8, 8, 3), np.uint8)] * 3
>>> steps = [dict(action=None, reward=None, env_reward=None, model_progress=None,
...               is_check=False, terminated=False, truncated=False, is_success=False)]
>>> steps += [dict(action=[0.1, 0.2], reward=0.5, env_reward=0.0, model_progress=40.0,
...                is_check=True, terminated=False, truncated=i == 1, is_success=False)
...           for i in range(2)]
>>> meta = w.write(frames, steps, {"task": "reach", "seed": 3})
>>> rec = open_recording(d)
>>> len(rec), rec[0].meta["task"], rec[0].frames().shape, rec[0].column("model_progress")
(1, 'reach', (3, 8, 8, 3), [None, 40.0, 40.0])
>>> wrist = [np.full((8, 8, 3), 255, np.uint8)] * 3
>>> meta = w.write(frames, steps, {"task": "reach", "camera": "image"},
...                camera_frames={"wrist_image": wrist})
>>> open_recording(d)[1].cameras, int(open_recording(d)[1].frames(camera="wrist_image").min())
(['image', 'wrist_image'], 255)
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

    from evolve_envs.recording.lerobot_read import LeRobotRecording


__all__ = [
    "import_pyarrow",
    "CAMERA_COLUMN",
    "FORMAT",
    "VERSION",
    "EpisodeWriter",
    "Recording",
    "RecordedEpisode",
    "open_recording",
    "STEP_COLUMNS",
]

FORMAT = "evolve-envs-episodes"
VERSION = 2
STEP_COLUMNS = (
    "step",
    "frame",
    "action",
    "state",
    "reward",
    "env_reward",
    "model_progress",
    "is_check",
    "terminated",
    "truncated",
    "is_success",
)


def import_pyarrow(what: str = "recording or reading episodes") -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, or ``ImportError`` naming ``what`` needs them and the
    ``record`` extra that brings them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow comes with the record extra
        raise ImportError(f"{what} needs pyarrow: pip install 'evolve-envs[record]'") from exc
    return pa, pq


#: the column of a camera other than the reward camera (whose frames are in ``frame``)
CAMERA_COLUMN = "frame.{}"


def _schema(cameras: Sequence[str] = ()) -> pa.Schema:
    pa, _ = import_pyarrow()
    return pa.schema(
        [
            ("step", pa.int32()),
            ("frame", pa.binary()),
            ("action", pa.list_(pa.float64())),
            ("state", pa.list_(pa.float64())),
            ("reward", pa.float32()),
            ("env_reward", pa.float32()),
            ("model_progress", pa.float32()),
            ("is_check", pa.bool_()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("is_success", pa.bool_()),
            *[(CAMERA_COLUMN.format(key), pa.binary()) for key in cameras],
        ]
    )


def _jpeg(frame: np.ndarray | bytes, quality: int) -> bytes:
    if isinstance(frame, bytes):  # already encoded (EpisodeWriter.encode)
        return frame
    import simplejpeg

    arr = np.ascontiguousarray(frame, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"frames must be HxWx3 uint8, got shape {arr.shape}")
    return simplejpeg.encode_jpeg(arr, quality=quality, colorspace="RGB")


class EpisodeWriter:
    """Writes finished episodes into a recording directory (docs/RECORDING.md).

    >>> import tempfile
    >>> EpisodeWriter(tempfile.mkdtemp()).root.joinpath("meta.json").is_file()
    True
    """

    def __init__(
        self, root: str | os.PathLike[str], *, jpeg_quality: int = 90, meta: Mapping | None = None
    ) -> None:
        if not 1 <= int(jpeg_quality) <= 100:
            raise ValueError(f"jpeg_quality must be in [1, 100], got {jpeg_quality}")
        self.root = Path(root)
        self.jpeg_quality = int(jpeg_quality)
        (self.root / "episodes").mkdir(parents=True, exist_ok=True)
        meta_path = self.root / "meta.json"
        if meta_path.exists():
            found = json.loads(meta_path.read_text())
            if found.get("format") != FORMAT:
                raise ValueError(f"{self.root} holds another format: {found.get('format')!r}")
        else:
            body = {"format": FORMAT, "version": VERSION, "step_columns": list(STEP_COLUMNS)}
            body.update(dict(meta or {}))
            tmp = meta_path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(body, indent=2, default=str))
            os.replace(tmp, meta_path)
        self._count = 0
        self._token = uuid.uuid4().hex[:8]  # two writers in one process never share an id
        self._lock = threading.Lock()

    def encode(self, frame: np.ndarray) -> bytes:
        """One ``HxWx3`` uint8 frame as JPEG bytes, at this writer's quality."""
        return _jpeg(frame, self.jpeg_quality)

    def write(
        self,
        frames: Sequence[np.ndarray | bytes],
        steps: Sequence[Mapping[str, object]],
        meta: Mapping[str, object],
        *,
        camera_frames: Mapping[str, Sequence[np.ndarray | bytes]] | None = None,
    ) -> dict[str, object]:
        """Write one episode: ``frames[k]`` and ``steps[k]`` describe step ``k`` (0 = reset)."""
        others = dict(camera_frames or {})
        if len(frames) != len(steps):
            raise ValueError(f"{len(frames)} frames for {len(steps)} step rows")
        for key, column in others.items():
            if len(column) != len(steps):
                raise ValueError(f"{len(column)} frames of {key!r} for {len(steps)} step rows")
        pa, pq = import_pyarrow()
        with self._lock:
            self._count += 1
            episode_id = f"{time.time_ns():x}-{os.getpid()}-{self._token}-{self._count}"
        columns: dict[str, list[object]] = {c: [] for c in STEP_COLUMNS}
        for k, (frame, row) in enumerate(zip(frames, steps, strict=True)):
            columns["step"].append(k)
            columns["frame"].append(_jpeg(frame, self.jpeg_quality))
            for key in ("action", "state"):
                value = row.get(key)
                columns[key].append(
                    None if value is None else np.ravel(value).astype(np.float64).tolist()
                )
            for key in ("reward", "env_reward", "model_progress"):
                value = row.get(key)
                columns[key].append(None if value is None else float(value))
            for key in ("is_check", "terminated", "truncated", "is_success"):
                columns[key].append(bool(row.get(key, False)))
        for key, column in others.items():
            columns[CAMERA_COLUMN.format(key)] = [_jpeg(f, self.jpeg_quality) for f in column]
        table = pa.Table.from_pydict(columns, schema=_schema(list(others)))
        rel = f"episodes/{episode_id}.parquet"
        tmp = self.root / f"{rel}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.root / rel)
        line = {**dict(meta), "episode_id": episode_id, "file": rel, "length": len(steps) - 1}
        camera = meta.get("camera")
        if camera is not None or others:
            line["cameras"] = [str(camera or "frame"), *others]
        with self._lock, open(self.root / "episodes.jsonl", "a") as f:
            f.write(json.dumps(line, default=_plain) + "\n")
        return line


def _plain(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


class RecordedEpisode:
    """One recorded episode: ``meta`` (its index line) and lazily read columns and frames."""

    def __init__(self, root: Path, meta: dict[str, object], label: str | None = None) -> None:
        self.root = root
        self.meta = meta
        self.label = label
        self._table: pa.Table | None = None

    def table(self) -> pa.Table:
        """The episode's steps as a ``pyarrow.Table`` (read once)."""
        if self._table is None:
            _, pq = import_pyarrow()
            path = (self.root / str(self.meta["file"])).resolve()
            if self.root.resolve() / "episodes" not in path.parents:
                raise ValueError(
                    f"episode {self.meta.get('episode_id')!r}: file {self.meta['file']!r} is "
                    "outside the recording's episodes/ folder"
                )
            self._table = pq.read_table(path)
        return self._table

    def column(self, name: str) -> list[object]:
        """One step column as a Python list (see ``STEP_COLUMNS``); a column that a version 1
        recording lacks (``state``) reads as nulls. With a ``label`` (a relabelled model's
        columns, ``evolve-envs relabel``), ``model_progress`` and ``is_check`` are that model's."""
        table = self.table()
        if name == "state" and name not in table.column_names:
            return [None] * table.num_rows
        if self.label is not None and name in ("model_progress", "is_check"):
            prefix = f"reward_model.{self.label}."
            if prefix + "progress" not in table.column_names:
                episode = self.meta.get("episode_id")
                raise ValueError(f"episode {episode!r} has no {prefix}* columns")
            checks = table.column(prefix + "is_check").to_pylist()
            if name == "is_check":
                return checks
            values = table.column(prefix + "progress").to_pylist()
            return [v if c else None for v, c in zip(values, checks, strict=True)]
        return table.column(name).to_pylist()

    @property
    def cameras(self) -> list[str]:
        """The observation keys of the recorded cameras, the reward camera first."""
        found = self.meta.get("cameras")
        if found:
            return [str(c) for c in found]
        return [str(self.meta.get("camera") or "frame")]

    def frames(
        self, indices: Sequence[int] | None = None, *, camera: str | None = None
    ) -> np.ndarray:
        """Decoded frames ``[N, H, W, 3]`` (all, or the given step indices) of ``camera`` (default:
        the reward camera)."""
        import simplejpeg

        cameras = self.cameras
        if camera is not None and camera not in cameras:
            raise ValueError(
                f"episode {self.meta.get('episode_id')!r} has no camera {camera!r} "
                f"(recorded: {', '.join(cameras)})"
            )
        name = "frame" if camera in (None, cameras[0]) else CAMERA_COLUMN.format(camera)
        raw = self.table().column(name)
        picks = range(len(raw)) if indices is None else indices
        return np.stack([simplejpeg.decode_jpeg(raw[i].as_py()) for i in picks])

    def __len__(self) -> int:
        return int(self.meta["length"])


class Recording(Sequence[RecordedEpisode]):
    """The finished episodes of a recording directory, in the order they were written."""

    def __init__(self, root: str | os.PathLike[str], *, label: str | None = None) -> None:
        self.root = Path(root)
        meta_path = self.root / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{self.root} is not a recording (no meta.json)")
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("format") != FORMAT:
            raise ValueError(f"{self.root}: unknown format {self.meta.get('format')!r}")
        if int(self.meta.get("version", 0)) > VERSION:
            raise ValueError(
                f"{self.root}: format version {self.meta['version']} is newer than this "
                f"reader's ({VERSION})"
            )
        self.episodes: list[RecordedEpisode] = []
        index = self.root / "episodes.jsonl"
        lines = index.read_text().splitlines() if index.is_file() else []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if n == len(lines):  # a writer killed mid-line: that episode was never finished
                    warnings.warn(
                        f"{index}: ignoring an incomplete last line (a writer stopped while "
                        "appending it)",
                        stacklevel=2,
                    )
                    break
                raise ValueError(f"{index}:{n}: not a JSON line") from None
            self.episodes.append(RecordedEpisode(self.root, entry, label))

    def __getitem__(self, i: int) -> RecordedEpisode:  # type: ignore[override]
        return self.episodes[i]

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[RecordedEpisode]:
        return iter(self.episodes)


def open_recording(root: str | os.PathLike[str], **options: object) -> Recording | LeRobotRecording:
    """Open a recording directory written by :class:`EpisodeWriter`, or a LeRobotDataset v3
    folder (``meta/info.json``; ``options`` go to
    :class:`~evolve_envs.recording.lerobot_read.LeRobotRecording`). Both give episodes with
    ``meta``, ``len()``, ``frames()``, ``column()`` and ``cameras``."""
    if (Path(root) / "meta" / "info.json").is_file():
        from evolve_envs.recording.lerobot_read import LeRobotRecording

        return LeRobotRecording(root, **options)
    unknown = sorted(set(options) - {"label"})
    if unknown:
        raise TypeError(f"options {unknown} apply to LeRobot datasets only")
    return Recording(root, **options)
