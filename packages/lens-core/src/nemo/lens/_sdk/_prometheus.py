"""The HTTP endpoint a Prometheus server scrapes, on a daemon thread.

Kept apart from `_exporters` so that `http.server` is imported only by a setup that
serves Prometheus metrics.

Connections are served by a few worker threads, never one thread per connection: a
burst of connections (a misconfigured scraper, a port scan, clients that connect and
send nothing) cannot make the training process start threads without limit. At most
`MAX_CONCURRENT_SCRAPES` connections are served at once and `MAX_QUEUED_SCRAPES` more
wait their turn; a connection beyond that is answered `503 Service Unavailable` at once
and closed. From the moment a worker takes a connection, the client has
`CONNECTION_DEADLINE_S` in all to send its request and read the answer; then the serving
thread shuts the connection down, which ends the worker's wait at once. The deadline is
on the whole exchange, not on each `recv()`: a client sending a byte a second never lets a
per-read timeout expire, and four of them held every worker for as long as they liked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
import weakref
from http.server import HTTPServer
from typing import Any, Final

from nemo.lens import _fork_hooks
from nemo.lens._process import BuiltHere
from nemo.lens._warn_once import WarnOnce

_logger = logging.getLogger(__name__)
#: How often the serving loop checks for `stop()` (the standard library's default is 0.5 s).
_SHUTDOWN_POLL_S: Final = 0.05

#: Worker threads per endpoint: scrapes served at the same time.
MAX_CONCURRENT_SCRAPES: Final = 4
#: Accepted connections that may wait for a worker; beyond them a connection gets a 503.
MAX_QUEUED_SCRAPES: Final = 16
#: Seconds a worker gives one connection, in all, to send its request and read the answer.
#: Half Prometheus's default scrape timeout (10 s): a scrape queued behind slow clients is
#: still answered within it while at most `MAX_CONCURRENT_SCRAPES` of them are ahead of it
#: (they hold the workers at most this long, then one is free for it); behind more, it may
#: wait another deadline or longer, and Prometheus may time out first.
CONNECTION_DEADLINE_S: Final = 5.0

_REFUSAL: Final = (
    b"HTTP/1.0 503 Service Unavailable\r\n"
    b"Retry-After: 1\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 42\r\n"
    b"Connection: close\r\n"
    b"\r\n"
    b"too many concurrent scrapes; retry shortly"
)

_warnings = WarnOnce(_logger, "Prometheus endpoint")


class _BoundedHTTPServer(HTTPServer):
    """An HTTP server whose connections a small, fixed set of worker threads serves."""

    # The kernel's accept backlog (socketserver's default is 5): a burst of connections
    # waits there for the serving thread instead of having its SYNs dropped and retried.
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[Any]) -> None:
        super().__init__(address, handler)
        # Unbounded as a Queue, bounded by process_request (through _connections), so
        # stopping can always hand each worker its None.
        self._waiting: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        # Every accepted connection not yet closed, so a forked child can drop its copies.
        self._connections: set[socket.socket] = set()
        # The connections workers are serving -> when each must end (time.monotonic()),
        # under _serving_lock. A worker removes its connection under the lock and closes
        # it only after releasing it; the serving thread shuts down only connections still
        # listed, under the lock, so never one that is being or has been closed.
        self._serving: dict[socket.socket, float] = {}
        self._serving_lock = threading.Lock()
        self.server_port = int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        """On the serving thread: queue the connection for a worker, or refuse it now."""
        # Being served or waiting: every connection accepted and not yet closed.
        self._connections.add(request)
        if len(self._connections) > MAX_CONCURRENT_SCRAPES + MAX_QUEUED_SCRAPES:
            self._refuse(request)
            return
        with contextlib.suppress(OSError):  # closed by the peer: the handler finds out
            # A backstop: the deadline (service_actions) ends the connection first.
            request.settimeout(CONNECTION_DEADLINE_S)
        if len(self._workers) < MAX_CONCURRENT_SCRAPES:
            worker = threading.Thread(
                target=self._work,
                name=f"nemo-lens-prometheus-{self.server_port}-worker-{len(self._workers)}",
                daemon=True,
            )
            self._workers.append(worker)
            worker.start()
        self._waiting.put((request, client_address))

    def _refuse(self, request: socket.socket) -> None:
        _warnings.warn(
            ("refused", self.server_address),
            "Prometheus endpoint on port %s: %d connections were already being served or "
            "waiting, so a connection was answered 503; more than one scraper may be "
            "polling it, or clients connect without sending a request. Further refusals "
            "are not logged.",
            self.server_port,
            MAX_CONCURRENT_SCRAPES + MAX_QUEUED_SCRAPES,
        )
        try:
            request.setblocking(False)  # never wait on a peer that does not read
            request.sendall(_REFUSAL)
            # Read (once, so a flood cannot keep this thread) what already arrived: closing
            # on unread bytes would reset the connection and could discard the answer.
            request.recv(65536)
        except OSError:
            pass
        self.shutdown_request(request)

    def _work(self) -> None:
        while True:
            item = self._waiting.get()
            if item is None:
                return
            request, client_address = item
            with self._serving_lock:
                self._serving[request] = time.monotonic() + CONNECTION_DEADLINE_S
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                with self._serving_lock:
                    del self._serving[request]
                self.shutdown_request(request)

    def service_actions(self) -> None:
        """On the serving thread, every `_SHUTDOWN_POLL_S`: end each connection past its
        deadline. shutdown() wakes the worker blocked on it (recv returns end of file,
        send fails), and the worker then closes it as usual."""
        now = time.monotonic()
        with self._serving_lock:
            for connection, deadline in self._serving.items():
                if now >= deadline:
                    with contextlib.suppress(OSError):  # already shut down, or reset
                        connection.shutdown(socket.SHUT_RDWR)

    def close_request(self, request: Any) -> None:
        self._connections.discard(request)
        super().close_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that vanished mid-scrape is its own problem: no traceback on stderr."""
        _logger.debug("Prometheus scrape from %s failed", client_address, exc_info=True)

    def stop_workers(self) -> None:
        """Close the connections still waiting and let every worker return."""
        while True:
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in self._workers:
            self._waiting.put(None)

    def drop_inherited_connections(self) -> None:
        """In a forked child: close the child's copies of the parent's connections.

        Only the descriptor is closed: `shutdown()` would end the parent's connection too,
        and `close()` waits for the handler's file objects, which no thread will close in
        the child. No lock is taken (a parent thread may have held one at fork time); the
        child has one thread.
        """
        for connection in list(self._connections):
            with contextlib.suppress(OSError):
                os.close(connection.detach())
        self._connections = set()
        self._workers = []
        self._serving = {}
        self._serving_lock = threading.Lock()


