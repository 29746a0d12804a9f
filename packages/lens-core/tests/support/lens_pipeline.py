"""An in-memory metrics pipeline for tests."""

from __future__ import annotations

from typing import Any


class MetricsPipeline:
    """A real SDK MeterProvider over an InMemoryMetricReader, with point look-ups."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.meter = self.provider.get_meter("lens-tests")
        self._latest: dict[str, Any] = {}

    def collect(self) -> dict[str, Any]:
        """Collect, and return name -> the latest metric seen for each series so far.

        Older SDKs (1.23) report a gauge only in the first collection after it was set,
        so a series missing from this collection keeps what the previous one showed.
        """
        data = self.reader.get_metrics_data()
        if data is not None:
            for resource_metrics in data.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        self._latest[metric.name] = metric
        return dict(self._latest)

    def points(self, name: str) -> list[Any]:
        """Return the data points of one series (empty when it does not exist)."""
        metric = self.collect().get(name)
        return [] if metric is None else list(metric.data.data_points)
