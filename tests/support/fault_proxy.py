"""An HTTP reverse proxy on loopback that injects the faults real networks and registries have.

Between sealift and a real registry: some requests get a 500 or a 429 with Retry-After, some
connections are dropped before an answer or in the middle of a body, some responses are slow.
The schedule is seeded, so a failing run can be replayed. Faults stop after ``budget`` of them,
so every run can finish: the test checks the end state, not the weather.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

FAULTS = ("500", "429", "drop-before", "drop-request-body", "drop-response-body", "slow")
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class FaultProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` (host:port, plain http), injecting faults."""

    def __init__(
        self, upstream: str, *, seed: int = 1, rate: float = 0.3, budget: int = 40
    ) -> None:
        self.upstream = upstream
        self.random = random.Random(seed)
        self.rate = rate
        self.budget = budget
        self.injected: list[str] = []
        # Every request seen, for tests that check what a client sent: (method, path, headers).
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                del args

            def _handle(self) -> None:
                proxy.forward(self)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _pick(self) -> str | None:
        with self._lock:
            if len(self.injected) >= self.budget or self.random.random() >= self.rate:
                return None
            fault = self.random.choice(FAULTS)
            self.injected.append(fault)
            return fault

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append((handler.command, handler.path, dict(handler.headers.items())))
        fault = self._pick()
        length = int(handler.headers.get("Content-Length") or 0)
        if fault in ("500", "429"):
            # The body must be consumed, or the client sees a reset instead of the answer.
            self._drain(handler, length)
            handler.send_response(int(fault))
            if fault == "429":
                handler.send_header("Retry-After", "0")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if fault == "drop-before":
            self._kill(handler)
            return
        host, port = self.upstream.rsplit(":", 1)
        upstream = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            upstream.putrequest(
                handler.command, handler.path, skip_host=True, skip_accept_encoding=True
            )
            for key, value in handler.headers.items():
                if key.lower() not in HOP_HEADERS:
                    upstream.putheader(key, value)
            upstream.endheaders()
            remaining = length
            cut = remaining // 2 if fault == "drop-request-body" and remaining > 1 else -1
            while remaining:
                chunk = handler.rfile.read(min(remaining, 1 << 16))
                if not chunk:
                    break
                remaining -= len(chunk)
                if cut >= 0 and length - remaining >= cut:
                    self._kill(handler)
                    return
                upstream.send(chunk)
            response = upstream.getresponse()
            body_length = response.getheader("Content-Length")
            handler.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in HOP_HEADERS:
                    handler.send_header(key, value)
            if body_length is None and handler.command != "HEAD":
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            if handler.command == "HEAD":
                return
            sent = 0
            total = int(body_length) if body_length is not None else -1
            while chunk := response.read(1 << 16):
                if fault == "drop-response-body" and total > 1 and sent + len(chunk) >= total // 2:
                    handler.wfile.write(chunk[: max(total // 2 - sent, 0)])
                    self._kill(handler)
                    return
                if fault == "slow":
                    time.sleep(0.05)
                handler.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            self._kill(handler)
        finally:
            upstream.close()

    @staticmethod
    def _drain(handler: BaseHTTPRequestHandler, length: int) -> None:
        while length > 0:
            chunk = handler.rfile.read(min(length, 1 << 16))
            if not chunk:
                return
            length -= len(chunk)

    @staticmethod
    def _kill(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
