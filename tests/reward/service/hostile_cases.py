"""Hostile requests of the security review (issue 31) that live on the server side, and the table
of every hostile class with the answer it gets (`docs/hostile-input.md`).

The server-side classes (`SERVER_HOSTILE`): a Robometer JSON body of three million one-element
lists, a multipart body of 200,000 parts, a 30 MB base64 "image" of zeros, a valid PNG header
followed by 22 MB of padding, an H.264 video that switches from 64x64 to 4096x2730 frames
mid-stream, a `/score` request asking one model call for 131,072 image tokens or for a million
new tokens, and a backend that answers 1e308. Each builder returns a `Case` and the statuses the
server may answer; `Row.server` says which server answers it (`default`: the mock backend at the
default limits; `broken`: a mock backend that answers 1e308 to everything, so the row checks
what the service does with a model's answer, not with a request).

`page()` renders the table of these and of the earlier classes (`tests.fuzz.hostile.HOSTILE`);
`tests/reward/service/test_hostile_input.py` replays every row against real servers and fails
when the checked-in page differs from `page()`. Regenerate it with::

    python -m tests.reward.service.hostile_cases --write

Example:
    >>> case, statuses = vlm_over_budget()
    >>> case.path, statuses
    ('/score', (413,))
"""

from __future__ import annotations

import argparse
import base64
import functools
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.fuzz.harness import JSON, Case
from tests.fuzz.hostile import HOSTILE, png_bytes, tiny_mp4

__all__ = ["PAGE", "ROWS", "SERVER_HOSTILE", "Row", "page", "resolution_switch_mp4"]

Built = tuple[Case, tuple[int, ...]]
PAGE = Path(__file__).resolve().parents[3] / "docs" / "hostile-input.md"
#: Backend kwargs of the `broken` server: every answer is 1e308.
BROKEN_MODEL_KWARGS = {"rule": "intensity", "answer_override": 1e308}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------------------- F4: Robometer


def robometer_json_bomb(lists: int = 3_000_000) -> Built:
    """12 MB of JSON: three million one-element lists as the samples of `/evaluate_batch`."""
    body = b'{"samples": [' + b"[0]," * (lists - 1) + b"[0]]}"
    return Case("POST", "/evaluate_batch", JSON, body), (413,)


def multipart_part_flood(parts: int = 200_000) -> Built:
    """A multipart body of 200,000 one-byte form fields (11 MB) to `/evaluate_batch_npy`."""
    field = b'--B\r\nContent-Disposition: form-data; name="f%d"\r\n\r\n0\r\n'
    body = b"".join(field % i for i in range(parts)) + b"--B--\r\n"
    return Case("POST", "/evaluate_batch_npy", "multipart/form-data; boundary=B", body), (413,)


# ------------------------------------------------------------------ base64 images, F5: video


def base64_zeros_image(chars: int = 30_000_000) -> Built:
    """A 30 MB base64 string of zeros as `image_a` of `/pairwise-critic`."""
    body = json.dumps({"task": "t", "image_a": "A" * chars, "image_b": _b64(png_bytes(8, 8))})
    return Case("POST", "/pairwise-critic", JSON, body.encode()), (422,)


def padded_png_image(padding: int = 22_000_000) -> Built:
    """A valid 8x8 PNG followed by 22 MB of zeros (29 MB of base64) as `image_a`."""
    image = _b64(png_bytes(8, 8) + bytes(padding))
    body = json.dumps({"task": "t", "image_a": image, "image_b": _b64(png_bytes(8, 8))})
    return Case("POST", "/pairwise-critic", JSON, body.encode()), (422,)


