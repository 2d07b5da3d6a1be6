"""P7: reward service memory per request kind at the default limits, and fairness.

Part 1 — peak RSS growth of the server process per request, for a valid 16-frame trajectory, 16
JPEGs that declare 4096x4096 but carry 64x64 of data, a 720p MP4 of 300 frames (`/score`,
inline) and a 1,024-frame trajectory (`skip=1`). Before each request the kernel's peak-RSS mark
of the server is reset (`/proc/PID/clear_refs` <- 5); after it, `VmHWM - VmRSS(before)` is the
growth. Goal: <= 64 MB per request.

Part 1b — one request of each hostile class (the rows of `docs/hostile-input.md`:
`tests/fuzz/hostile.py`, pickles that expand through shared references or refer to themselves
and their JSON equivalents, numpy arrays that become millions of values, 16 PNG frames of
4096x4096, a 4608x4608 video, a decompression bomb, lying JPEGs, a gadget pickle, a 65 MiB body,
a slow client; and `tests/reward/service/hostile_cases.py`, issue 31's Robometer JSON bomb,
multipart part flood, base64 zeros image, padded PNG, resolution-switching video, over-budget VLM
requests and a backend answering 1e308) against a second server at the default limits under an
address-space cap (`tests/fuzz/harness.py`; a third whose mock answers 1e308 for the last row):
its status against the expected one(s), the peak RSS growth as above, and the slowest answer.
Goal: the expected answer, <= 64 MB beyond the body's size (`memory_limit_mb`), decoded-body
and issue-31 cases answered within 1 s.

Part 2 — fairness: p50/p99 latency of small `/pairwise-critic` requests on an idle server and
while 1,024-frame trajectories run back to back beside them (mock backend, 20 ms per batch to
stand in for a GPU forward pass), measured in interleaved rounds. Goal: loaded p99 <= 2x idle.

    .venv/bin/python bench/p7_hostile_input.py           # ~1-2 min on 2 cores
    .venv/bin/python bench/p7_hostile_input.py --quick   # smoke run
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import struct
import threading
import time

import httpx
import numpy as np
from _common import machine_note, percentile, print_table, scene_frames
from PIL import Image

from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.fuzz.harness import (
    JSON,
    FuzzServer,
    memory_limit_mb,
    peak_rss_mb,
    reset_peak_rss,
    rss_mb,
)
from tests.fuzz.hostile import png_bytes, tiny_mp4
from tests.reward.service.hostile_cases import BROKEN_MODEL_KWARGS, ROWS

MB = 1024 * 1024


def peak_growth_mb(pid: int, send) -> tuple[float, int]:  # noqa: ANN001
    """Reset the peak-RSS mark, run `send()`, return (VmHWM - VmRSS before) in MB, status."""
    before = reset_peak_rss(pid)
    status = send()
    return peak_rss_mb(pid) - before, status


def jpeg_b64(frame: np.ndarray, quality: int = 85) -> str:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, "JPEG", quality=quality)
    return base64.b64encode(buf.getvalue()).decode()


def lying_jpeg_b64(declared: int = 4096) -> str:
    buf = io.BytesIO()
    Image.fromarray(scene_frames(1, size=64)[0]).save(buf, "JPEG", quality=60)
    data = buf.getvalue()
    sof = data.find(b"\xff\xc0")
    data = data[: sof + 5] + struct.pack(">HH", declared, declared) + data[sof + 9 :]
    return base64.b64encode(data).decode()


def mp4_720p_b64(frames: int) -> str:
    import tempfile

    import imageio.v2 as imageio

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/v.mp4"
        with imageio.get_writer(path, fps=30, codec="libx264", macro_block_size=16) as writer:
            for i in range(frames):
                writer.append_data(np.full((720, 1280, 3), (i * 7) % 256, np.uint8))
        with open(path, "rb") as fh:
            return base64.b64encode(fh.read()).decode()


def memory_part(quick: bool) -> list[dict]:
    frames448 = [jpeg_b64(f) for f in scene_frames(16, size=448)]
    big = (frames448 * 64)[: 256 if quick else 1024]
    traj = "/trajectory-critic"
    video = mp4_720p_b64(60 if quick else 300)
    kinds = {
        "valid 16 frames (448² JPEG)": (traj, {"task": "t", "frames": frames448, "skip": 1}),
        "lying JPEG ×16 (declares 4096²)": (
            traj,
            {"task": "t", "frames": [lying_jpeg_b64()] * 16, "skip": 1},
        ),
        "720p MP4, 300 frames (/score)": (
            "/score",
            {"task_text": "t", "video_b64": video, "nframes": 16},
        ),
        f"{len(big)} frames (448² JPEG, skip 1)": (traj, {"task": "t", "frames": big, "skip": 1}),
    }
    json_headers = {"content-type": "application/json"}
    rows = []
    with EmbeddedService("mock") as svc, httpx.Client(base_url=svc.url, timeout=300) as http:
        assert svc.pid is not None
        for _ in range(2):  # warm up allocator pools and lazy imports (PyAV, simplejpeg)
            http.post("/trajectory-critic", json=kinds["valid 16 frames (448² JPEG)"][1])
            http.post("/score", json=kinds["720p MP4, 300 frames (/score)"][1])
        for name, (route, body) in kinds.items():
            payload = httpx.Request("POST", svc.url + route, json=body).content
            growths, status = [], None
            for _ in range(1 if quick else 3):

                def send(route: str = route, payload: bytes = payload) -> int:
                    return http.post(route, content=payload, headers=json_headers).status_code

                growth, status = peak_growth_mb(svc.pid, send)
                growths.append(growth)
            rows.append(
                {
                    "request": name,
                    "body MB": round(len(payload) / MB, 2),
                    "status": status,
                    "peak RSS growth MB (max of runs)": round(max(growths), 1),
                    "<= 64 MB": "yes" if max(growths) <= 64 else "NO",
                }
            )
        after = round(rss_mb(svc.pid), 1)
        rows.append(
            {
                "request": "(server RSS after all, MB)",
                "body MB": "",
                "status": "",
                "peak RSS growth MB (max of runs)": after,
                "<= 64 MB": "",
            }
        )
    return rows


def hostile_part(quick: bool) -> list[dict]:
    """One request of each hostile class; status vs expected, peak RSS growth, slowest answer."""
    from tests.fuzz.harness import Case

    png = base64.b64encode(png_bytes(32, 32)).decode()
    video = base64.b64encode(tiny_mp4()).decode()
    warm = [
        Case("POST", "/trajectory-critic", JSON,
             json.dumps({"task": "t", "frames": [png, png], "skip": 1}).encode()),
        Case("POST", "/score", JSON, json.dumps({"task_text": "t", "video_b64": video}).encode()),
    ]  # fmt: skip
    rows = []
    servers = {
        "default": FuzzServer().start(),
        "broken": FuzzServer(extra_args=("--backend-kwargs", json.dumps(BROKEN_MODEL_KWARGS))),
    }
    servers["broken"].start()
    try:
        for _ in range(2):  # lazy imports (PyAV), allocator pools
            for case in warm:
                assert servers["default"].send(case).status == 200
        for name, row in ROWS.items():
            srv = servers[row.server]
            case, expected = row.build()
            runs = [srv.send(case) for _ in range(1 if quick or case.method == "STALL" else 3)]
            statuses = {run.status for run in runs}
            growth = max(run.growth_mb for run in runs)
            seconds = max(run.seconds for run in runs)
            ok = statuses <= set(expected) and growth <= memory_limit_mb(case) and srv.healthy()
            rows.append(
                {
                    "hostile request": name,
                    "status (expected)": f"{'/'.join(map(str, sorted(statuses, key=str)))} "
                    f"({'/'.join(map(str, expected))})",
                    "peak RSS growth MB (max of runs)": round(growth, 1),
                    "slowest s": round(seconds, 3),
                    "within limits": "yes" if ok else "NO",
                }
            )
    finally:
        for srv in servers.values():
            srv.stop()
    return rows


def fairness_part(quick: bool) -> list[dict]:
    small = {
        "task": "t",
        "image_a": jpeg_b64(scene_frames(1, 64)[0]),
        "image_b": jpeg_b64(scene_frames(2, 64)[1]),
    }
    big_frames = [jpeg_b64(f) for f in scene_frames(8, size=64)] * 128
    big = {"task": "t", "frames": big_frames[: 256 if quick else 1024], "skip": 1}
    # Encoded once: re-encoding 1,024 frames of JSON per request would hold this process's GIL
    # and slow the small requests' client, not the server.
    big_body = httpx.Request("POST", "http://x/", json=big).content
    json_headers = {"content-type": "application/json"}
    per_round = 10 if quick else 25
    rounds = 1 if quick else 3
    idle: list[float] = []
    loaded: list[float] = []
    with EmbeddedService("mock", {"latency_ms": 20}) as svc:
        with httpx.Client(base_url=svc.url, timeout=300) as http:

            def smalls(out: list[float]) -> None:
                for _ in range(per_round):
                    start = time.perf_counter()
                    assert http.post("/pairwise-critic", json=small).status_code == 200
                    out.append(time.perf_counter() - start)
                    time.sleep(0.01)

            http.post("/pairwise-critic", json=small)
            for r in range(rounds):
                for phase in ("idle", "loaded") if r % 2 == 0 else ("loaded", "idle"):
                    if phase == "idle":
                        smalls(idle)
                        continue
                    stop = threading.Event()

                    def run_big(stop: threading.Event = stop) -> None:
                        with httpx.Client(base_url=svc.url, timeout=300) as h2:
                            while not stop.is_set():
                                h2.post(
                                    "/trajectory-critic", content=big_body, headers=json_headers
                                )

                    worker = threading.Thread(target=run_big)
                    worker.start()
                    time.sleep(0.3)  # the large request is being served
                    smalls(loaded)
                    stop.set()
                    worker.join()
    rows = []
    for name, values in (("idle", idle), ("beside 1,024-frame requests", loaded)):
        rows.append(
            {
                "small /pairwise-critic": name,
                "n": len(values),
                "p50 ms": round(1000 * percentile(values, 50), 1),
                "p99 ms": round(1000 * percentile(values, 99), 1),
                "p99 / idle p99": round(percentile(values, 99) / percentile(idle, 99), 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run")
    args = parser.parse_args()
    print(machine_note())
    for title, rows in (
        ("P7a: peak server RSS growth per request (default limits, mock)", memory_part(args.quick)),
        ("P7c: hostile requests, one per class (default limits, mock)", hostile_part(args.quick)),
        (
            "P7b: small-request latency beside large ones (mock, 20 ms/batch)",
            fairness_part(args.quick),
        ),
    ):
        print()
        print_table(title, list(rows[0]), [list(row.values()) for row in rows])


if __name__ == "__main__":
    main()
