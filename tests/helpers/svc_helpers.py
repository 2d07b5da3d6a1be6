"""Helpers shared by the reward service tests (painted frames, encoders, waiting for a server
process)."""

from __future__ import annotations

import base64
import io
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

from evolve_envs.reward.service.backends.mock import paint_level

TOKEN = "test-token-3f9c"


def painted(progress: float, size: int = 64) -> np.ndarray:
    """A uniform grey frame that the mock intensity rule reads as `progress`."""
    return np.full((size, size, 3), paint_level(progress), np.uint8)


def encode(frame: np.ndarray, fmt: str = "PNG", quality: int = 95) -> str:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return base64.b64encode(buf.getvalue()).decode()


def painted_b64(progress: float, size: int = 64, fmt: str = "PNG") -> str:
    return encode(painted(progress, size), fmt)


def image_bytes(progress: float, size: int = 64, fmt: str = "PNG") -> bytes:
    return base64.b64decode(painted_b64(progress, size, fmt))


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_video(path: str, progresses: list[float], size: int = 64, fps: int = 4) -> None:
    """Write an H.264 MP4 (PyAV) whose frames are painted with the given progress values."""
    import av

    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for p in progresses:
            frame = av.VideoFrame.from_ndarray(painted(p, size), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def assert_json_error(resp, status: int) -> dict:  # noqa: ANN001
    """The response has `status` and a JSON body with a non-empty `error` string."""
    assert resp.status_code == status, (resp.status_code, resp.text[:300])
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body["error"], str) and body["error"], body
    return body


def wait_until_serving(
    url: str, proc: subprocess.Popen, log: Path, timeout_s: float, interval_s: float = 0.1
) -> None:
    """Poll ``GET url`` until it answers 200 (at most ``timeout_s``); fail with the tail of the
    process's ``log`` as soon as the process has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(interval_s)
    raise AssertionError(f"{url} did not answer within {timeout_s} s:\n{log.read_text()[-3000:]}")
