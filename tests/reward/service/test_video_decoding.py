"""`/score`: no arbitrary file reads, an allow-list of containers, limits read before decoding,
server-side caps on the caller's knobs, error bodies without paths or decoder output."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import httpx
import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import assert_json_error, write_video


def _post(url: str, body: dict) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60, trust_env=False) as http:
        return http.post("/score", json=body)


def _clean(error: str) -> None:
    lowered = error.lower()
    assert "ffmpeg" not in lowered and "libav" not in lowered and " at 0x" not in lowered
    assert "/tmp" not in error and "reward-video-" not in error


def test_path_mode_is_off_by_default(default_service: EmbeddedService, tmp_path: Path) -> None:
    path = tmp_path / "episode.mp4"
    write_video(str(path), [0, 50])
    body = assert_json_error(
        _post(default_service.url, {"task_text": "t", "video_path": str(path)}), 403
    )
    assert "video_b64" in body["error"]
    _clean(body["error"])


def test_paths_outside_the_allowed_directories_are_refused_alike(
    mock_service: EmbeddedService, tmp_path: Path
) -> None:
    outside = Path(
        os.path.realpath("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd")
    )
    link = tmp_path / "link.mp4"
    link.symlink_to(outside)
    errors = set()
    for path in (
        str(outside),
        "/etc/no-such-file.mp4",
        str(link),
        str(tmp_path / "../../../etc/passwd"),
    ):
        errors.add(
            assert_json_error(_post(mock_service.url, {"task_text": "t", "video_path": path}), 422)[
                "error"
            ]
        )
    assert len(errors) == 1  # the answer does not tell which files exist
    _clean(errors.pop())


def test_inline_bytes_only_open_allowed_containers(
    mock_service: EmbeddedService, tmp_path: Path
) -> None:
    target = tmp_path / "secret.mp4"
    write_video(str(target), [70, 70])
    concat = f"ffconcat version 1.0\nfile '{target}'\n".encode()
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    for data in (concat, png, b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 64):
        resp = _post(
            mock_service.url, {"task_text": "t", "video_b64": base64.b64encode(data).decode()}
        )
        _clean(assert_json_error(resp, 422)["error"])


def test_frame_side_and_caller_knobs_are_checked_before_decoding(
    mock_service: EmbeddedService, tmp_path: Path
) -> None:
    big = tmp_path / "big.mp4"
    write_video(str(big), [10, 20, 30], size=1280)  # over this server's 1024-pixel side limit
    b64 = base64.b64encode(big.read_bytes()).decode()
    error = assert_json_error(_post(mock_service.url, {"task_text": "t", "video_b64": b64}), 413)[
        "error"
    ]
    assert "1280x1280" in error
    small = tmp_path / "small.mp4"
    write_video(str(small), [10, 20, 30])
    b64 = base64.b64encode(small.read_bytes()).decode()
    for knobs in ({"nframes": 129}, {"max_pixels": 10**9}):
        assert_json_error(
            _post(mock_service.url, {"task_text": "t", "video_b64": b64, **knobs}), 422
        )
    ok = _post(mock_service.url, {"task_text": "t", "video_b64": b64, "nframes": 128})
    assert ok.status_code == 200 and ok.json()["score"] == pytest.approx(0.3, abs=0.011)


def test_decoding_work_is_bounded_from_the_container_header(tmp_path: Path) -> None:
    from evolve_envs.reward.service.decoding.video import VideoTooLargeError, read_video_bytes

    path = tmp_path / "v.mp4"
    write_video(str(path), [10] * 12, size=64)  # 12 frames of 64x64 = 49,152 pixels to decode
    with pytest.raises(VideoTooLargeError, match="12 frames of 64x64") as info:
        read_video_bytes(path.read_bytes(), max_decode_pixels=12 * 64 * 64 - 1)
    assert info.value.status_code == 413
    assert len(read_video_bytes(path.read_bytes(), nframes=4, max_decode_pixels=12 * 64 * 64)) == 4


def test_a_stream_switching_to_larger_frames_is_refused_at_the_switch() -> None:
    """The container declares 64x64; the stream switches to 4096x2730: 413 at that frame,
    before the decoder allocates it (the 64x64 frames alone would be within every limit)."""
    from evolve_envs.reward.service.decoding.video import VideoTooLargeError, read_video_bytes
    from tests.reward.service.hostile_cases import resolution_switch_mp4

    data = resolution_switch_mp4()
    with pytest.raises(VideoTooLargeError, match="64x64 .* to 4096x2730") as info:
        read_video_bytes(data, nframes=16)
    assert info.value.status_code == 413


def test_decoded_pixels_are_counted_whatever_the_container_declared() -> None:
    """48x48 declared (8 frames: 18,432 pixels), four frames then 64x64 (within FFmpeg's
    alignment of the declared size): decoding stops once the pixels decoded pass the limit."""
    from evolve_envs.reward.service.decoding.video import VideoTooLargeError, read_video_bytes
    from tests.reward.service.hostile_cases import resolution_switch_mp4

    data = resolution_switch_mp4((48, 48, 4), (64, 64, 4))
    assert len(read_video_bytes(data, nframes=8)) == 8  # within the default limits
    with pytest.raises(VideoTooLargeError, match="reached 21504 pixels at frame 6") as info:
        read_video_bytes(data, nframes=8, max_decode_pixels=8 * 48 * 48)
    assert info.value.status_code == 413


def test_a_base64_non_video_is_refused_from_its_first_bytes(mock_service: EmbeddedService) -> None:
    """A 6 MB base64 string of zeros: 422 from its first decoded bytes, never decoded whole."""
    resp = _post(mock_service.url, {"task_text": "t", "video_b64": "A" * 6_000_000})
    assert "not an MP4" in assert_json_error(resp, 422)["error"]


def test_model_work_per_call_is_capped(mock_service: EmbeddedService, tmp_path: Path) -> None:
    """`nframes` x `max_pixels` as image tokens (413 over `max_image_tokens`, 32,768 by
    default) and the new tokens a caller asks for (422 over `max_new_tokens`)."""
    path = tmp_path / "small.mp4"
    write_video(str(path), [10, 20, 30])
    body = {"task_text": "t", "video_b64": base64.b64encode(path.read_bytes()).decode()}
    over = _post(mock_service.url, {**body, "nframes": 128, "max_pixels": 4 * 448 * 448})
    error = assert_json_error(over, 413)
    assert "131072 image tokens" in error["error"] and error["limit"] == 32768
    at_cap = _post(mock_service.url, {**body, "nframes": 128, "max_pixels": 448 * 448})
    assert at_cap.status_code == 200  # 128 x 256 tokens: the cap itself
    many = _post(mock_service.url, {**body, "backend_kwargs": {"max_new_tokens": 1025}})
    assert "max_new_tokens is 1025" in assert_json_error(many, 422)["error"]
    fine = _post(mock_service.url, {**body, "backend_kwargs": {"max_new_tokens": 1024}})
    assert fine.status_code == 200
