"""Fixtures for the training tests: one torch thread (``ray_local`` is in tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The networks here are tiny: one thread is fastest and leaves the other cores alone."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
