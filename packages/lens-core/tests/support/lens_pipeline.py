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

    def collect(self) -> dict[str, Any]:
        """Return name -> metric from one collection."""
        data = self.reader.get_metrics_data()
        found: dict[str, Any] = {}
        if data is None:
            return found
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str) -> list[Any]:
        """Return the data points of one series (empty when it does not exist)."""
        metric = self.collect().get(name)
        return [] if metric is None else list(metric.data.data_points)
