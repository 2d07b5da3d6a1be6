"""Smoke test: an embedded mock server answers every progress route over real HTTP."""

from __future__ import annotations

import httpx

from evolve_envs.reward.protocol.wire import (
    Capabilities,
    DoneResponse,
    PairwiseCriticResponse,
    TrajectoryCriticResponse,
)
from tests.helpers.svc_helpers import painted_b64


def test_smoke_progress_routes(client: httpx.Client) -> None:
    assert client.get("/health").json()["status"] == "ok"
    assert client.post("/healthcheck").status_code == 200
    caps = Capabilities.model_validate(client.get("/capabilities").json())
    assert caps.backend == "mock" and caps.progress and caps.pairwise and caps.done

    frames = [painted_b64(p) for p in (0, 20, 60, 100)]
    resp = client.post("/trajectory-critic", json={"task": "t", "frames": frames, "skip": 1})
    traj = TrajectoryCriticResponse.model_validate(resp.json())
    assert traj.value_list == [0.0, 20.0, 60.0, 100.0]

    resp = client.post(
        "/pairwise-critic", json={"task": "t", "image_a": frames[1], "image_b": frames[2]}
    )
    assert PairwiseCriticResponse.model_validate(resp.json()).critic == 50.0

    resp = client.post(
        "/done",
        json={
            "task": "t",
            "first_frame": frames[0],
            "prev_frame": frames[2],
            "curr_frame": frames[3],
        },
    )
    assert DoneResponse.model_validate(resp.json()) == DoneResponse(done=True, prob=1.0)
