"""Hostile request bodies, one builder per class of attack on the reward service.

Shared by the hostile-input regression table (`tests/reward/service/test_hostile_input.py`),
the fuzz corpus's seeds and the P7 benchmark (`bench/p7_hostile_input.py`). Each builder returns
a `Case` (`tests.fuzz.harness`) and what the server must answer.

Example:
    >>> case, statuses = aliased_metadata_pickle()
    >>> len(case.body) < 4096, statuses
    (True, (413,))
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import pickle
import struct
import tempfile
import zlib
from collections.abc import Callable

import numpy as np
from PIL import Image

from tests.fuzz.harness import JSON, PICKLE, Case

__all__ = ["DTYPE_SUBARRAY_CRASH", "HOSTILE", "png_bytes", "tiny_mp4"]

Built = tuple[Case, tuple[int, ...]]


class _Gadget:
    """Pickles as a call to `os.system` (what a malicious client would send)."""

    def __reduce__(self):  # noqa: ANN204
        return (os.system, ("true",))


def png_bytes(width: int, height: int, mode: str = "RGB") -> bytes:
    """A PNG of `mode` with a little texture (so it is not all one colour)."""
    img = Image.new(mode, (width, height))
    if mode in ("RGB", "L"):
        img.paste(128 if mode == "L" else (90, 120, 200), (0, 0, min(64, width), min(64, height)))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=9)
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@functools.lru_cache(maxsize=4)
def tiny_mp4(side: int = 64, frames: int = 4) -> bytes:
    """An H.264 MP4 of `frames` frames of `side` x `side` (PyAV)."""
    import av

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "v.mp4")
        with av.open(path, "w") as out:
            stream = out.add_stream("libx264", rate=4)
            stream.width = stream.height = side
            stream.pix_fmt = "yuv420p"
            for i in range(frames):
                frame = np.full((side, side, 3), (i * 40) % 256, np.uint8)
                out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
            out.mux(stream.encode())
        with open(path, "rb") as fh:
            return fh.read()


# ----------------------------------------------------------------------- decoded-body budget


def aliased_metadata_pickle(fan: int = 10, depth: int = 40) -> Built:
    """'Billion laughs': `metadata` holds a list whose `fan` entries are one inner list, `depth`
    levels deep (the pickle memo makes it legal): fan^depth paths in about 2 KB."""
    inner: list = [0]
    for _ in range(depth):
        inner = [inner] * fan
    body = {"images": [png_bytes(8, 8)], "prompts": ["p"], "metadata": {"laughs": inner}}
    return Case("POST", "/pickle", PICKLE, pickle.dumps(body, protocol=4)), (413,)


def recursive_prompts_pickle() -> Built:
    """`prompts` is a list that contains itself."""
    prompts: list = ["p"]
    prompts.append(prompts)
    body = {"images": [png_bytes(8, 8)], "prompts": prompts}
    return Case("POST", "/pickle", PICKLE, pickle.dumps(body, protocol=4)), (422,)


def memo_index_pickle() -> Built:
    """13 bytes whose LONG_BINPUT stores memo entry 218,104,063 (the C unpickler would size its
    memo array to it: gigabytes)."""
    return Case("POST", "/pickle", PICKLE, b"}\x85\x8f}r\xff\x00\x00\r\x87\x8d\x85."), (400,)


def aliased_images_pickle() -> Built:
    """One 1 MB bytes object named 100 times as `images` (100 MB of image data once decoded)."""
    blob = png_bytes(8, 8) + b"\0" * (1 << 20)
    body = {"images": [blob] * 100, "prompts": ["p"] * 100}
    return Case("POST", "/pickle", PICKLE, pickle.dumps(body, protocol=4)), (413,)


def numpy_metadata_pickle() -> Built:
    """A 1 MB uint8 array in `metadata` (a million Python ints once turned into a list)."""
    body = {"images": [png_bytes(8, 8)], "metadata": {"a": np.zeros(1 << 20, np.uint8)}}
    return Case("POST", "/pickle", PICKLE, pickle.dumps(body, protocol=4)), (413,)


def wide_json() -> Built:
    """The JSON equivalent of the aliased pickle: 2 million values in `backend_kwargs`."""
    head = b'{"task_text": "t", "video_b64": "AAAA", "backend_kwargs": {"x": ['
    body = head + b"0," * 2_000_000 + b"0]}}"
    return Case("POST", "/score", JSON, body), (413,)


def deep_json_frames(levels: int = 100_000) -> Built:
    """The JSON equivalent of the recursive pickle: `frames` nested `levels` deep."""
    body = b'{"task": "t", "frames": ' + b"[" * levels + b"]" * levels + b"}"
    return Case("POST", "/trajectory-critic", JSON, body), (413,)


def deep_json_pairwise(levels: int = 100_000) -> Built:
    """Deep nesting where FastAPI's own parser (json.loads) reads the body."""
    body = b'{"task": "t", "image_a": ' + b"[" * levels + b"]" * levels + b', "image_b": ""}'
    return Case("POST", "/pairwise-critic", JSON, body), (413,)


