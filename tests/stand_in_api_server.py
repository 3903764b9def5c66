"""A stand-in Kubernetes API server on loopback for unit tests of code that talks to one over HTTP (the kubectl
plugin's cluster access, the operator's reads of receiver registries through the pod proxy): fixed JSON answers
by path, and every request it got, with its headers, for the test to assert on."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StandInApiServer", "stand_in_api_server"]

NOT_FOUND = (404, {"kind": "Status", "message": "not found"})


@dataclass
class StandInApiServer:
    url: str
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """(path with query, headers with lower-case names) of every GET, in order."""


@contextlib.contextmanager
def stand_in_api_server(routes: Mapping[str, tuple[int, Any]]) -> Iterator[StandInApiServer]:
    """Serve `routes` (path without query -> (status, JSON body); anything else 404) until the block ends."""
    served = StandInApiServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            status, body = routes.get(self.path.split("?")[0], NOT_FOUND)
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *_args: Any) -> None:
            pass  # the test asserts on `seen`, not on a log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
