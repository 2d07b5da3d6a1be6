"""``make test``'s worker groups take effect: a grouped test reaches pytest-xdist with its group.

Under ``--dist loadgroup`` pytest-xdist appends a test's group to its node id and sends each group
to one worker. A group that never reaches the node id (a marker added after xdist read them, or a
pytest that keeps node ids elsewhere) leaves the run ungrouped without a word: costly fixtures are
built on both workers at once, and tests that must not share a machine's Ray do.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def shared() -> str:
    """A module-scoped fixture: its module's tests form one group (tests/conftest.py)."""
    return "built once"


def test_a_module_fixtures_tests_carry_their_modules_group(request, shared: str) -> None:  # noqa: ANN001
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("only under `pytest -n N --dist loadgroup` (make test)")
    assert request.node.nodeid.endswith("@tests/layout/test_xdist_groups.py"), request.node.nodeid
