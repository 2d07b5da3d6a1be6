"""JPEG/base64 frame encoding: round trips keep painted intensities; bad input is refused."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import simplejpeg

from evolve_envs.reward.clients import frame_encoding
from evolve_envs.reward.clients.frame_encoding import (
    b64decode_text,
    encode_jpeg,
    encode_jpeg_b64,
    validate_frame,
)


@pytest.mark.parametrize("level", [0, 26, 128, 242, 255])
def test_uniform_rgb_frame_round_trips_within_one_grey_level(level):
    frame = np.full((48, 64, 3), level, np.uint8)
    decoded = simplejpeg.decode_jpeg(encode_jpeg(frame, quality=85))
    assert decoded.shape == (48, 64, 3)
    assert abs(decoded.astype(float).mean() - level) <= 1.0


def test_grey_frames_hxw_and_hxwx1_encode_as_single_channel_jpeg():
    for frame in (np.full((16, 20), 100, np.uint8), np.full((16, 20, 1), 100, np.uint8)):
        data = encode_jpeg(frame)
        decoded = simplejpeg.decode_jpeg(data, colorspace="GRAY")
        assert decoded.shape == (16, 20, 1)
        assert abs(decoded.astype(float).mean() - 100) <= 1.0


def test_non_contiguous_views_are_encoded_like_their_copy():
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    flipped = frame[::-1, ::-1]
    assert not flipped.flags.c_contiguous
    assert encode_jpeg(flipped) == encode_jpeg(np.ascontiguousarray(flipped))


def test_quality_changes_size_and_b64_is_standard_base64():
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    assert len(encode_jpeg(frame, quality=30)) < len(encode_jpeg(frame, quality=95))
    text = encode_jpeg_b64(frame, quality=85)
    assert base64.b64decode(text) == encode_jpeg(frame, quality=85)
    assert b64decode_text(text) == encode_jpeg(frame, quality=85)
    with pytest.raises(ValueError):
        b64decode_text("not base64!!")


def test_pillow_fallback_produces_a_decodable_jpeg():
    frame = np.full((24, 24, 3), 200, np.uint8)
    data = frame_encoding._encode_jpeg_pillow(frame, 85, grey=False)
    assert data[:2] == b"\xff\xd8"
    assert abs(simplejpeg.decode_jpeg(data).astype(float).mean() - 200) <= 1.0


@pytest.mark.parametrize(
    ("frame", "exc", "words"),
    [
        ([[1, 2], [3, 4]], TypeError, "numpy array"),
        (np.zeros((8, 8, 3), np.float32), ValueError, "uint8"),
        (np.zeros((8, 8, 4), np.uint8), ValueError, "alpha"),
        (np.zeros((2, 8, 8, 3), np.uint8), ValueError, "4-D"),
        (np.zeros((0, 8, 3), np.uint8), ValueError, "empty"),
        (np.zeros(8, np.uint8), ValueError, "1-D"),
    ],
)
def test_invalid_frames_raise_clear_errors(frame, exc, words):
    with pytest.raises(exc, match=words):
        validate_frame(frame, "obs")
    with pytest.raises(exc, match="obs|frame"):
        validate_frame(frame, "obs")


@pytest.mark.parametrize("quality", [0, 101, 85.0, True])
def test_invalid_quality_is_refused(quality):
    with pytest.raises((ValueError, TypeError), match="quality"):
        encode_jpeg(np.zeros((8, 8, 3), np.uint8), quality=quality)
