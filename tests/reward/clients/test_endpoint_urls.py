"""Endpoint list resolution: VLAC_SERVICE_URL / VLAC_SERVICE_NUM, lists, validation; who closes
a pool."""

from __future__ import annotations

import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.endpoint_urls import endpoints_from_env, expand_endpoints
from evolve_envs.reward.clients.progress_client import ProgressClient


def test_service_url_and_num_expand_to_consecutive_ports():
    assert expand_endpoints(None, "http://127.0.0.1:8111", 4) == [
        "http://127.0.0.1:8111",
        "http://127.0.0.1:8112",
        "http://127.0.0.1:8113",
        "http://127.0.0.1:8114",
    ]
    # the count may come from the environment as text; service_url wins over the endpoint
    assert expand_endpoints("http://10.0.0.9:9000", "http://127.0.0.1:8111/", "2") == [
        "http://127.0.0.1:8111",
        "http://127.0.0.1:8112",
    ]


def test_single_endpoint_with_service_num_expands_and_path_prefix_is_kept():
    assert expand_endpoints("http://node7:8111/vlac", service_num=3) == [
        "http://node7:8111/vlac",
        "http://node7:8112/vlac",
        "http://node7:8113/vlac",
    ]


def test_lists_and_comma_separated_strings_are_normalised_and_deduplicated():
    assert expand_endpoints("http://a:1/, http://b:2,http://a:1") == ["http://a:1", "http://b:2"]
    assert expand_endpoints(["http://a:1", "https://b:2/x/"]) == ["http://a:1", "https://b:2/x"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((None,), "no reward service endpoint"),
        (("",), "empty"),
        (("127.0.0.1:8111",), "scheme"),
        (("ftp://host:1",), "http or https"),
        (("http://host:99999",), "(?i)port out of range"),
        ((None, "http://host", 2), "explicit port"),
        ((None, "http://host:65535", 2), "65535"),
        ((None, "http://host:8111", 0), ">= 1"),
        ((None, "http://host:8111", "four"), "integer"),
        ((["http://a:1", "http://b:2"], None, 2), "one base URL"),
    ],
)
def test_bad_endpoint_configs_raise_clear_errors(args, words):
    with pytest.raises(ValueError, match=words):
        expand_endpoints(*args)


def test_environment_overrides_the_configured_endpoint(monkeypatch):
    env = {"VLAC_SERVICE_URL": "http://127.0.0.1:8111", "VLAC_SERVICE_NUM": "2"}
    assert endpoints_from_env("http://127.0.0.1:9000", environ=env) == [
        "http://127.0.0.1:8111",
        "http://127.0.0.1:8112",
    ]
    assert endpoints_from_env("http://127.0.0.1:9000", environ={"VLAC_SERVICE_NUM": "2"}) == [
        "http://127.0.0.1:9000",
        "http://127.0.0.1:9001",
    ]
    assert endpoints_from_env("http://127.0.0.1:9000", environ={}) == ["http://127.0.0.1:9000"]

    monkeypatch.setenv("VLAC_SERVICE_URL", "http://127.0.0.1:8200")
    monkeypatch.setenv("VLAC_SERVICE_NUM", "3")
    with EndpointPool.from_config("http://127.0.0.1:9000", use_env=True) as pool:
        assert pool.urls == [f"http://127.0.0.1:{p}" for p in (8200, 8201, 8202)]
    with EndpointPool.from_config("http://127.0.0.1:9000", service_num=2) as pool:
        assert pool.urls == ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]


def test_a_client_closes_a_pool_handed_to_it_and_leaves_a_shared_one_open():
    handed = EndpointPool("http://127.0.0.1:8111")
    with EndpointPool("http://127.0.0.1:8111") as shared:
        ProgressClient(handed, close_pool=True).close()
        ProgressClient(shared).close()
        assert handed.closed and not shared.closed
    assert shared.closed
    own = ProgressClient("http://127.0.0.1:8111")  # URLs: the client opens its own pool
    own.close()
    assert own.pool.closed


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout": 0}, {"selection": "random"}, {"max_retries": -1}, {"total_timeout": -1.0}],
)
def test_bad_pool_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        EndpointPool("http://127.0.0.1:8111", **kwargs)
