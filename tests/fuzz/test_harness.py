"""The fuzz harness's memory check: a request that grows the server past its limit fails the run
when it does so again, and one growth on a first request that does not repeat is not a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.harness import Case, FuzzFailure, FuzzServer, Outcome, memory_limit_mb

CASE = Case("POST", "/done", "application/json", b'{"reference": [0, 0, 0]}')


class ScriptedServer(FuzzServer):
    """A harness whose requests return the given peak-RSS growths in turn (nothing started)."""

    def __init__(self, growths: list[float], corpus: Path) -> None:
        super().__init__(corpus=corpus)
        self.growths = growths

    def send(self, case: Case) -> Outcome:
        self.cases += 1
        return Outcome(422, 0.01, self.growths.pop(0), alive=True)

    def healthy(self) -> bool:
        return True


def test_a_breach_the_request_repeats_fails_and_saves_the_reproducer(tmp_path: Path) -> None:
    over = memory_limit_mb(CASE) + 1
    server = ScriptedServer([over, over], tmp_path)
    with pytest.raises(FuzzFailure, match="peak RSS grew"):
        server.check(CASE, server.send(CASE), "json")
    assert server.cases == 2 and len(list(tmp_path.iterdir())) == 1


def test_a_first_request_growth_that_does_not_repeat_passes(tmp_path: Path) -> None:
    server = ScriptedServer([memory_limit_mb(CASE) + 1, 1.0], tmp_path)
    server.check(CASE, server.send(CASE), "json")
    assert server.cases == 2 and not list(tmp_path.iterdir())
