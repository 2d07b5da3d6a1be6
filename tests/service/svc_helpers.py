"""Helpers shared by the reward service tests (painted frames, encoders)."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from reward_service.backends.mock import paint_level

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
