"""The vlac backend against a stand-in of the VLAC library with VLAC's exact signatures.

The real VLAC (`evo_vlac`, on ms-swift, with a multi-GB checkpoint) cannot run here; the stand-in
in `tests/reward/service/backends/vlac_standin/` has its import path, set-up calls and method
signatures, and answers from the painted grey level of each frame.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from evolve_envs.reward.service.backends.base import BackendError, CriticItem, DoneItem
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted, painted_b64

STANDIN = str(Path(__file__).parent / "vlac_standin")


@pytest.fixture()
def vlac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.syspath_prepend(STANDIN)
    sys.modules.pop("evo_vlac", None)
    standin = importlib.import_module("evo_vlac")
    standin.CALLS.clear()
    yield standin
    sys.modules.pop("evo_vlac", None)


def _backend(tmp_path: Path, **kw: object) -> object:
    from evolve_envs.reward.service.backends import make_backend

    return make_backend("vlac", ckpt_path=str(tmp_path), device="cpu", **kw)


def test_trajectory_is_one_vlac_call_with_the_true_first_frame(vlac, tmp_path: Path) -> None:
    be = _backend(tmp_path)
    frames = [painted(p) for p in (10, 40, 70)]
    ref = (painted(0), painted(50), painted(100))
    items = [CriticItem("t", frames[k - 1], frames[k], frames[0], ref) for k in (1, 2)]
    pair = CriticItem("u", painted(20), painted(60), painted(20))
    critics = be.critic_batch([*items, pair])
    assert critics == pytest.approx([100 * 30 / 90, 100 * 30 / 60, 50.0])
    calls = [c for c in vlac.CALLS if c[0] == "critic"]
    assert calls == [
        ("critic", {"task": "t", "n": 3, "ref_num": 3, "skip": 1}),
        ("critic", {"task": "u", "n": 2, "ref_num": 0, "skip": 1}),
    ]


def test_done_modes_and_threshold(vlac, tmp_path: Path) -> None:
    be = _backend(tmp_path, done_threshold=0.9)
    first, prev = painted(0), painted(50)
    out = be.done_batch(
        [
            DoneItem("t", first, prev, painted(95)),
            DoneItem("t", first, prev, painted(80), (painted(0), painted(100))),
            DoneItem("t", first, prev, painted(92), (painted(100),)),
        ]
    )
    assert out == [(True, 0.95), (False, 0.8), (True, 0.92)]
    assert [c[1]["mode"] for c in vlac.CALLS if c[0] == "done"] == ["plain", "ref", "goal"]
    assert [c[1]["n"] for c in vlac.CALLS if c[0] == "done"] == [1, 3, 1]


def test_one_frame_reference_is_refused_for_the_critic(vlac, tmp_path: Path) -> None:
    be = _backend(tmp_path)
    a = painted(0)
    with pytest.raises(BackendError, match="at least 2 frames"):
        be.critic_batch([CriticItem("t", a, painted(5), a, (painted(9),))])


def test_served_routes_through_the_standin(vlac, tmp_path: Path, monkeypatch) -> None:
    path = os.pathsep.join([STANDIN, os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    svc = EmbeddedService("vlac", {"ckpt_path": str(tmp_path), "device": "cpu"})
    svc.start()
    try:
        with httpx.Client(base_url=svc.url, timeout=30, trust_env=False) as c:
            caps = c.get("/capabilities").json()
            assert caps["pairwise"] and caps["done"] and not caps["video"]
            frames = [painted_b64(p) for p in (0, 50, 75)]
            body = {"task": "t", "frames": frames, "skip": 1}
            r = c.post("/trajectory-critic", json=body).json()
            assert r["critic_list"] == pytest.approx([50.0, 50.0])
            assert r["value_list"] == pytest.approx([0.0, 50.0, 75.0])
            body = {"task": "t", "image_a": frames[0], "image_b": frames[1]}
            assert c.post("/pairwise-critic", json=body).json()["critic"] == pytest.approx(50.0)
            body = {"task": "t", "first_frame": frames[0], "prev_frame": frames[1]}
            body["curr_frame"] = painted_b64(97)
            assert c.post("/done", json=body).json() == {"done": True, "prob": 0.97}
    finally:
        svc.stop()


def test_values_are_numbers(vlac, tmp_path: Path) -> None:
    be = _backend(tmp_path)
    be._critic.get_trajectory_critic = lambda **kw: (["nan"], [0, 0])
    a = painted(0)
    with pytest.raises(BackendError, match="non-finite"):
        be.critic_batch([CriticItem("t", a, np.copy(a), a)])
