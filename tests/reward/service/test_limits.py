"""Decode before trust, per-request pixel budget, 16-bit PNGs, and fairness between requests."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from PIL import Image

from evolve_envs.reward.service.decoding.images import (
    ImageDecodeError,
    ImageTooLargeError,
    PixelBudget,
    decode_image_bytes,
)
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import assert_json_error, painted_b64


def _jpeg(size: int, quality: int = 60) -> bytes:
    rng = np.random.default_rng(size)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size, size, 3), np.uint8)).save(
        buf, "JPEG", quality=quality
    )
    return buf.getvalue()


def lying_jpeg(declared: int, actual: int = 64) -> bytes:
    """A small JPEG whose frame header declares `declared` x `declared` pixels."""
    data = _jpeg(actual)
    sof = data.find(b"\xff\xc0")
    return data[: sof + 5] + struct.pack(">HH", declared, declared) + data[sof + 9 :]


# ------------------------------------------------------------------------ decoder, in-process


def test_lying_and_truncated_jpegs_are_refused() -> None:
    with pytest.raises(ImageDecodeError, match="truncated or inconsistent") as info:
        decode_image_bytes(lying_jpeg(4000))
    assert info.value.status_code == 422
    whole = _jpeg(64)
    with pytest.raises(ImageDecodeError) as info:
        decode_image_bytes(whole[: len(whole) // 2])
    assert info.value.status_code == 422
    assert decode_image_bytes(whole).shape == (64, 64, 3)


def test_large_jpegs_are_decoded_reduced_towards_the_model_size() -> None:
    frame = decode_image_bytes(_jpeg(2048, quality=30))
    assert frame.shape == (512, 512, 3)  # 1/4 DCT scale: the smallest not below 448
    assert decode_image_bytes(_jpeg(300)).shape == (300, 300, 3)  # small ones stay as they are


def test_pixel_budget_is_charged_from_headers_before_decoding() -> None:
    budget = PixelBudget(3 * 512 * 512)
    for _ in range(3):  # 4000x4000 declared, charged at the 512x512 it decodes to ...
        with pytest.raises(ImageDecodeError):
            decode_image_bytes(lying_jpeg(4000), budget=budget)
    with pytest.raises(ImageTooLargeError, match="decoded pixels per request") as info:
        decode_image_bytes(lying_jpeg(4000), budget=budget)  # ... so the fourth is not decoded
    assert info.value.status_code == 413


def test_16_bit_greyscale_png_is_scaled_not_clipped() -> None:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), 32768, np.uint16)).save(buf, "PNG")
    assert Image.open(io.BytesIO(buf.getvalue())).mode.startswith("I")
    frame = decode_image_bytes(buf.getvalue())
    assert frame.shape == (8, 8, 3) and np.all(frame == 128)


# ------------------------------------------------------------------------ a real server


@pytest.fixture(scope="module")
def slow_mock() -> Iterator[EmbeddedService]:
    """Mock backend with 30 ms per backend batch, no batch window, a 2.5-Mpixel request budget."""
    with EmbeddedService(
        "mock",
        {"latency_ms": 30},
        extra_args=["--batch-window-ms", "0", "--max-request-mpix", "2.5"],
    ) as svc:
        yield svc


def test_lying_jpegs_and_over_budget_requests_get_4xx(slow_mock: EmbeddedService) -> None:
    lie = base64.b64encode(lying_jpeg(4000)).decode()
    with httpx.Client(base_url=slow_mock.url, timeout=30, trust_env=False) as http:
        body = {"task": "t", "frames": [lie] * 16, "skip": 1}
        assert (
            "truncated or inconsistent"
            in assert_json_error(http.post("/trajectory-critic", json=body), 422)["error"]
        )
        big_png = painted_b64(50, size=1024)  # 1 Mpixel each: the third is over 2.5 Mpixel
        body = {"task": "t", "frames": [big_png] * 3, "skip": 1}
        assert (
            "decoded pixels"
            in assert_json_error(http.post("/trajectory-critic", json=body), 413)["error"]
        )
        ok = http.post(
            "/pairwise-critic", json={"task": "t", "image_a": big_png, "image_b": big_png}
        )
        assert ok.status_code == 200 and ok.json()["critic"] == 0.0


def test_small_request_is_served_between_the_chunks_of_a_large_one(
    slow_mock: EmbeddedService,
) -> None:
    frames = [painted_b64(p % 100, size=32) for p in range(257)]  # 256 pairs = 32 chunks of 8
    with httpx.Client(base_url=slow_mock.url, timeout=60, trust_env=False) as http:

        def critic_batches() -> int:
            by_kind = http.get("/metrics").json()["batches"]["by_kind"]
            return by_kind.get("critic", {}).get("count", 0)

        start = critic_batches()
        big: dict[str, httpx.Response] = {}
        worker = threading.Thread(
            target=lambda: big.setdefault(
                "resp",
                http.post("/trajectory-critic", json={"task": "t", "frames": frames, "skip": 1}),
            )
        )
        worker.start()
        try:
            while critic_batches() < start + 2:  # the large request is being served
                assert worker.is_alive(), "the large request ended before it was observed"
                time.sleep(0.005)
            before = critic_batches()
            small = http.post(
                "/pairwise-critic",
                json={"task": "t", "image_a": painted_b64(10), "image_b": painted_b64(20)},
            )
            served_meanwhile = critic_batches() - before
        finally:
            worker.join(60)
        assert small.status_code == 200
        # The small request waited for the chunk in progress and at most the next one, not
        # for the remaining ~30 chunks of the large request.
        assert served_meanwhile <= 3, served_meanwhile
        assert big["resp"].status_code == 200 and len(big["resp"].json()["critic_list"]) == 256
        assert critic_batches() - start >= 32


def test_work_of_a_caller_that_has_gone_is_dropped(slow_mock: EmbeddedService) -> None:
    frames = [painted_b64(p % 100, size=32) for p in range(257)]  # 32 chunks of 8 pairs
    with httpx.Client(base_url=slow_mock.url, timeout=30, trust_env=False) as http:
        dropped_before = http.get("/metrics").json()["dropped_items"].get("critic", 0)
        with pytest.raises(httpx.ReadTimeout):  # the caller gives up after a few chunks
            httpx.post(
                slow_mock.url + "/trajectory-critic",
                json={"task": "t", "frames": frames, "skip": 1},
                timeout=httpx.Timeout(30, read=0.2),
                trust_env=False,
            )
        for _ in range(200):  # wait (bounded) for the server to notice and stop
            dropped = http.get("/metrics").json()["dropped_items"].get("critic", 0)
            if dropped > dropped_before:
                break
            time.sleep(0.05)
        assert dropped - dropped_before >= 8  # at least one whole chunk was never computed


def test_large_pngs_are_reduced_like_jpegs_but_keep_their_content() -> None:
    buf = io.BytesIO()
    Image.fromarray(np.full((2048, 1024, 3), 77, np.uint8)).save(buf, "PNG")
    frame = decode_image_bytes(buf.getvalue())
    assert frame.shape == (1024, 512, 3) and np.all(frame == 77)  # factor 2: not below 448


# ------------------------------------------------------------------------ admission and probes


def test_a_service_at_its_admission_limit_still_answers_its_probes() -> None:
    """One scoring request fills a service that admits one: another scoring request gets 503
    with Retry-After, while `/health`, VLAC's `/healthcheck` and `/metrics` answer 200, so no
    health probe reads a busy service as down."""
    svc = EmbeddedService(
        "mock", {"latency_ms": 1500}, extra_args=["--max-concurrent-requests", "1"]
    ).start()
    pair = {"task": "t", "image_a": painted_b64(10), "image_b": painted_b64(20)}
    try:
        with httpx.Client(base_url=svc.url, timeout=30) as http:
            slow = threading.Thread(target=lambda: http.post("/pairwise-critic", json=pair))
            slow.start()
            deadline = time.monotonic() + 10
            while http.get("/metrics").json()["in_flight"] < 2:  # this probe and the slow one
                assert time.monotonic() < deadline, "the scoring request never arrived"
                time.sleep(0.02)
            busy = http.post("/pairwise-critic", json=pair)
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            assert http.get("/health").status_code == 200
            assert http.post("/healthcheck").status_code == 200
            assert http.get("/metrics").status_code == 200
            slow.join(timeout=20)
        assert not slow.is_alive()
    finally:
        svc.stop()
