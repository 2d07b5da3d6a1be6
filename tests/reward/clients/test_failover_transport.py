"""FailoverTransport on its own: URL rewriting, selection, mark-down and probes over a mock."""

from __future__ import annotations

import httpx
import pytest

from evolve_envs.reward.clients.failover_transport import (
    AVOID,
    ENDPOINT,
    FailoverTransport,
    NoEndpointAvailable,
)


def _client(transport: FailoverTransport) -> httpx.Client:
    return httpx.Client(base_url="http://placeholder", transport=transport)


def test_the_url_is_rewritten_to_the_chosen_endpoint_with_its_path_prefix() -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers["host"]))
        return httpx.Response(200)

    transport = FailoverTransport(
        ["http://a.example:1/api"], transport=httpx.MockTransport(handler)
    )
    with _client(transport) as client:
        request = client.build_request("GET", "/capabilities", params={"x": "1"})
        client.send(request)
    assert seen == [("http://a.example:1/api/capabilities?x=1", "a.example:1")]
    assert request.extensions[ENDPOINT] == "http://a.example:1/api"


def test_round_robin_rotates_and_avoided_endpoints_are_skipped() -> None:
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return httpx.Response(200)

    urls = ["http://a.example:1", "http://b.example:1"]
    transport = FailoverTransport(
        urls, transport=httpx.MockTransport(handler), selection="round_robin"
    )
    with _client(transport) as client:
        for _ in range(4):
            client.get("/x")
        for _ in range(3):
            client.send(client.build_request("GET", "/x", extensions={AVOID: {urls[0]}}))
    assert hosts == ["a.example", "b.example"] * 2 + ["b.example"] * 3


def test_5xx_marks_down_after_failures_to_down_but_4xx_never_does() -> None:
    status = {"a.example": 503, "b.example": 422}
    transport = FailoverTransport(
        ["http://a.example:1", "http://b.example:1"],
        transport=httpx.MockTransport(lambda r: httpx.Response(status[r.url.host])),
        failures_to_down=2,
        probe_interval_s=600,
    )
    with _client(transport) as client:
        for _ in range(6):
            client.get("/x")
    a, b = transport.endpoint_stats()
    assert not a["up"] and a["failures"] == 2 and "HTTP 503" in a["last_error"]
    assert b["up"] and b["failures"] == 0 and b["requests"] == 4
    transport.close()


def test_every_endpoint_down_fails_at_once_naming_them() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport = FailoverTransport(
        ["http://a.example:1"], transport=httpx.MockTransport(refuse), probe_interval_s=600
    )
    with _client(transport) as client:
        with pytest.raises(httpx.ConnectError):
            client.get("/x")
        with pytest.raises(NoEndpointAvailable, match=r"a\.example:1 \(ConnectError"):
            client.get("/x")


def test_probes_carry_the_probe_headers_and_bring_an_endpoint_back() -> None:
    seen: list[tuple[str, str | None]] = []
    alive = {"up": False}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        if not alive["up"]:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200)

    transport = FailoverTransport(
        ["http://a.example:1"], transport=httpx.MockTransport(handler),
        probe_headers={"Authorization": "Bearer t"}, probe_interval_s=600,
    )  # fmt: skip
    assert transport.probe() == {"http://a.example:1": False}
    alive["up"] = True
    assert transport.probe() == {"http://a.example:1": True}
    assert transport.healthy_urls() == ["http://a.example:1"]
    assert seen[-1] == ("/health", "Bearer t")
    transport.close()
