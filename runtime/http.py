"""A small read-only HTTP endpoint for a service's metrics (Prometheus scrapes it).

Contract: `TextEndpoint(ip, port, paths)` serves `GET <path>` for each `path -> text()` in
`paths` from a daemon thread, with `text/plain; version=0.0.4`; any other path is 404 and any
other method 405. `text()` is called on the server thread, so it must only read something
the service publishes whole (e.g. a string it replaces each tick). `address` is
`http://ip:port` (port 0 picks a free one); `close()` stops it.
"""
from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict

__all__ = ["TextEndpoint"]

log = logging.getLogger("runtime.http")


class TextEndpoint:
    """See the module contract."""

    def __init__(self, ip: str, port: int, paths: Dict[str, Callable[[], str]]) -> None:
        routes = dict(paths)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                produce = routes.get(self.path.split("?", 1)[0])
                if produce is None:
                    self.send_error(404, "unknown path; try " + ", ".join(sorted(routes)))
                    return
                body = produce().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                self.send_error(405, "read-only")

            def log_message(self, fmt: str, *args) -> None:
                log.debug("%s " + fmt, self.client_address[0], *args)

        self._server = ThreadingHTTPServer((ip, port), Handler)
        self._server.daemon_threads = True
        self.address = f"http://{ip}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="http",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
