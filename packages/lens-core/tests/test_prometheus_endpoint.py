"""The Prometheus endpoint serves scrapes on a bounded number of threads, whatever connects.

Real sockets on 127.0.0.1 against the real endpoint with prometheus_client's handler.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

pytest.importorskip("prometheus_client")

import prometheus_client
from prometheus_client.exposition import MetricsHandler

from nemo.lens._sdk import _prometheus
from nemo.lens._sdk._prometheus import (
    MAX_CONCURRENT_SCRAPES,
    MAX_QUEUED_SCRAPES,
    PrometheusEndpoint,
)

WAIT_S = 10.0
# Everything but the blank line that ends the request: the handler waits for it.
PARTIAL_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
END_OF_REQUEST = b"\r\n"


@pytest.fixture
def endpoint() -> Iterator[PrometheusEndpoint]:
    registry = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter("lens_scrapes_test", "a test series", registry=registry)
    counter.inc(3)
    served = PrometheusEndpoint("127.0.0.1", 0, MetricsHandler.factory(registry))
    yield served
    served.stop()


def connect(endpoint: PrometheusEndpoint) -> socket.socket:
    return socket.create_connection(("127.0.0.1", endpoint.port), timeout=WAIT_S)


def read_response(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def scrape(endpoint: PrometheusEndpoint) -> bytes:
    with connect(endpoint) as connection:
        connection.sendall(PARTIAL_REQUEST + END_OF_REQUEST)
        return read_response(connection)


def wait_until_held(endpoint: PrometheusEndpoint, held: int, before: set[threading.Thread]) -> int:
    """Wait (bounded) until the server holds `held` idle connections; the new thread count.

    A thread-per-connection server shows them as threads, a bounded one as workers plus
    its queue; whichever comes first ends the wait.
    """
    deadline = time.monotonic() + WAIT_S
    waiting = getattr(endpoint._server, "_waiting", None)
    while time.monotonic() < deadline:
        new_threads = len(set(threading.enumerate()) - before)
        queued = waiting.qsize() if waiting is not None else 0
        if new_threads >= held or min(new_threads, MAX_CONCURRENT_SCRAPES) + queued >= held:
            return new_threads
        time.sleep(0.01)
    raise AssertionError(f"the server did not take {held} connections within {WAIT_S} s")


def test_concurrent_connections_use_a_bounded_number_of_threads(
    endpoint: PrometheusEndpoint,
) -> None:
    """Twenty connections held open at once start at most MAX_CONCURRENT_SCRAPES threads."""
    before = set(threading.enumerate())
    held = MAX_CONCURRENT_SCRAPES + MAX_QUEUED_SCRAPES
    connections = [connect(endpoint) for _ in range(held)]
    try:
        for connection in connections:
            connection.sendall(PARTIAL_REQUEST)
        new_threads = wait_until_held(endpoint, held, before)
        assert new_threads <= MAX_CONCURRENT_SCRAPES
        for connection in connections:
            connection.sendall(END_OF_REQUEST)
        answers = [read_response(connection) for connection in connections]
    finally:
        for connection in connections:
            connection.close()
    assert all(answer.startswith(b"HTTP/1.0 200") for answer in answers)
    assert all(b"lens_scrapes_test_total 3.0" in answer for answer in answers)
    assert len(set(threading.enumerate()) - before) <= MAX_CONCURRENT_SCRAPES


def test_a_connection_beyond_the_queue_gets_503_and_scraping_recovers(
    endpoint: PrometheusEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """With the workers busy and the queue full, one more connection gets a 503; all recover."""
    before = set(threading.enumerate())
    held = MAX_CONCURRENT_SCRAPES + MAX_QUEUED_SCRAPES
    connections = [connect(endpoint) for _ in range(held)]
    try:
        for connection in connections:
            connection.sendall(PARTIAL_REQUEST)
        wait_until_held(endpoint, held, before)
        with connect(endpoint) as extra:
            refused = read_response(extra)
        assert refused.startswith(b"HTTP/1.0 503")
        for connection in connections:
            connection.sendall(END_OF_REQUEST)
        answers = [read_response(connection) for connection in connections]
    finally:
        for connection in connections:
            connection.close()
    assert all(answer.startswith(b"HTTP/1.0 200") for answer in answers)
    assert scrape(endpoint).startswith(b"HTTP/1.0 200")
    assert len(set(threading.enumerate()) - before) <= MAX_CONCURRENT_SCRAPES
    assert "answered 503" in caplog.text


def test_an_idle_connection_is_dropped(
    endpoint: PrometheusEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that connects and sends nothing is disconnected, so it cannot hold a worker."""
    monkeypatch.setattr(_prometheus, "CONNECTION_DEADLINE_S", 0.2)
    with connect(endpoint) as idle:
        idle.sendall(PARTIAL_REQUEST)
        assert read_response(idle) == b""  # closed by the server, well before WAIT_S
    assert scrape(endpoint).startswith(b"HTTP/1.0 200")


def send_slowly(connection: socket.socket, stop: threading.Event) -> None:
    """Send the request one byte a second until told to stop or the server hangs up."""
    for byte in PARTIAL_REQUEST:
        try:
            connection.sendall(bytes([byte]))
        except OSError:
            return
        if stop.wait(1.0):
            return


def test_slow_clients_on_every_worker_do_not_starve_a_scrape(
    endpoint: PrometheusEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients sending a byte a second on every worker are cut off at the connection
    deadline, so a scrape queued behind them is answered within the scraper's timeout."""
    # Raising=False: before the deadline existed this set a name nothing read.
    monkeypatch.setattr(_prometheus, "CONNECTION_DEADLINE_S", 1.0, raising=False)
    before = set(threading.enumerate())
    stop = threading.Event()
    slow = [connect(endpoint) for _ in range(MAX_CONCURRENT_SCRAPES)]
    senders = [threading.Thread(target=send_slowly, args=(c, stop)) for c in slow]
    try:
        for sender in senders:
            sender.start()
        wait_until_held(endpoint, MAX_CONCURRENT_SCRAPES, before)
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=WAIT_S / 2) as answer:
                body = answer.read()
        except (TimeoutError, urllib.error.URLError) as exc:
            pytest.fail(f"the scrape behind {len(slow)} slow clients got no answer: {exc!r}")
        hung_up = [read_response(connection) for connection in slow]  # bounded by WAIT_S
    finally:
        stop.set()
        for sender in senders:
            sender.join(WAIT_S)
        for connection in slow:
            connection.close()
    assert b"lens_scrapes_test_total 3.0" in body
    assert all(not answer.startswith(b"HTTP/1.0 200") for answer in hung_up)


def test_stop_ends_the_workers_and_releases_the_port(endpoint: PrometheusEndpoint) -> None:
    """After stop() no worker thread is left running and the port can be bound again."""
    for _ in range(MAX_CONCURRENT_SCRAPES):
        assert scrape(endpoint).startswith(b"HTTP/1.0 200")
    workers = [t for t in threading.enumerate() if t.name.startswith("nemo-lens-prometheus-")]
    endpoint.stop()
    for worker in workers:
        worker.join(timeout=WAIT_S)
        assert not worker.is_alive()
    with socket.socket() as rebind:
        rebind.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the endpoint does
        rebind.bind(("127.0.0.1", endpoint.port))
