"""Smoke tests: every benchmark script runs with ``--quick`` and prints a well-formed table.

These check that the scripts work and that their tables are internally consistent (baselines
read 1.0, raw frames are stored exactly, shares are fractions); they never assert on speed —
performance numbers live in bench/RESULTS.md.
"""

from __future__ import annotations

import math

import pytest

from tests.helpers.bench_script import run_bench


def run_quick(script: str, timeout: float = 300) -> list[dict[str, str]]:
    """Run ``bench/<script>.py --quick``; return the printed table as a list of row dicts."""
    stdout = run_bench(f"{script}.py", "--quick", timeout=timeout)
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"{script} printed no table:\n{stdout}"
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header), f"{script}: malformed row {line!r}"
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def num(cell: str) -> float:
    return float("nan") if cell == "-" else float(cell.replace(",", ""))


def positive(cell: str) -> bool:
    value = num(cell)
    return math.isfinite(value) and value > 0


pytestmark = pytest.mark.slow


def test_p1_overhead_quick() -> None:
    rows = run_quick("p1_overhead")
    by_name = {r["measurement"]: r for r in rows}
    assert num(by_name["step: bare"]["ratio"]) == 1.0
    assert num(by_name["step: bare"]["overhead ms/step"]) == 0.0
    for name in ("step: reward on, sync", "step: reward on, async"):
        assert int(by_name[name]["calls / notes"]) > 0, f"{name} made no reward-model call"
    jpeg = [r for r in rows if r["measurement"].startswith("JPEG")]
    assert {"simplejpeg", "Pillow"} <= {r["measurement"].split()[2] for r in jpeg}
    assert all(positive(r["ms"]) for r in rows)


@pytest.mark.bench
def test_p2_rollout_throughput_quick() -> None:
    rows = run_quick("p2_rollout_throughput")
    assert {(r["envs"], r["reward"]) for r in rows} >= {("1", "off"), ("1", "sync"), ("2", "off")}
    for r in rows:
        assert positive(r["env steps/s"])
        if r["reward"] == "off":
            assert num(r["ratio vs off"]) == 1.0
            assert num(r["calls/episode"]) == 0
        else:
            assert num(r["calls/episode"]) > 0
        if r["reward"].startswith("deferred"):  # every check sent is answered and settled
            assert num(r["answers/episode"]) == num(r["calls/episode"])
            assert num(r["unsettled peak"]) >= 1


def test_p3_frame_cache_quick() -> None:
    rows = run_quick("p3_frame_cache")
    raw = next(r for r in rows if r["cache encoding"] == "raw")
    assert num(raw["compression"]) == 1.0
    assert num(raw["intensity max abs Δ"]) == 0 and num(raw["change max abs Δ"]) == 0
    jpeg = [r for r in rows if r["cache encoding"].startswith("jpeg")]
    assert len(jpeg) == 3 and all(num(r["compression"]) > 1 for r in jpeg)


def test_p4_service_quick() -> None:
    rows = run_quick("p4_service")
    http = [r for r in rows if r["path"].startswith("HTTP")]
    assert http and all(positive(r["frames/s"]) and num(r["batch fill"]) >= 1 for r in http)


def test_p5_endpoint_pool_quick() -> None:
    rows = run_quick("p5_endpoint_pool")
    assert len(rows) == 5 and all(positive(r["req/s"]) for r in rows)
    for r in rows:
        if "slow" in r["services"]:
            assert 0 <= num(r["share slow"]) <= 1


@pytest.mark.slow
@pytest.mark.bench
def test_p5_ray_serve_quick() -> None:
    pytest.importorskip("ray")
    rows = run_quick("p5_ray_serve")
    assert {r["engine"] for r in rows} == {"launcher", "serve http", "serve handle"}
    for r in rows:
        assert positive(r["req/s"])
        if r["replicas"] == "1":
            assert num(r["vs 1 replica"]) == 1.0


@pytest.mark.libero
@pytest.mark.bench
def test_p6_libero_quick() -> None:
    pytest.importorskip("libero.libero")
    rows = run_quick("p6_libero", timeout=600)
    by_name = {r["reward"]: r for r in rows}
    assert num(by_name["off"]["ratio vs off"]) == 1.0
    assert num(by_name["on, sync, instant"]["calls/episode"]) > 0


def test_p7_hostile_input_quick() -> None:
    rows = run_quick("p7_hostile_input")  # three tables, read under the first one's header
    status = {r["request"].split(" ")[0]: r["status"] for r in rows if r["status"].isdigit()}
    assert status == {"valid": "200", "lying": "422", "720p": "200", "256": "200"}, status
    # P7c: "status (expected)" lands in the second column, "within limits" in the last one
    hostile = [r for r in rows if r["body MB"].endswith(")") and r["body MB"][0].isdigit()]
    assert len(hostile) >= 10 and all(r["<= 64 MB"] == "yes" for r in hostile), hostile


def test_p8_fuzz_quick() -> None:
    rows = run_quick("p8_fuzz")
    targets = {r["target"]: r for r in rows}
    assert {"pickle", "image", "video", "json", "http", "all"} <= set(targets), targets
    assert num(targets["all"]["cases"]) >= 100
    assert num(targets["all"]["worst peak RSS growth MB"]) <= 64


@pytest.mark.bench
def test_d1_collection_quick() -> None:
    rows = run_quick("d1_collection")
    by_name = {r["collection"]: r for r in rows}
    assert set(by_name) == {"barrier", "async"}
    assert num(by_name["barrier"]["ratio vs barrier"]) == 1.0
    assert all(positive(r["episodes/s"]) and positive(r["env steps/s"]) for r in rows)


def tables(stdout: str) -> list[list[dict[str, str]]]:
    """Every Markdown table in ``stdout``, each as a list of row dicts under its own header."""
    out: list[list[dict[str, str]]] = []
    block: list[str] = []
    for line in [*stdout.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 3:
            header = [c.strip() for c in block[0].strip("|").split("|")]
            cells = [[c.strip() for c in row.strip("|").split("|")] for row in block[2:]]
            out.append([dict(zip(header, row, strict=True)) for row in cells])
        block = []
    return out


@pytest.mark.slow
@pytest.mark.bench
def test_multinode_quick() -> None:
    """P5 and D1 on a local Ray and on a multi-node ``ray.cluster_utils.Cluster``: the replicas
    and the workers land on as many nodes as asked for."""
    pytest.importorskip("ray")
    p5, d1 = tables(run_bench("multinode.py", "--quick", timeout=600))
    assert {r["layout"].split(" ")[0] for r in p5} == {"single", "3-node"}
    for r in p5:
        assert positive(r["req/s"])
        expected = r["replicas"] if r["layout"].startswith("3-node") else "1"
        assert r["replica nodes"] == expected, r
    placed = {(r["layout"].split(" ")[0], r["worker nodes"]) for r in d1}
    assert placed == {("single", "1"), ("3-node", "2")}
    assert all(positive(r["env steps/s"]) for r in d1)


def test_r1_recording_quick() -> None:
    rows = {r["config"]: r for r in run_quick("r1_recording")}
    assert set(rows) == {"bare", "recorded q90", "recorded q75"}
    assert num(rows["bare"]["x bare"]) == 1.0
    # held JPEG bytes of one episode are below the raw frames', and q75 below q90
    held = {
        k: num(rows[k]["held (1 episode)"].split()[0]) for k in ("recorded q90", "recorded q75")
    }
    raw = num(rows["recorded q90"]["raw would be"].split()[0])
    assert 0 < held["recorded q75"] < held["recorded q90"] < raw
