"""Fuzz every decoder behind a route through one real server, and replay the corpus.

Each fuzz test draws structure-aware cases (`tests.fuzz.strategies`) and sends them to a real
`evolve-reward-server --backend mock` (child process on 127.0.0.1, default limits, address space
capped); a crash, hang, 5xx or memory breach fails the run and saves the reproducer to
`tests/fuzz/corpus/`, whose files `test_corpus_case_replays` sends again on every run.

`make test` runs a short budget (about a minute in all on two cores). The long run is
`bench/p8_fuzz.py`, which sets `EVOLVE_FUZZ_EXAMPLES` (examples per target) and
`EVOLVE_FUZZ_STATS` (a file the run's figures are appended to, one JSON line per module).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz import strategies
from tests.fuzz.harness import CORPUS, Case, FuzzServer

pytestmark = pytest.mark.fuzz

_EXAMPLES = int(os.environ.get("EVOLVE_FUZZ_EXAMPLES", "0"))


def _budget(default: int) -> settings:
    """`default` examples, the same ones every run (or EVOLVE_FUZZ_EXAMPLES new ones); no
    per-example deadline (the harness has its own time cap); health checks about slow or large
    data off (that is the point)."""
    return settings(
        max_examples=_EXAMPLES or default,
        derandomize=not _EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


@pytest.fixture(scope="module")
def server() -> Iterator[FuzzServer]:
    srv = FuzzServer().start()
    yield srv
    stats_path = os.environ.get("EVOLVE_FUZZ_STATS")
    if stats_path:
        with open(stats_path, "a") as fh:
            fh.write(json.dumps({"module": __name__, **srv.stats()}) + "\n")
    srv.stop()


@_budget(300)
@given(case=strategies.pickle_cases())
def test_fuzz_pickle_codec(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "pickle")


@_budget(200)
@given(case=strategies.numpy_state_cases())
def test_fuzz_numpy_states(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "numpy")


@_budget(220)
@given(case=strategies.image_cases())
def test_fuzz_image_decoding(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "image")


@_budget(150)
@given(case=strategies.video_cases())
def test_fuzz_video_decoding(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "video")


@_budget(300)
@given(case=strategies.json_cases())
def test_fuzz_json_wire_models(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "json")


@_budget(120)
@given(case=strategies.chat_cases())
def test_fuzz_chat_completions(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "chat")


@_budget(180)
@given(case=strategies.http_cases())
def test_fuzz_http_framing(server: FuzzServer, case: Case) -> None:
    server.check(case, server.send(case), "http")


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.req"))


@pytest.mark.parametrize("path", _corpus(), ids=lambda path: path.name)
def test_corpus_case_replays(server: FuzzServer, path: Path) -> None:
    """Every saved reproducer (and seed) is answered without crash, hang, 5xx or breach."""
    case = Case.loads(path.read_bytes())
    outcome = server.send(case)
    server.check(case, outcome, path.stem.split("-")[0])
    assert outcome.status is not None and outcome.status < 500
