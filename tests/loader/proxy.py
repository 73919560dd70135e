"""A TCP proxy on loopback that slows (and, on request, breaks) the traffic to a real server: the loader's tests
and bench/loader_s3.py put it in front of SeaweedFS S3 to play a slow or flaky object store.

`ThrottlingProxy(target_port, latency_s=..., bytes_per_s=..., drop_first=n)`: every response chunk from the
server waits `latency_s` once per request burst and is paced to `bytes_per_s`; the first `n` connections are
closed at once (the client sees a reset and must retry). Threads only, stopped by `close()`.
"""

from __future__ import annotations

import socket
import threading
import time

HOST = "127.0.0.1"


class ThrottlingProxy:
    def __init__(
        self,
        target_port: int,
        *,
        latency_s: float = 0.0,
        bytes_per_s: float | None = None,
        drop_first: int = 0,
        target_host: str = HOST,
    ) -> None:
        self.target = (target_host, target_port)
        self.latency_s, self.bytes_per_s, self.drop_left = latency_s, bytes_per_s, drop_first
        self.dropped = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((HOST, 0))
        self._server.listen(64)
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="throttling-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                drop = self.drop_left > 0
                if drop:
                    self.drop_left -= 1
                    self.dropped += 1
            if drop:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()  # RST: the client sees a connection reset
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            request = threading.Event()  # set when the client sent something the server has not answered yet
            for src, dst, slow in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(src, dst, slow, request), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, slow: bool, request: threading.Event) -> None:
        src.settimeout(0.5)
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                if not slow:
                    request.set()
                else:
                    if request.is_set() and self.latency_s:  # first bytes of a response: the store's latency
                        request.clear()
                        time.sleep(self.latency_s)
                    if self.bytes_per_s:
                        time.sleep(len(data) / self.bytes_per_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(timeout=2)

    def __enter__(self) -> ThrottlingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
