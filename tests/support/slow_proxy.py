"""A TCP proxy on loopback that slows traffic down, so a test can interrupt a transfer midway.

Real bytes from a real server, only slower: kill -9 tests use it to land a kill at a random
point of a copy instead of hoping the machine is slow enough.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

LOOPBACK = "127.0.0.1"


class SlowProxy:
    """Forwards 127.0.0.1:<port> to ``target`` at about ``rate`` bytes per second per connection."""

    def __init__(self, target: str, *, rate: int) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._rate = rate
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(32)
        self.host = f"{LOOPBACK}:{self._listener.getsockname()[1]}"
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target, timeout=10)
            for source, sink, throttle in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pipe, args=(source, sink, throttle), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, throttle: bool) -> None:
        chunk = max(1024, self._rate // 50)
        try:
            while not self._closed.is_set():
                data = source.recv(chunk)
                if not data:
                    break
                sink.sendall(data)
                if throttle:
                    time.sleep(len(data) / self._rate)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and end the forwarding threads."""
        self._closed.set()
        self._listener.close()

    def __enter__(self) -> SlowProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
