"""A reward model swapped behind an endpoint mid-run is reported loudly and counted.

A real reward server (mock backend, model id "judge-a") answers; it is stopped and another one
with model id "judge-b" starts on the same port, as a redeploy would. The client's next answer
carries the new `X-Reward-Model` header: one ERROR log naming both models, `changes == 1`.
"""

from __future__ import annotations

import logging

import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.progress_client import ProgressClient
from evolve_envs.reward.clients.service_check import check_service
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import free_port, painted


def test_model_swap_behind_an_endpoint_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    pool = EndpointPool(url, max_retries=0)
    client = ProgressClient(pool, close_pool=True)
    try:
        with EmbeddedService("mock", {"model_id": "judge-a"}, port=port):
            caps = check_service(pool)
            assert caps is not None and caps.model_id == "judge-a" and caps.config_hash
            assert client.pairwise_critic("t", painted(0), painted(50)).ok
            assert pool.model_watch.identity(url).model_id == "judge-a"
            assert pool.model_watch.changes == 0
        with caplog.at_level(logging.ERROR, logger="evolve_envs.reward.clients"):
            with EmbeddedService("mock", {"model_id": "judge-b"}, port=port):
                assert client.pairwise_critic("t", painted(0), painted(50)).ok
                assert client.pairwise_critic("t", painted(0), painted(60)).ok
        assert pool.model_watch.changes == 1  # reported once, not at every answer
        (record,) = [r for r in caplog.records if "REWARD MODEL CHANGED" in r.getMessage()]
        assert "judge-a" in record.getMessage() and "judge-b" in record.getMessage()
        assert pool.model_watch.identity(url).model_id == "judge-b"
    finally:
        client.close()


def test_health_probe_notices_the_swap_before_any_reward_call() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    pool = EndpointPool(url, max_retries=0)
    try:
        with EmbeddedService("mock", {"model_id": "judge-a"}, port=port):
            assert check_service(pool).model_id == "judge-a"
        with EmbeddedService("mock", {"model_id": "judge-b"}, port=port):
            assert pool.probe() == {url: True}
        assert pool.model_watch.changes == 1
        assert pool.model_watch.identity(url).model_id == "judge-b"
    finally:
        pool.close()


def test_same_model_restarted_is_not_a_change() -> None:
    port = free_port()
    pool = EndpointPool(f"http://127.0.0.1:{port}", max_retries=0)
    client = ProgressClient(pool, close_pool=True)
    try:
        for _ in range(2):
            with EmbeddedService("mock", {"model_id": "judge-a"}, port=port):
                assert client.pairwise_critic("t", painted(0), painted(50)).ok
        assert pool.model_watch.changes == 0
    finally:
        client.close()
