"""The openai backend against a real OpenAI-compatible server: `transformers serve` on loopback.

`transformers serve` (shipped with transformers) runs offline on CPU and serves any local
checkpoint whose processor loads with `AutoProcessor`; it serves a tiny random LLaVA built and
saved here (`tiny_llava.py`). vLLM and SGLang need a GPU, which this suite does not have. The
random model's answers hold no number, so judgements are the configured fallbacks, counted in
`unparsable_answers`; what is checked is the whole round trip: prompts with base64 image_url
frames, streamed answers, concurrency, timeouts and the served routes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from evolve_envs.reward.service.backends.base import BackendError, CriticItem, DoneItem, VideoItem
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted, painted_b64, wait_until_serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def chat_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    from tests.reward.service.backends.tiny_llava import build_tiny_llava

    model = str(build_tiny_llava(tmp_path_factory.mktemp("tiny_llava")))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cli = [sys.executable, "-m", "transformers.commands.transformers_cli"]
    device = os.environ.get("EVOLVE_TEST_DEVICE", "cpu")  # cuda runs the same tests on a GPU
    cmd = [*cli, "serve", "--host", "127.0.0.1", "--port", str(port), "--device", device]
    cmd += ["--force_model", model, "--dtype", "float32"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base + "/v1/models", proc, log, timeout_s=60)
        # One request alone first: the server loads the model on its first request, and two
        # first requests at once race in that load (an occasional 500).
        warm = {
            "model": model,
            "stream": True,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}],
        }
        httpx.post(base + "/v1/chat/completions", json=warm, timeout=120, trust_env=False)
        yield base + "/v1", model
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _backend(chat_server: tuple[str, str], **kw: object):
    from evolve_envs.reward.service.backends import make_backend

    base_url, model = chat_server
    return make_backend("openai", base_url=base_url, model=model, max_new_tokens=6, **kw)


def test_every_judgement_round_trips_through_the_server(chat_server) -> None:
    from evolve_envs.reward.service.backends.answer_parsing import parse_score

    be = _backend(chat_server, fallback_critic=7.0, fallback_score=0.25, max_concurrency=2)
    try:
        a, b = painted(10), painted(60)
        critics = be.critic_batch([CriticItem("t", a, b, a), CriticItem("t", b, a, a)])
        assert len(critics) == 2 and all(-100.0 <= c <= 100.0 for c in critics)
        ((done, prob),) = be.done_batch([DoneItem("t", a, a, b)])
        assert 0.0 <= prob <= 1.0 and done == (prob * 100 >= 95.0)
        score, raw = be.score_video(VideoItem("t", (a, b, b), {}))
        assert isinstance(raw, str) and raw  # the model's own (random) text came back
        parsed = parse_score(raw, "auto")  # the vlm backend's parsing, shared
        assert score == (0.25 if parsed is None else parsed)
        # Random answers rarely hold a number: most judgements are the counted fallbacks.
        assert 1 <= be.unparsable_answers <= 4
        caps = be.capabilities()
        assert caps.pairwise and caps.done and caps.video and caps.image_score
    finally:
        be.close()


def test_dead_server_fails_fast_with_a_clear_error() -> None:
    from evolve_envs.reward.service.backends import make_backend

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    be = make_backend("openai", base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    t = time.monotonic()
    with pytest.raises(BackendError, match=f"127.0.0.1:{port}/v1 failed"):
        be.critic_batch([CriticItem("t", painted(0), painted(1), painted(0))])
    assert time.monotonic() - t < 10
    be.close()


def test_served_by_the_reward_server(chat_server) -> None:
    base_url, model = chat_server
    kwargs = {"base_url": base_url, "model": model, "max_new_tokens": 4, "fallback_critic": 3.0}
    svc = EmbeddedService("openai", kwargs, startup_timeout=60)
    svc.start()
    try:
        with httpx.Client(base_url=svc.url, timeout=120, trust_env=False) as c:
            assert c.get("/capabilities").json()["backend"] == "openai"
            body = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(50)}
            resp = c.post("/pairwise-critic", json=body)
            assert resp.status_code == 200 and -100 <= resp.json()["critic"] <= 100
    finally:
        svc.stop()


def test_caller_token_cap_applies_to_the_openai_backend() -> None:
    """The server-side cap on a caller's `max_new_tokens` holds for the openai backend too."""
    from evolve_envs.reward.service.backends import make_backend

    be = make_backend(
        "openai", base_url="http://127.0.0.1:9/v1", model="m", caller_max_new_tokens=8
    )
    try:
        assert be.check_video_options({"max_new_tokens": 8})["max_new_tokens"] == 8
        with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 8\]"):
            be.check_video_options({"max_new_tokens": 10**6})
    finally:
        be.close()
