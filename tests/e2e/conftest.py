"""End-to-end tests across packages (marked ``e2e`` by tests/conftest.py): one torch thread."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The networks trained here are tiny: one thread is fastest, and leaves the other core."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
