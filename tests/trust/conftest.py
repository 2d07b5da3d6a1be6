"""Fixtures shared by the trust tests (recording, calibration, done rules, the alarm).

``intensity_service``: a real reward server on loopback (mock backend, intensity rule, no
latency): the painted grey level of a frame is the progress the model reads.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evolve_envs.reward.service.hosting.embedded import EmbeddedService


@pytest.fixture(scope="module")
def intensity_service() -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity", "latency_ms": 0}, enable_faults=False)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()
