"""The reward service's endpoint list: URLs checked, expanded to consecutive ports, from env.

URLs are checked and normalised, one base URL expands to consecutive ports, and
``VLAC_SERVICE_URL`` / ``VLAC_SERVICE_NUM`` are read from the environment.
:class:`~evolve_envs.reward.clients.endpoint_pool.EndpointPool` resolves its ``endpoints``
argument here.

Example:
    >>> expand_endpoints("http://127.0.0.1:8111/", service_num=2)
    ['http://127.0.0.1:8111', 'http://127.0.0.1:8112']
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ENV_SERVICE_NUM", "ENV_SERVICE_URL", "endpoints_from_env", "expand_endpoints"]

ENV_SERVICE_URL = "VLAC_SERVICE_URL"
ENV_SERVICE_NUM = "VLAC_SERVICE_NUM"


def _normalize_url(url: str) -> str:
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"endpoint must be a non-empty URL string, got {url!r}")
    text = url.strip()
    if "://" not in text:
        raise ValueError(f"endpoint {text!r} needs a scheme, e.g. 'http://{text}'")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"endpoint {text!r}: scheme must be http or https")
    if not parts.hostname:
        raise ValueError(f"endpoint {text!r} has no host")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ValueError(f"endpoint {text!r}: {exc}") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _consecutive_ports(base_url: str, count: int) -> list[str]:
    base = _normalize_url(base_url)
    if count < 1:
        raise ValueError(f"service count must be >= 1, got {count}")
    if count == 1:
        return [base]
    parts = urlsplit(base)
    if parts.port is None:
        raise ValueError(f"{base!r}: expanding to {count} services needs an explicit port")
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    urls = []
    for offset in range(count):
        port = parts.port + offset
        if port > 65535:
            raise ValueError(f"{base!r} + {count} services runs past port 65535")
        netloc = f"{userinfo}{host}:{port}"
        urls.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return urls


def expand_endpoints(
    endpoint_or_list: str | Sequence[str] | None,
    service_url: str | None = None,
    service_num: int | str | None = None,
) -> list[str]:
    """Resolve the endpoint list of a deployment.

    * ``service_url`` (``VLAC_SERVICE_URL``) given: it is the first of ``service_num``
      (``VLAC_SERVICE_NUM``, default 1) services on consecutive ports, and ``endpoint_or_list``
      is ignored: ``("…", "http://127.0.0.1:8111", 4)`` -> ports 8111, 8112, 8113, 8114.
    * otherwise ``endpoint_or_list`` is one URL, a comma-separated string or a list of URLs;
      ``service_num > 1`` with a single URL expands it the same way.

    URLs are normalised (no trailing slash) and de-duplicated in order. Raises ``ValueError`` on a
    malformed URL, a missing port when expanding, or nothing to resolve.

    Example:
        >>> expand_endpoints(None, "http://127.0.0.1:8111", 2)
        ['http://127.0.0.1:8111', 'http://127.0.0.1:8112']
        >>> expand_endpoints("http://a:1/, http://b:2, http://a:1")
        ['http://a:1', 'http://b:2']
    """
    count = _parse_count(service_num)
    if service_url:
        urls = _consecutive_ports(service_url, count or 1)
    else:
        if endpoint_or_list is None:
            raise ValueError("no reward service endpoint configured (endpoint or VLAC_SERVICE_URL)")
        if isinstance(endpoint_or_list, str):
            items = [item for item in (s.strip() for s in endpoint_or_list.split(",")) if item]
        else:
            items = [str(item).strip() for item in endpoint_or_list]
        if not items:
            raise ValueError("empty reward service endpoint list")
        if count is not None and count > 1:
            if len(items) != 1:
                raise ValueError(
                    f"service_num={count} expands one base URL, got {len(items)} endpoints"
                )
            urls = _consecutive_ports(items[0], count)
        else:
            urls = [_normalize_url(item) for item in items]
    return list(dict.fromkeys(urls))


def _parse_count(service_num: int | str | None) -> int | None:
    if service_num is None or (isinstance(service_num, str) and not service_num.strip()):
        return None
    try:
        count = int(service_num)
    except (TypeError, ValueError):
        raise ValueError(f"service count must be an integer, got {service_num!r}") from None
    if count < 1:
        raise ValueError(f"service count must be >= 1, got {count}")
    return count


def endpoints_from_env(
    endpoint_or_list: str | Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """:func:`expand_endpoints` with ``VLAC_SERVICE_URL`` / ``VLAC_SERVICE_NUM`` read from the
    environment (they override ``endpoint_or_list``, as environment variables override YAML).

    Example:
        >>> env = {"VLAC_SERVICE_URL": "http://127.0.0.1:8111", "VLAC_SERVICE_NUM": "3"}
        >>> endpoints_from_env("http://127.0.0.1:9000", environ=env)
        ['http://127.0.0.1:8111', 'http://127.0.0.1:8112', 'http://127.0.0.1:8113']
        >>> endpoints_from_env("http://127.0.0.1:9000", environ={})
        ['http://127.0.0.1:9000']
    """
    env = os.environ if environ is None else environ
    return expand_endpoints(
        endpoint_or_list, env.get(ENV_SERVICE_URL) or None, env.get(ENV_SERVICE_NUM) or None
    )
