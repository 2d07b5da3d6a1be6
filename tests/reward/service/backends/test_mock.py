"""MockBackend rules as pure functions (no server)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolve_envs.reward.service.backends import UnknownBackendError, make_backend
from evolve_envs.reward.service.backends.base import CriticItem, DoneItem, ImageScoreItem, VideoItem
from evolve_envs.reward.service.backends.mock import (
    MockBackend,
    change_progress,
    intensity_progress,
    mock_critic,
    paint_level,
)
from evolve_envs.reward.service.decoding.video import sample_indices


@given(st.integers(0, 100))
def test_paint_level_reads_back(p: int) -> None:
    assert intensity_progress(np.full((4, 4, 3), paint_level(p), np.uint8)) == p


@given(st.integers(0, 99), st.integers(0, 100))
def test_accumulating_critic_gives_back_target(pa: int, pb: int) -> None:
    c = mock_critic(pa, pb)
    assert -100 <= c <= 100
    if 100 * (pb - pa) / (100 - pa) >= -100:
        assert pa + (100 - pa) * c / 100 == pytest.approx(pb)


def test_critic_at_full_progress() -> None:
    assert mock_critic(100, 100) == 0.0
    assert mock_critic(100, 20) == -100.0


def test_region_limits_the_frame_area() -> None:
    frame = np.zeros((100, 100, 3), np.uint8)
    frame[:50] = paint_level(80)
    assert intensity_progress(frame) == 40
    assert intensity_progress(frame, (0.0, 0.0, 0.5, 1.0)) == 80
    backend = MockBackend(region=(0.5, 0.0, 1.0, 1.0))
    assert backend.progress(frame) == 0


def test_gray_uses_luma_weights() -> None:
    red = np.zeros((2, 2, 3), np.uint8)
    red[..., 0] = 255
    assert intensity_progress(red) == 30  # 0.299 * 100


def test_change_rule() -> None:
    f0 = np.full((8, 8, 3), 100, np.uint8)
    f1 = np.full((8, 8, 3), 132, np.uint8)
    assert change_progress(f1, f0, change_scale=64) == 50
    assert change_progress(np.full((8, 8, 3), 255, np.uint8), f0, change_scale=64) == 100
    backend = MockBackend(rule="change", change_scale=64)
    (critic,) = backend.critic_batch([CriticItem("t", f0, f1, f0)])
    assert critic == 50.0
    ((done, prob),) = backend.done_batch([DoneItem("t", f0, f0, f1)])
    assert (done, prob) == (False, 0.5)


def test_video_and_image_scores() -> None:
    backend = MockBackend()
    frames = tuple(np.full((4, 4, 3), paint_level(p), np.uint8) for p in (0, 30, 70))
    assert backend.score_video(VideoItem("t", frames)) == (0.7, None)
    assert backend.score_images([ImageScoreItem("p", frames[1])]) == [0.3]


def test_disabled_capabilities_and_fail_marker() -> None:
    backend = MockBackend(disabled=["done", "video"], fail_marker="XX")
    caps = backend.capabilities()
    assert caps.pairwise and caps.image_score and not caps.done and not caps.video
    f = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(RuntimeError, match="XX"):
        backend.critic_batch([CriticItem("do XX", f, f, f)])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rule": "nope"},
        {"region": (0.5, 0, 0.2, 1)},
        {"change_scale": 0},
        {"latency_ms": -1},
        {"disabled": ["progress"]},
    ],
)
def test_bad_mock_kwargs(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        MockBackend(**kwargs)


def test_registry() -> None:
    assert make_backend("mock", latency_ms=1).latency_ms == 1
    with pytest.raises(UnknownBackendError):
        make_backend("nope")
    with pytest.raises(ValueError, match="bad kwargs"):
        make_backend("mock", nope=1)


def test_uniform_sampling() -> None:
    assert sample_indices(10, 4) == [0, 3, 6, 9]
    assert sample_indices(3, 16) == [0, 1, 2]
    assert sample_indices(100, 1) == [99]
    assert sample_indices(0, 4) == []
    idx = sample_indices(500, 16)
    assert len(idx) == 16 and idx[0] == 0 and idx[-1] == 499 and idx == sorted(set(idx))
