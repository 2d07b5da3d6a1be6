"""HeadWatch: a driver that lost the Ray head says so in one line and exits (docs/cluster.md).

Example (a GCS address nobody listens on; the callback stands in for the exit):
    >>> import threading
    >>> lost = threading.Event()
    >>> watch = HeadWatch("127.0.0.1:1", timeout_s=0.2, period_s=0.05, on_lost=lost.set)
    >>> _ = watch.start(); lost.wait(5)
    True
    >>> watch.stop()
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ClusterLostError", "HeadWatch", "gcs_address"]


class ClusterLostError(RuntimeError):
    """The Ray cluster's head node (its GCS) is gone."""


def gcs_address() -> str | None:
    """``host:port`` of the connected cluster's GCS, or None (Ray Client, or no Ray)."""
    import ray

    if not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - a Ray Client connection has no GCS address here
        return None


class HeadWatch:
    """Watch the GCS at ``address`` (``host:port``) from a daemon thread; after ``timeout_s``
    unreachable, ``on_lost`` runs (by default: ``message`` to ``stream``, then
    ``os._exit(status)``, since the main thread may be blocked inside Ray)."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 10.0,
        period_s: float = 1.0,
        on_lost: Callable[[], None] | None = None,
        message: str = "lost the Ray cluster's head node",
        stream: TextIO | None = None,
        status: int = 1,
    ) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.timeout_s = float(timeout_s)
        self.period_s = float(period_s)
        self.message = message
        self.stream = stream
        self.status = int(status)
        self.on_lost = on_lost or self._exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ray-head-watch", daemon=True)

    def reachable(self) -> bool:
        """Whether the GCS accepts a TCP connection now."""
        return self._reachable()

    def _reachable(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=self.period_s):
                return True
        except OSError:
            return False

    def _run(self) -> None:
        first_failure: float | None = None
        while not self._stop.wait(self.period_s):
            if self._reachable():
                first_failure = None
                continue
            now = time.monotonic()
            first_failure = first_failure if first_failure is not None else now
            if now - first_failure >= self.timeout_s:
                self.on_lost()
                return

    def _exit(self) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            print(self.message, file=stream, flush=True)
        finally:
            os._exit(self.status)

    def start(self) -> HeadWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