class _BoundedHTTPServer6(_BoundedHTTPServer):
    address_family = socket.AF_INET6


class PrometheusEndpoint:
    """An HTTP server on a daemon thread that serves the Prometheus text format."""

    def __init__(self, host: str, port: int, handler: type[Any]) -> None:
        server_class = _BoundedHTTPServer6 if ":" in host else _BoundedHTTPServer
        try:
            self._server = server_class((host, port), handler)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"setup_telemetry: cannot serve Prometheus metrics on {host}:{port} ({exc}); "
                "choose another address with OTEL_EXPORTER_PROMETHEUS_HOST and "
                "OTEL_EXPORTER_PROMETHEUS_PORT",
            ) from exc
        self.host = host
        self.port = int(self._server.server_address[1])
        self._built = BuiltHere()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # shutdown() waits for the loop to notice; at the default 0.5 s, stopping the
            # endpoint was most of handle.shutdown()'s time. 20 wake-ups a second cost nothing.
            kwargs={"poll_interval": _SHUTDOWN_POLL_S},
            name=f"nemo-lens-prometheus-{self.port}",
            daemon=True,
        )
        self._thread.start()
        _live_endpoints.add(self)
        _logger.info("serving Prometheus metrics at http://%s:%d/metrics", host, self.port)

    def stop(self) -> None:
        """Stop serving and release the port; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._built.here():
            self._server.shutdown()
            self._server.stop_workers()
        self._server.server_close()

    def close_inherited_socket(self) -> None:
        """In a forked child: release the child's copy of the listening socket."""
        self._stopped = True
        self._server.drop_inherited_connections()
        self._server.server_close()


_live_endpoints: weakref.WeakSet[PrometheusEndpoint] = weakref.WeakSet()


# Ports an ancestor of this process served when it forked (its endpoints stay its own).
_ancestors_ports: set[int] = set()


def parent_serves(address: tuple[str, int] | None) -> bool:
    """True in a forked child when `address`'s port is one a parent process (or its
    parent) served at the fork, so binding it here would fail."""
    return address is not None and address[1] in _ancestors_ports


def _close_endpoints_in_child() -> None:
    # The serving thread does not survive fork(); the child's copy of the socket would
    # only keep the port bound after the parent exits.
    for endpoint in list(_live_endpoints):
        if not endpoint._stopped and endpoint.port:
            _ancestors_ports.add(endpoint.port)
        endpoint.close_inherited_socket()


_fork_hooks.register("prometheus endpoint", after_in_child=_close_endpoints_in_child)
