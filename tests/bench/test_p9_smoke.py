"""P9 (``bench/p9_render_on_demand.py --quick``) runs and prints a consistent table; no speed
assertion (the numbers live in bench/RESULTS.md, P9)."""

from __future__ import annotations

import pytest

from tests.bench.test_bench_smoke import num, run_quick

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.bench]


def test_p9_render_on_demand_quick() -> None:
    pytest.importorskip("libero.libero")
    rows = {r["render"]: r for r in run_quick("p9_render_on_demand", timeout=600)}
    assert num(rows["always"]["× always"]) == 1.0
    assert num(rows["on_demand"]["checks"]) == num(rows["always"]["checks"]) > 0
    # 32 steps, checks at 16 and 32: two camera frames a step against one agentview frame a check
    assert num(rows["always"]["frames/episode"]) == 64
    assert num(rows["on_demand"]["frames/episode"]) == 2
    assert num(rows["on_demand, reward off"]["frames/episode"]) == 0