# ------------------------------------------------------------------------------ pixel decoding


@functools.lru_cache(maxsize=1)
def _png_4096() -> bytes:
    return png_bytes(4096, 4096)


def png_frames_4096(count: int = 16) -> Built:
    """Sixteen 4096x4096 RGB PNGs of ~50 KB each (65 MB each once decoded by Pillow)."""
    frames = [_b64(_png_4096())] * count
    body = json.dumps({"task": "t", "frames": frames, "skip": 1}).encode()
    return Case("POST", "/trajectory-critic", JSON, body), (413,)


def png_bomb() -> Built:
    """A PNG that declares 30000x30000 (a decompression bomb; its IDAT is a stub)."""
    data = bytearray(png_bytes(8, 8))
    ihdr = data.index(b"IHDR")
    data[ihdr + 4 : ihdr + 12] = struct.pack(">II", 30000, 30000)
    crc = zlib.crc32(bytes(data[ihdr : ihdr + 17])) & 0xFFFFFFFF
    data[ihdr + 17 : ihdr + 21] = struct.pack(">I", crc)
    body = json.dumps({"task": "t", "image_a": _b64(bytes(data)), "image_b": _b64(png_bytes(8, 8))})
    return Case("POST", "/pairwise-critic", JSON, body.encode()), (413,)


def lying_jpeg() -> Built:
    """A 64x64 JPEG whose header declares 4096x4096."""
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (10, 200, 30)).save(buf, "JPEG", quality=60)
    data = buf.getvalue()
    sof = data.find(b"\xff\xc0")
    data = data[: sof + 5] + struct.pack(">HH", 4096, 4096) + data[sof + 9 :]
    frames = [_b64(data)] * 16
    body = json.dumps({"task": "t", "frames": frames, "skip": 1}).encode()
    return Case("POST", "/trajectory-critic", JSON, body), (413, 422)


def video_4608() -> Built:
    """An MP4 of 4608x4608 frames (over the side limit; 64 MB a frame in RGB)."""
    body = json.dumps({"task_text": "t", "video_b64": _b64(tiny_mp4(4608, 2)), "nframes": 2})
    return Case("POST", "/score", JSON, body.encode()), (413,)


# ------------------------------------------------------------------------- earlier classes


def gadget_pickle() -> Built:
    """A pickle that calls `os.system` when loaded naively."""
    body = pickle.dumps({"images": [_Gadget()], "prompts": ["p"]})
    return Case("POST", "/pickle", PICKLE, body), (400,)


def oversized_body() -> Built:
    """65 MiB of JSON-ish bytes (over the 64 MiB body limit)."""
    return Case("POST", "/trajectory-critic", JSON, b" " * (65 << 20)), (413,)


def stalled_headers() -> Built:
    """Half of a request's headers, then nothing (a slow client)."""
    raw = b"POST /pairwise-critic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"
    return Case("STALL", "/", None, raw), (408,)


# ------------------------------------------------------------------------------ pickle codec

#: F2 (issue 31): `pickle.dumps({"a": s}, protocol=4)` where `s` reduces to
#: `numpy._core.multiarray.scalar(d, b"AAAAAAAA")` and `d` to `numpy.dtype("S8", False, True)`
#: with the state `(3, "|", (numpy.dtype("S65536"), (1000,)), None, None, 8, 1, 0)`: numpy's
#: `dtype.__setstate__` gives the 8-byte dtype a 1,000 x 64 KiB subarray, so `np.frombuffer`
#: of 8 bytes made a 64 MB view and reading it killed the process (SIGSEGV), server or client.
DTYPE_SUBARRAY_CRASH = (
    b"\x80\x04\x95\x82\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94\x8c\x16numpy._core.multiarray"
    b"\x94\x8c\x06scalar\x94\x93\x94\x8c\x05numpy\x94\x8c\x05dtype\x94\x93\x94\x8c\x02S8\x94\x89"
    b"\x88\x87\x94R\x94(K\x03\x8c\x01|\x94h\x07\x8c\x06S65536\x94\x89\x88\x87\x94R\x94M\xe8\x03"
    b"\x85\x94\x86\x94NNK\x08K\x01K\x00t\x94bC\x08AAAAAAAA\x94\x86\x94R\x94s."
)