def _annexb(width: int, height: int, frames: int) -> bytes:
    """A raw H.264 stream (Annex B) of `frames` frames of `width` x `height` (PyAV)."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="h264") as out:
        stream = out.add_stream("libx264", rate=4)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for i in range(frames):
            pixels = np.full((height, width, 3), (40 * i) % 256, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


@functools.lru_cache(maxsize=4)
def resolution_switch_mp4(
    first: tuple[int, int, int] = (64, 64, 8), then: tuple[int, int, int] = (4096, 2730, 2)
) -> bytes:
    """An MP4 whose container declares the `first` stream's frame size: `first` = (width,
    height, frames) of H.264, then `then` frames of another size; two streams joined, remuxed."""
    import av

    raw = _annexb(*first) + _annexb(*then)
    src = av.open(io.BytesIO(raw), format="h264")
    out_buf = io.BytesIO()
    with src, av.open(out_buf, "w", format="mp4") as out:
        video = src.streams.video[0]
        stream = out.add_stream_from_template(video)
        for n, packet in enumerate(p for p in src.demux(video) if p.size):
            packet.pts = packet.dts = n
            packet.stream = stream
            out.mux(packet)
    return out_buf.getvalue()


def resolution_switch_video() -> Built:
    """An MP4 that declares 64x64 frames and switches to 4096x2730 mid-stream (`/score`)."""
    body = json.dumps({"task_text": "t", "video_b64": _b64(resolution_switch_mp4())})
    return Case("POST", "/score", JSON, body.encode()), (413,)


# ------------------------------------------------------------------------ F6: model work


def vlm_over_budget() -> Built:
    """`/score` asking for 128 frames of 802,816 pixels: 131,072 image tokens in one call."""
    body = {"task_text": "t", "video_b64": _b64(tiny_mp4()), "nframes": 128}
    body["max_pixels"] = 4 * 448 * 448
    return Case("POST", "/score", JSON, json.dumps(body).encode()), (413,)


def vlm_new_tokens() -> Built:
    """`/score` asking the model to generate a million new tokens."""
    body = {"task_text": "t", "video_b64": _b64(tiny_mp4()), "nframes": 2}
    body["backend_kwargs"] = {"max_new_tokens": 10**6}
    return Case("POST", "/score", JSON, json.dumps(body).encode()), (422,)


# ---------------------------------------------------------------- F8-F11: answers in range


def out_of_range_score() -> Built:
    """A valid `/pairwise-critic` request to a backend whose every answer is 1e308."""
    image = _b64(png_bytes(8, 8))
    body = json.dumps({"task": "t", "image_a": image, "image_b": image})
    return Case("POST", "/pairwise-critic", JSON, body.encode()), (502,)


@dataclass(frozen=True)
class Row:
    """One hostile class: its builder, where the service refuses it, which finding of issue 31
    it answers (blank: an earlier class), and which server answers it."""

    build: Callable[[], Built]
    refused_by: str
    finding: str = ""
    server: str = "default"


#: The server-side classes of issue 31, by name.
SERVER_HOSTILE: dict[str, Row] = {
    "Robometer JSON bomb (3M one-element lists, 12 MB)": Row(
        robometer_json_bomb,
        "decoded-body budget, counted on the JSON text off the event loop (`max_body_nodes`)",
        "F4",
    ),
    "multipart part flood (200,000 parts)": Row(
        multipart_part_flood, "parts counted before any is read (`max_form_parts`)", "F4"
    ),
    "base64 image of zeros (30 MB)": Row(
        base64_zeros_image, "magic bytes, from the first decoded bytes of the string", "F4"
    ),
    "valid 8x8 PNG padded to 22 MB": Row(
        padded_png_image,
        "header size against the string's length, before the rest is decoded",
        "F4",
    ),
    "video switching 64x64 -> 4096x2730 mid-stream (/score)": Row(
        resolution_switch_video,
        "decoder held to the declared frame size; decoded pixels counted "
        "(`max_video_decode_pixels`)",
        "F5",
    ),
    "VLM over budget: 128 frames x 802,816 px (/score)": Row(
        vlm_over_budget, "image tokens per model call (`max_image_tokens`)", "F6"
    ),
    "VLM asked for 10^6 new tokens (/score)": Row(
        vlm_new_tokens, "new tokens a caller may ask for (`max_new_tokens`)", "F6"
    ),
    "backend answers 1e308 (out-of-range score)": Row(
        out_of_range_score,
        "answers held to their documented range; generic 5xx body",
        "F8-F11",
        server="broken",
    ),
}

#: Where the earlier classes (`tests.fuzz.hostile.HOSTILE`) are refused.
EARLIER_REFUSED_BY: dict[str, str] = {
    "aliased metadata pickle (10^40 paths, 2 KB)": "decoded-body budget, shared references "
    "counted each time (`max_body_nodes`)",
    "recursive prompts pickle": "decoded-body budget: a field that refers to itself",
    "memo index 2^27.7 pickle (13 bytes)": "restricted unpickler's opcode scan",
    "aliased 1 MB image x100 pickle": "decoded-body budget (`max_body_bytes`)",
    "numpy 1 MB array in metadata pickle": "decoded-body budget: arrays by element count",
    "wide JSON (2M values in backend_kwargs)": "decoded-body budget on the JSON text",
    "deep JSON frames (100k levels, /trajectory-critic)": "decoded-body budget (`max_body_depth`)",
    "deep JSON image_a (100k levels, /pairwise-critic)": "decoded-body budget (`max_body_depth`)",
    "16 PNG frames 4096x4096": "decoding memory from the PNG header (`max_image_decode_bytes`)",
    "PNG bomb (declares 30000x30000)": "image side from the header (`max_image_side`)",
    "lying JPEG x16 (declares 4096x4096)": "strict decoding: data that does not fill the "
    "declared size",
    "video 4608x4608 (/score)": "frame side from the container (`max_image_side`)",
    "gadget pickle (os.system)": "restricted unpickler: no global is resolved",
    "oversized body (65 MiB)": "body size, from `Content-Length` (`max_body_bytes`)",
    "stalled headers (slow client)": "header deadline (`header_timeout_s`), then 408 and close",
    "deep JSON messages (100k levels, /v1/chat/completions)": "decoded-body budget "
    "(`max_body_depth`)",
    "wide JSON (2M values in an ignored chat field)": "decoded-body budget on the JSON text, "
    "ignored fields included (`max_body_nodes`)",
    "16 PNG data URLs 4096x4096 (/v1/chat/completions)": "decoding memory from the PNG header "
    "(`max_image_decode_bytes`)",
    "lying JPEG data URLs x16 (/v1/chat/completions)": "strict decoding: data that does not fill "
    "the declared size",
    "remote image URL (/v1/chat/completions, never fetched)": "only `data:image/...;base64,` "
    "URLs are read; nothing is fetched",
}


def _rows() -> dict[str, Row]:
    earlier = {
        name: Row(build, EARLIER_REFUSED_BY.get(name, "see `tests/fuzz/hostile.py`"))
        for name, build in HOSTILE.items()
    }
    return {**earlier, **SERVER_HOSTILE}


#: Every hostile class of the table, earlier ones first.
ROWS: dict[str, Row] = _rows()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table() -> str:
    """The table: each class, the request, its route, the answer and where it is refused."""
    lines = [
        "| hostile request | what is sent | route | answer | refused by | finding |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in ROWS.items():
        case, statuses = row.build()
        route = f"`{case.path}`" if case.method in ("GET", "POST") else "(raw socket)"
        doc = (row.build.__doc__ or "").strip().split("\n\n")[0]
        what = " ".join(doc.split())
        answer = " or ".join(str(s) for s in statuses)
        cells = (name, what, route, answer, row.refused_by, row.finding or "—")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


_INTRO = """\
# Hostile input: what the reward service refuses

