"""Small HTTP servers speaking other projects' published reward protocols (for client tests).

Each is written here from the request/response shapes those projects document; they run on a
real socket on 127.0.0.1 in a thread (`http.server`), so the clients under test use real HTTP.

* `pickle_scorer_server(answer)`: a deepgen_rl / VeRL-Omni / HPSv2 / flow_grpo-style scorer that
  has only `POST /` (no health route), unpickles the request with the standard `pickle` module
  (as those servers do) and answers `pickle.dumps(answer(request))`.
* `rlaif_video_server(shared_dir)`: an RLinf-RLAIF-style `POST /score` that requires a
  `video_path` and refuses `nframes` over 128 with 422, as a FastAPI/pydantic server would.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[tuple[str, list[Any]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.seen = []  # type: ignore[attr-defined]
    handler.seen = server.seen  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Quiet(BaseHTTPRequestHandler):
    seen: list[Any]

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def pickle_scorer_server(
    answer: Callable[[dict[str, Any]], Any], *, fail_first: int = 0
) -> Iterator[tuple[str, list[Any]]]:
    """Only `POST /`; the first `fail_first` requests answer 500 (to get it marked down)."""
    state = {"left": fail_first}

    class Handler(_Quiet):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path != "/":
                self._reply(404, b"Not Found", "text/plain")
                return
            request = pickle.loads(self._body())  # noqa: S301 - a trusted test client
            self.seen.append(request)
            if state["left"] > 0:
                state["left"] -= 1
                self._reply(500, pickle.dumps({"error": "warming up"}), "application/octet-stream")
                return
            self._reply(200, pickle.dumps(answer(request)), "application/octet-stream")

    with _serve(Handler) as served:
        yield served


@contextmanager
def rlaif_video_server(score: float = 0.75) -> Iterator[tuple[str, list[Any]]]:
    """`POST /score` needing `video_path` (a readable file) and `nframes <= 128`."""

    class Handler(_Quiet):
        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/score":
                self._reply(404, b'{"detail":"Not Found"}', "application/json")
                return
            request = json.loads(self._body())
            self.seen.append(request)
            problems = []
            if not isinstance(request.get("video_path"), str):
                problems.append({"loc": ["body", "video_path"], "msg": "Field required"})
            if int(request.get("nframes", 16)) > 128:
                problems.append({"loc": ["body", "nframes"], "msg": "less than or equal to 128"})
            if problems:
                self._reply(422, json.dumps({"detail": problems}).encode(), "application/json")
                return
            if not os.path.isfile(request["video_path"]):
                self._reply(400, b'{"detail":"video not found"}', "application/json")
                return
            body = json.dumps({"score": score, "raw_text": f"<answer>{score}</answer>"})
            self._reply(200, body.encode(), "application/json")

    with _serve(Handler) as served:
        yield served
