"""Coverage-guided fuzzing of the reward service's decoders with atheris (libFuzzer), in process.

The hypothesis fuzzer (`tests/fuzz/test_fuzz.py`) sends structured cases through a real server;
this one mutates raw bytes guided by the coverage of the decoders' Python code, which finds
branches no strategy thought of. Each target runs one decoder the way a route does and accepts
only the errors that route answers with 4xx; any other exception is a crash. libFuzzer's own
limits catch blow-ups (`-rss_limit_mb`, `-timeout`). A crash's input is written to the corpus
folder as a `.req` case for the route (`case_for`), so the regression tests replay it through a
real server like every other reproducer.

Targets: `pickle` (restricted unpickler, body budget, numpy to lists, request validation),
`json` (body budget scan, then the trajectory model's parser), `image` (PNG/JPEG decoding with
the request's pixel and memory budget), `video` (container probe and sampled decoding).

    pip install -e '.[fuzz]'     # atheris
    python -m tests.fuzz.atheris_targets pickle -max_total_time=60 -rss_limit_mb=2048

(`bench/p8_fuzz.py --atheris SECONDS` runs every target.)
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["TARGETS", "case_for", "main"]


def case_for(target: str, data: bytes) -> Any:
    """The HTTP request (`Case`) that makes the server run `target` on `data` (for the corpus)."""
    from tests.fuzz.harness import JSON, PICKLE, Case

    if target == "pickle":
        return Case("POST", "/pickle", PICKLE, data, note="atheris pickle")
    if target == "json":
        return Case("POST", "/trajectory-critic", JSON, data, note="atheris json")
    if target == "image":
        b64 = base64.b64encode(data).decode()
        body = json.dumps({"task": "t", "image_a": b64, "image_b": b64}).encode()
        return Case("POST", "/pairwise-critic", JSON, body, note="atheris image")
    body = json.dumps({"task_text": "t", "video_b64": base64.b64encode(data).decode()}).encode()
    return Case("POST", "/score", JSON, body, note="atheris video")


def _targets() -> dict[str, Callable[[bytes], None]]:
    """The decoders, instrumented for coverage, wrapped as fuzz targets."""
    import atheris
    from pydantic import ValidationError

    # only the service's own code is instrumented (everything else would take minutes); this
    # runs before anything imports it, so its modules are loaded here, under instrumentation
    with atheris.instrument_imports(
        include=["evolve_envs.reward.protocol", "evolve_envs.reward.service"]
    ):
        from evolve_envs.reward.protocol.body_budget import BodyBudgetError, check_json_body
        from evolve_envs.reward.protocol.pickle_codec import safe_pickle_loads, to_plain
        from evolve_envs.reward.protocol.pickle_types import UnsafePickleError
        from evolve_envs.reward.protocol.wire import PickleScoreRequest, TrajectoryCriticRequest
        from evolve_envs.reward.service.decoding.images import ImageDecodeError, decode_image_bytes
        from evolve_envs.reward.service.decoding.video import VideoDecodeError, read_video_bytes
        from evolve_envs.reward.service.state.service_state import RequestLimits

    limits = RequestLimits()
    budget = limits.body_budget

    def pickle_target(data: bytes) -> None:
        try:
            raw = safe_pickle_loads(data, budget)
            if isinstance(raw, dict):
                PickleScoreRequest.model_validate({k: to_plain(v) for k, v in raw.items()})
        except (UnsafePickleError, BodyBudgetError, ValidationError):
            pass

    def json_target(data: bytes) -> None:
        try:
            check_json_body(data, budget)
            TrajectoryCriticRequest.model_validate_json(data)
        except (BodyBudgetError, ValidationError):
            pass

    def image_target(data: bytes) -> None:
        from evolve_envs.reward.service.decoding.images import PixelBudget

        pixels = PixelBudget(limits.max_request_pixels, limits.max_image_decode_bytes)
        try:
            decode_image_bytes(data, max_side=limits.max_image_side, budget=pixels)
        except ImageDecodeError:
            pass

    def video_target(data: bytes) -> None:
        try:
            read_video_bytes(
                data,
                nframes=4,
                max_frames=limits.max_video_frames,
                max_side=limits.max_image_side,
                max_decode_pixels=limits.max_video_decode_pixels,
                max_frame_bytes=limits.max_image_decode_bytes,
            )
        except VideoDecodeError:
            pass

    return {
        "pickle": pickle_target,
        "json": json_target,
        "image": image_target,
        "video": video_target,
    }


TARGETS = ("pickle", "json", "image", "video")


def seeds(target: str) -> list[bytes]:
    """Valid inputs libFuzzer starts from (it cannot guess a PNG or an MP4 from nothing)."""
    import pickle

    from tests.fuzz.hostile import png_bytes
    from tests.fuzz.strategies import _image, _video

    if target == "image":
        return [_image("PNG", mode, 12, 9) for mode in ("RGB", "L", "P", "RGBA", "I;16")] + [
            _image("JPEG", "RGB", 16, 16)
        ]
    if target == "video":
        return [_video("mp4"), _video("mkv")]
    png = png_bytes(8, 8)
    request = {"images": [png, png], "prompts": ["a", "b"], "metadata": {"k": [1, 2.5, None]}}
    if target == "pickle":
        return [pickle.dumps(request, protocol=p) for p in (2, 3, 4, 5)]
    b64 = base64.b64encode(png).decode()
    doc = {"task": "t", "frames": [b64, b64], "reference": [b64], "skip": 1, "ref_num": 1}
    return [json.dumps(doc).encode()]


def main(argv: list[str] | None = None) -> None:
    """`python -m tests.fuzz.atheris_targets TARGET [libFuzzer flags]`."""
    import atheris

    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target = argv.pop(1)
    run = _targets()[target]
    from tests.fuzz.harness import CORPUS

    corpus = Path(CORPUS)
    if not any(not arg.startswith("-") for arg in argv[1:]):  # no corpus folder: seed one
        folder = Path(tempfile.mkdtemp(prefix=f"atheris-{target}-"))
        for i, seed in enumerate(seeds(target)):
            (folder / f"seed{i}").write_bytes(seed)
        argv.append(str(folder))

    def one_input(data: bytes) -> None:
        try:
            run(data)
        except BaseException:
            corpus.mkdir(parents=True, exist_ok=True)
            case = case_for(target, data)
            (corpus / case.name(f"{target}-atheris")).write_bytes(case.dumps())
            raise

    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
