"""The videos of a LeRobotDataset v3: several episodes per MP4 file, encoded and decoded with PyAV.

>>> import tempfile, numpy as np
>>> path = tempfile.mkdtemp() + "/file-000.mp4"
>>> video = VideoFile(path, CODECS["lossless"], fps=10)
>>> frames = [np.full((16, 16, 3), 10 * k, np.uint8) for k in range(6)]
>>> for frame in frames:
...     video.add(frame)
>>> video.close()
>>> got = decode_frames(path, from_timestamp=0.2, count=3, fps=10)
>>> got.shape, bool((got == np.stack(frames[2:5])).all())
((3, 16, 16, 3), True)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["CODECS", "Codec", "VideoFile", "check_codec", "decode_frames", "video_info"]


@dataclass(frozen=True)
class Codec:
    """One way of encoding a dataset's videos.

    >>> CODECS["av1"].encoder, CODECS["av1"].lossless
    ('libsvtav1', False)
    """

    name: str
    encoder: str
    pix_fmt: str
    options: dict[str, str] = field(default_factory=dict)
    lossless: bool = False

    def info(self) -> dict[str, object]:
        """The encoder settings as ``info.json`` records them (``video.g``, ``video.crf``...)."""
        out: dict[str, object] = {}
        for key in ("g", "crf", "preset", "qp"):
            if key in self.options:
                value = self.options[key]
                out[f"video.{key}"] = int(value) if value.isdigit() else value
        return out


CODECS: dict[str, Codec] = {
    "av1": Codec("av1", "libsvtav1", "yuv420p", {"g": "2", "crf": "30", "preset": "12"}),
    "h264": Codec("h264", "libx264", "yuv420p", {"g": "2", "crf": "23", "preset": "veryfast"}),
    "lossless": Codec(
        "lossless", "libx264rgb", "rgb24", {"g": "2", "qp": "0", "preset": "ultrafast"}, True
    ),
}


def _av() -> ModuleType:
    try:
        import av
    except ImportError as exc:  # pragma: no cover - av comes with the record extra
        raise ImportError(
            "LeRobot dataset videos need PyAV: pip install 'evolve-envs[record]'"
        ) from exc
    return av


def check_codec(name: str) -> Codec:
    """The codec called ``name``, refused with one line when unknown or when this PyAV build
    cannot encode it."""
    if name not in CODECS:
        raise ValueError(f"unknown codec {name!r}; choose one of {', '.join(CODECS)}")
    codec = CODECS[name]
    if codec.encoder not in _av().codecs_available:
        raise ValueError(
            f"codec {name!r} needs the {codec.encoder} encoder, which this PyAV build lacks; "
            f"choose another codec ({', '.join(CODECS)})"
        )
    return codec


class VideoFile:
    """Encodes one MP4 file frame by frame (frames of several episodes, back to back)."""

    def __init__(self, path: str | os.PathLike[str], codec: Codec, fps: int) -> None:
        self.path = os.fspath(path)
        self.codec = codec
        self.fps = int(fps)
        self.frames = 0
        self.size = 0
        self._tmp = f"{self.path}.tmp.mp4"
        self._container: Any = None
        self._stream: Any = None

    def _open(self, height: int, width: int) -> None:
        av = _av()
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only, not its banner
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._container = av.open(self._tmp, "w", format="mp4")
        stream = self._container.add_stream(
            self.codec.encoder, rate=Fraction(self.fps), options=dict(self.codec.options)
        )
        stream.width, stream.height = width, height
        stream.pix_fmt = self.codec.pix_fmt
        self._stream = stream

    def add(self, frame: np.ndarray) -> None:
        """Append one ``HxWx3`` uint8 RGB frame."""
        arr = np.ascontiguousarray(frame, dtype=np.uint8)
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise ValueError(f"video frames must be HxWx3 uint8, got shape {arr.shape}")
        if self._stream is None:
            self._open(arr.shape[0], arr.shape[1])
        elif (arr.shape[0], arr.shape[1]) != (self._stream.height, self._stream.width):
            raise ValueError(
                f"frame of {arr.shape[1]}x{arr.shape[0]} in a {self._stream.width}x"
                f"{self._stream.height} video ({self.path})"
            )
        av = _av()
        video_frame = av.VideoFrame.from_ndarray(arr, format="rgb24")
        video_frame.pts = self.frames
        video_frame.time_base = Fraction(1, self.fps)
        self._mux(self._stream.encode(video_frame))
        self.frames += 1

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self.size += packet.size
            self._container.mux(packet)

    def close(self) -> None:
        """Flush the encoder and move the finished file to its name (nothing if no frame)."""
        if self._container is None:
            return
        self._mux(self._stream.encode())
        self._container.close()
        self._container = None
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the unfinished file."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - the file is dropped either way
                pass
            self._container = None
        if os.path.exists(self._tmp):
            os.remove(self._tmp)


def video_info(path: str | os.PathLike[str], codec: Codec | None = None) -> dict[str, object]:
    """A feature's ``info`` block in ``info.json``, probed from a written file the way LeRobot
    probes its own (``video.height``, ``video.width``, ``video.codec``, ``video.pix_fmt``,
    ``video.is_depth_map``, ``video.fps``, ``video.channels``, ``has_audio``) plus the encoder
    settings of ``codec``."""
    av = _av()
    with av.open(os.fspath(path)) as container:
        stream = container.streams.video[0]
        info: dict[str, object] = {
            "video.height": int(stream.height),
            "video.width": int(stream.width),
            "video.codec": stream.codec_context.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate) if stream.base_rate else None,
            "video.channels": 3,
            "has_audio": bool(container.streams.audio),
        }
    if codec is not None:
        info.update(codec.info())
    return info


def decode_frames(
    path: str | os.PathLike[str],
    *,
    from_timestamp: float,
    count: int,
    fps: float,
    indices: list[int] | None = None,
) -> np.ndarray:
    """Frames ``indices`` (default: all ``count``) of the episode that starts at
    ``from_timestamp`` in the video ``path``, as ``[N, H, W, 3]`` uint8."""
    av = _av()
    wanted = list(range(count)) if indices is None else [int(i) for i in indices]
    if not wanted:
        return np.zeros((0, 0, 0, 3), np.uint8)
    first, last = min(wanted), max(wanted)
    got: dict[int, np.ndarray] = {}
    with av.open(os.fspath(path)) as container:
        stream = container.streams.video[0]
        start = from_timestamp + first / fps
        container.seek(max(0, int(start / stream.time_base) - 1), backward=True, stream=stream)
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            k = round((float(frame.pts * stream.time_base) - from_timestamp) * fps)
            if k > last:
                break
            if first <= k:
                got[k] = frame.to_ndarray(format="rgb24")
    missing = [k for k in wanted if k not in got]
    if missing:
        raise ValueError(
            f"{os.fspath(path)}: no frame at {from_timestamp + missing[0] / fps:.4f} s (frame "
            f"{missing[0]} of the episode starting at {from_timestamp:.4f} s)"
        )
    return np.stack([got[k] for k in wanted])