def dtype_subarray_pickle() -> Built:
    """141 bytes: a numpy dtype rebuilt (BUILD) with a subarray 8,000 times its size, then a
    scalar of it (it crashed the process before the codec built numpy values from checked
    parts only)."""
    return Case("POST", "/pickle", PICKLE, DTYPE_SUBARRAY_CRASH), (400,)


# ------------------------------------------------------------- OpenAI-style chat (RLinf API)


def _chat(urls: list[str], **extra: object) -> bytes:
    """A `/v1/chat/completions` body shaped as RLinf's API reward worker sends it."""
    content: list[dict] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": "Task: put the bowl on the plate"})
    doc = {"model": "trend", "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(doc).encode()


def deep_json_chat(levels: int = 100_000) -> Built:
    """`messages` nested `levels` deep (the chat route's body budget)."""
    body = b'{"model": "trend", "messages": ' + b"[" * levels + b"]" * levels + b"}"
    return Case("POST", "/v1/chat/completions", JSON, body), (413,)


def wide_json_chat() -> Built:
    """2 million values in a field the chat route ignores (`temperature`)."""
    body = b'{"model": "trend", "messages": [], "temperature": [' + b"0," * 2_000_000 + b"0]}"
    return Case("POST", "/v1/chat/completions", JSON, body), (413,)


def chat_png_frames_4096(count: int = 16) -> Built:
    """Sixteen 4096x4096 PNG data URLs (65 MB each once decoded)."""
    urls = ["data:image/png;base64," + _b64(_png_4096())] * count
    return Case("POST", "/v1/chat/completions", JSON, _chat(urls)), (413,)


def chat_lying_jpeg() -> Built:
    """Sixteen 64x64 JPEG data URLs whose headers declare 4096x4096."""
    case, _ = lying_jpeg()
    frames = json.loads(case.body)["frames"]
    urls = ["data:image/jpeg;base64," + f for f in frames]
    return Case("POST", "/v1/chat/completions", JSON, _chat(urls)), (413, 422)


def chat_remote_url() -> Built:
    """An `image_url` pointing at a cloud metadata address (must be refused, never fetched)."""
    body = _chat(["http://169.254.169.254/latest/meta-data/"])
    return Case("POST", "/v1/chat/completions", JSON, body), (422,)


HOSTILE: dict[str, Callable[[], Built]] = {
    "aliased metadata pickle (10^40 paths, 2 KB)": aliased_metadata_pickle,
    "recursive prompts pickle": recursive_prompts_pickle,
    "memo index 2^27.7 pickle (13 bytes)": memo_index_pickle,
    "aliased 1 MB image x100 pickle": aliased_images_pickle,
    "numpy 1 MB array in metadata pickle": numpy_metadata_pickle,
    "wide JSON (2M values in backend_kwargs)": wide_json,
    "deep JSON frames (100k levels, /trajectory-critic)": deep_json_frames,
    "deep JSON image_a (100k levels, /pairwise-critic)": deep_json_pairwise,
    "16 PNG frames 4096x4096": png_frames_4096,
    "PNG bomb (declares 30000x30000)": png_bomb,
    "lying JPEG x16 (declares 4096x4096)": lying_jpeg,
    "video 4608x4608 (/score)": video_4608,
    "gadget pickle (os.system)": gadget_pickle,
    "oversized body (65 MiB)": oversized_body,
    "stalled headers (slow client)": stalled_headers,
    "numpy dtype BUILD with a subarray (141 bytes)": dtype_subarray_pickle,
    "deep JSON messages (100k levels, /v1/chat/completions)": deep_json_chat,
    "wide JSON (2M values in an ignored chat field)": wide_json_chat,
    "16 PNG data URLs 4096x4096 (/v1/chat/completions)": chat_png_frames_4096,
    "lying JPEG data URLs x16 (/v1/chat/completions)": chat_lying_jpeg,
    "remote image URL (/v1/chat/completions, never fetched)": chat_remote_url,
}
