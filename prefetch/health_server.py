"""What the prefetch DaemonSet exposes: /livez, /readyz and Prometheus /metrics.

/readyz answers 200 only once the verified copy is in place, so the DaemonSet's rollout status
means "weights on every node"; /livez answers 200 while the process runs.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sealift.errors import InputError
from sealift.prefetch.agent import PrefetchMetrics


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` for --serve."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--serve {text!r} is not HOST:PORT", hint="e.g. 0.0.0.0:8080 or :8080")
    return host or "0.0.0.0", int(port)


class HealthServer:
    """A small threaded HTTP server over the agent's metrics."""

    def __init__(self, listen: str, metrics: PrefetchMetrics) -> None:
        host, port = parse_listen(listen)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                del args  # probes every few seconds would drown the log

            def do_GET(self) -> None:
                if self.path == "/livez":
                    status, body, kind = 200, b"ok\n", "text/plain"
                elif self.path == "/readyz":
                    ready = metrics.ready
                    status = 200 if ready else 503
                    body = b"ready\n" if ready else b"weights not in place yet\n"
                    kind = "text/plain"
                elif self.path == "/metrics":
                    status, body = 200, metrics.prometheus().encode()
                    kind = "text/plain; version=0.0.4"
                else:
                    status, body, kind = 404, b"not found\n", "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> HealthServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
