"""The bearer token reaches a token-protected server from every client, from the environment
variable when no token is given, and a missing token is a named 401, not a silent zero."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.video_score_client import VideoScoreClient
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.reward.clients.client_helpers import paint

TOKEN = "client-token"


@pytest.fixture(scope="module")
def protected() -> Iterator[EmbeddedService]:
    svc = EmbeddedService("mock", {"rule": "intensity"}, token=TOKEN).start()
    try:
        yield svc
    finally:
        svc.stop()


def calls(pool: EndpointPool) -> list:
    frames = [paint(p) for p in (0, 30, 60)]
    with (
        ProgressClient(pool) as progress,
        VideoScoreClient(pool, nframes=3) as video,
        PickleScorerClient(pool) as pickle,
    ):
        return [
            progress.pairwise_critic("paint the frame", frames[0], frames[2]),
            video.score("paint the frame", frames),
            pickle.score([frames[2]], ["paint the frame"]),
        ]


def test_every_client_sends_the_pool_token(protected) -> None:
    with EndpointPool(protected.url, token=TOKEN) as pool:
        critic, video, pickle = calls(pool)
    assert critic.ok and critic.value == pytest.approx(60.0, abs=1.5)
    assert video.ok and video.value == pytest.approx(0.6, abs=0.015)
    assert pickle.ok and pickle.value[0] == pytest.approx(0.6, abs=0.015)


def test_token_defaults_to_the_environment_variable(protected, monkeypatch) -> None:
    monkeypatch.setenv("EVOLVE_REWARD_TOKEN", TOKEN)
    with ProgressClient(protected.url) as client:  # a private pool, no token argument
        assert client.capabilities().ok


def test_without_the_token_every_call_is_a_named_401(protected, monkeypatch) -> None:
    monkeypatch.delenv("EVOLVE_REWARD_TOKEN", raising=False)
    with EndpointPool(protected.url, max_retries=0) as pool:
        results = calls(pool)
    for result in results:
        assert not result.ok and result.fallback
        assert "401" in result.error and protected.url in result.error
