"""The HTTP endpoint a Prometheus server scrapes, on a daemon thread.

Kept apart from `_exporters` so that `http.server` is imported only by a setup that
serves Prometheus metrics.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from http.server import ThreadingHTTPServer
from typing import Any

from nemo.lens import _fork_hooks

_logger = logging.getLogger(__name__)


class PrometheusEndpoint:
    """An HTTP server on a daemon thread that serves the Prometheus text format."""

    def __init__(self, host: str, port: int, handler: type[Any]) -> None:
        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        try:
            self._server = server_class((host, port), handler)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"setup_telemetry: cannot serve Prometheus metrics on {host}:{port} ({exc}); "
                "choose another address with OTEL_EXPORTER_PROMETHEUS_HOST and "
                "OTEL_EXPORTER_PROMETHEUS_PORT",
            ) from exc
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._owner_pid = os.getpid()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._server.serve_forever,
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
        if os.getpid() == self._owner_pid:
            self._server.shutdown()
        self._server.server_close()

    def close_inherited_socket(self) -> None:
        """In a forked child: release the child's copy of the listening socket."""
        self._stopped = True
        self._server.server_close()


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


_live_endpoints: weakref.WeakSet[PrometheusEndpoint] = weakref.WeakSet()


def _close_endpoints_in_child() -> None:
    # The serving thread does not survive fork(); the child's copy of the socket would
    # only keep the port bound after the parent exits.
    for endpoint in list(_live_endpoints):
        endpoint.close_inherited_socket()


_fork_hooks.register("prometheus endpoint", after_in_child=_close_endpoints_in_child)
