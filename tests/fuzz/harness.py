"""The fuzz harness: a real reward server in a child process, under resource limits, and the
checks every request sent to it must pass.

`FuzzServer` starts `evolve-reward-server --backend mock` on 127.0.0.1 with an address-space cap
(`RLIMIT_AS`, set in the child before it starts) and sends `Case`s to it over real HTTP (httpx),
or as raw bytes on a socket for malformed HTTP. For every case it measures the server's peak RSS
growth (the kernel's high-water mark, reset before the request) and the latency, and
`FuzzServer.check` fails the case on a crash, a hang (no answer within the time cap), a 5xx or a
breach of the per-request memory limit, after saving the case to the corpus folder, whose files
the regression tests replay (`tests/fuzz/test_fuzz.py`).

A case is stored as one `.req` file: a JSON line (method, path, content type, note), then the
body's bytes.

Example:
    >>> case = Case("POST", "/pickle", PICKLE, b"\\x80\\x04N.", note="None")
    >>> Case.loads(case.dumps()) == case
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from evolve_envs.reward.service.hosting.embedded import EmbeddedService

__all__ = [
    "CORPUS",
    "JSON",
    "MEMORY_LIMIT_MB",
    "PICKLE",
    "Case",
    "FuzzFailure",
    "FuzzServer",
    "Outcome",
    "memory_limit_mb",
    "peak_rss_mb",
    "reset_peak_rss",
]

JSON = "application/json"
PICKLE = "application/octet-stream"
#: The corpus the regression tests replay (EVOLVE_FUZZ_CORPUS overrides where failures go).
CORPUS = Path(__file__).resolve().parent / "corpus"
#: Peak RSS growth of the server one request may cause beyond holding its body once (the
#: service's per-request goal; see `memory_limit_mb`).
MEMORY_LIMIT_MB = 64.0
#: The server's address space (a backstop: a blow-up kills it instead of the machine).
ADDRESS_SPACE_BYTES = 4 << 30
#: A request not answered within this many seconds is a hang.
TIME_CAP_S = 15.0


@dataclass(frozen=True)
class Case:
    """One request: `method` POST/GET over HTTP, or RAW (the body is a whole HTTP request sent
    on a socket, then the socket's write side is closed) or STALL (sent, then left open)."""

    method: str
    path: str
    content_type: str | None
    body: bytes
    note: str = field(default="", compare=False)

    def dumps(self) -> bytes:
        head = {"method": self.method, "path": self.path, "content_type": self.content_type}
        return json.dumps({**head, "note": self.note}).encode() + b"\n" + self.body

    @classmethod
    def loads(cls, data: bytes) -> Case:
        head, _, body = data.partition(b"\n")
        meta = json.loads(head)
        return cls(meta["method"], meta["path"], meta["content_type"], body, meta.get("note", ""))

    def name(self, prefix: str) -> str:
        return f"{prefix}-{hashlib.sha1(self.dumps()).hexdigest()[:12]}.req"


def memory_limit_mb(case: Case) -> float:
    """The most peak RSS growth `case` may cause: `MEMORY_LIMIT_MB` beyond its body's size.

    The service admits bodies up to `max_body_bytes` (64 MiB) and must hold a body once while
    it reads it; a JSON body that is one long string (a base64 image) is held twice while it is
    parsed (the bytes and the string), however it is read. A flat 64 MB would leave a 30 MB body
    4 MB for everything else, and whether it fits would depend on the allocator's mood.

    Example:
        >>> memory_limit_mb(Case("POST", "/pickle", PICKLE, bytes(1 << 20)))
        65.0
    """
    return MEMORY_LIMIT_MB + len(case.body) / (1 << 20)


@dataclass
class Outcome:
    """What the server did with a case: status (None: no answer), seconds, peak RSS growth."""

    status: int | None
    seconds: float
    growth_mb: float
    alive: bool
    detail: str = ""


class FuzzFailure(AssertionError):
    """A case crashed or hung the server, got a 5xx or grew its memory past the limit."""


def _status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_mb(pid: int) -> float:
    """`pid`'s resident memory now (`VmRSS`), in MB."""
    return _status_kb(pid, "VmRSS") / 1024.0


def reset_peak_rss(pid: int) -> float:
    """Reset `pid`'s peak-RSS mark (`/proc/PID/clear_refs` <- 5); its RSS now, in MB."""
    with open(f"/proc/{pid}/clear_refs", "w") as fh:
        fh.write("5")
    return rss_mb(pid)


def peak_rss_mb(pid: int) -> float:
    """`pid`'s peak RSS since the last reset (`VmHWM`), in MB."""
    return _status_kb(pid, "VmHWM") / 1024.0


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


class FuzzServer:
    """A mock reward server at the default limits (plus `extra_args`) under `RLIMIT_AS`, with
    per-case measurements and statistics (`cases`, `worst_growth_mb`, `worst_seconds`)."""

    def __init__(self, extra_args: tuple[str, ...] = (), corpus: Path | None = None) -> None:
        self.service = EmbeddedService(
            "mock",
            preexec_fn=_cap_address_space,
            extra_args=["--pickle-at-root", *extra_args],
        )
        env_corpus = os.environ.get("EVOLVE_FUZZ_CORPUS")
        self.corpus = corpus or (Path(env_corpus) if env_corpus else CORPUS)
        self.cases = 0
        self.worst_growth_mb = 0.0
        self.worst_seconds = 0.0
        self.statuses: dict[int, int] = {}
        self.worst_growth_case = ""
        self.targets: dict[str, dict[str, float]] = {}
        self._saved: dict[str, Path] = {}
        self._http: httpx.Client | None = None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> FuzzServer:
        self.service.start()
        self._http = httpx.Client(base_url=self.service.url, timeout=TIME_CAP_S, trust_env=False)
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.close()
        self.service.stop()

    def restart(self) -> None:
        """A fresh server (after a case killed or hung this one, so the next cases, and the
        shrinking of a failure, are not answered by a broken server)."""
        self.stop()
        self.start()

    @property
    def pid(self) -> int:
        assert self.service.pid is not None
        return self.service.pid

    # --- sending --------------------------------------------------------------------------
    def send(self, case: Case) -> Outcome:
        """Send `case`, measuring latency and the server's peak RSS growth."""
        pid = self.pid
        before = reset_peak_rss(pid)
        start = time.perf_counter()
        status: int | None
        detail = ""
        try:
            status = self._send_raw(case) if case.method in ("RAW", "STALL") else self._send(case)
        except (httpx.HTTPError, OSError) as exc:
            status, detail = None, f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - start
        alive = self.service.is_running()
        growth = (peak_rss_mb(pid) - before) if alive else float("inf")
        outcome = Outcome(status, seconds, growth, alive, detail)
        self.cases += 1
        self.worst_seconds = max(self.worst_seconds, seconds)
        if alive and growth > self.worst_growth_mb:
            self.worst_growth_mb = growth
            self.worst_growth_case = f"{case.method} {case.path} -> {status}"
        if status is not None:
            self.statuses[status] = self.statuses.get(status, 0) + 1
        return outcome

    def _send(self, case: Case) -> int:
        assert self._http is not None
        headers = {"content-type": case.content_type} if case.content_type else {}
        resp = self._http.request(case.method, case.path, content=case.body, headers=headers)
        return resp.status_code

    def _send_raw(self, case: Case) -> int | None:
        with socket.create_connection(("127.0.0.1", self.service.port), timeout=TIME_CAP_S) as s:
            try:
                s.sendall(case.body)
                if case.method == "RAW":
                    s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server may close early (e.g. on a header it refuses); read its answer
            chunks = []
            try:
                while chunk := s.recv(65536):
                    chunks.append(chunk)
            except ConnectionResetError:
                pass
        head = b"".join(chunks)[:64]
        if not head:
            return 0  # closed without an answer (allowed for malformed HTTP; not a 5xx)
        try:
            return int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            return 0

    def healthy(self) -> bool:
        """The server is alive and answers `GET /health`."""
        if not self.service.is_running():
            return False
        assert self._http is not None
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    # --- checks ---------------------------------------------------------------------------
    def check(self, case: Case, outcome: Outcome, target: str = "case") -> None:
        """Raise `FuzzFailure` (after saving `case` to the corpus) on a crash, hang, 5xx,
        memory breach, or a server that no longer answers `/health`."""
        per = self.targets.setdefault(target, {"cases": 0, "worst_growth_mb": 0.0, "worst_s": 0.0})
        per["cases"] += 1
        per["worst_growth_mb"] = max(per["worst_growth_mb"], round(outcome.growth_mb, 1))
        per["worst_s"] = max(per["worst_s"], round(outcome.seconds, 3))
        problem = None
        if not outcome.alive:
            problem = "the server died"
        elif outcome.status is None:
            problem = f"no answer within {TIME_CAP_S:g} s ({outcome.detail})"
        elif outcome.status >= 500:
            problem = f"answered {outcome.status}"
        elif outcome.growth_mb > memory_limit_mb(case) and self._breaches_again(case):
            limit = memory_limit_mb(case)
            problem = f"peak RSS grew {outcome.growth_mb:.1f} MB (limit {limit:.0f} MB)"
        elif not self.healthy():
            problem = "the server stopped answering /health"
        if problem is None:
            return
        path = self.save(case, target)
        if not outcome.alive or outcome.status is None or not self.healthy():
            self.restart()
        raise FuzzFailure(f"{target}: {problem}; reproducer saved to {path}")

    def _breaches_again(self, case: Case) -> bool:
        """Whether `case` sent once more still grows the server past its limit: a request that
        costs too much does so every time, while the server's one-time growth (an allocator
        arena, a first use of a route's code) shows on the first request of its kind only."""
        again = self.send(case)
        return not again.alive or again.growth_mb > memory_limit_mb(case)

    def save(self, case: Case, target: str) -> Path:
        """Write `case` to the corpus; within one run, a target's newer (shrunk) failure
        replaces its older one, so the smallest reproducer is what remains."""
        self.corpus.mkdir(parents=True, exist_ok=True)
        path = self.corpus / case.name(target)
        path.write_bytes(case.dumps())
        old = self._saved.get(target)
        if old is not None and old != path and old.exists():
            old.unlink()
        self._saved[target] = path
        return path

    def stats(self) -> dict[str, object]:
        return {
            "cases": self.cases,
            "worst_growth_mb": round(self.worst_growth_mb, 1),
            "worst_growth_case": self.worst_growth_case,
            "worst_seconds": round(self.worst_seconds, 3),
            "statuses": dict(sorted(self.statuses.items())),
            "targets": self.targets,
        }