Every class of hostile request the reward service has been attacked with, one row each, with
the answer it gets and the check that gives it. `tests/reward/service/test_hostile_input.py` replays
each row against a real server (`evolve-reward-server --backend mock` at the default limits,
under an address-space cap) and requires that answer, a peak RSS growth of the server of at
most 64 MB beyond the body's own size (the kernel's high-water mark, reset before the request;
a body is held while it is read, and a JSON body that is one long string is held twice while
it is parsed), a server that keeps
serving, and, for the decoded-body rows and every row of a finding, an answer within 1 s;
`bench/p7_hostile_input.py` measures the same rows and reports the numbers. This page is
generated from the test's rows (`python -m tests.reward.service.hostile_cases --write`), and a test
fails when it differs from them. The last column names the finding of the security review
(F2–F8, [Security](security.md)) a row answers; "—" marks a class refused since before it.

The last row is not a request a caller sends: it is a backend (a mock standing in for a broken
or hostile model) that answers 1e308. The service holds every answer to its documented range
(a critic in [-100, 100], a done probability in [0, 1], a video or image score within
[-100, 100]) and answers 502 with a generic body; the clients check the same ranges again.
Error bodies of 5xx answers name the backend and nothing else (no URL, no exception text), and
the identity headers (`X-Reward-Model` and the others) are sent on successful answers only.

"""

_LIMITS = """
The limits named above are fields of `ServiceLimits`
(`evolve_envs/reward/service/limits.py`); each has a flag and an environment variable
(the table in [the reward service's page](reward-service.md) and
`evolve_envs/reward/service/README.md`).
"""


def page() -> str:
    """The whole of `docs/hostile-input.md`."""
    return _INTRO + markdown_table() + _LIMITS


def main() -> None:
    parser = argparse.ArgumentParser(description="print or write docs/hostile-input.md")
    parser.add_argument("--write", action="store_true", help=f"write {PAGE}")
    args = parser.parse_args()
    text = page()
    if args.write:
        PAGE.write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
