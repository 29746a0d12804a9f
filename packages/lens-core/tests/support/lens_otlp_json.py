"""Reading back the console exporters' OTLP/JSON lines (protobuf's JSON mapping) in tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def documents(text: str) -> list[dict[str, Any]]:
    """Every JSON object in `text`, one per non-blank line that starts with `{`."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def metric_requests(text: str) -> list[dict[str, Any]]:
    """The `ExportMetricsServiceRequest` lines in `text`."""
    return [document for document in documents(text) if "resourceMetrics" in document]


def metric_values(text: str, name: str) -> list[float]:
    """Every data point value of metric `name`, in export order (ints read from strings)."""
    values: list[float] = []
    for request in metric_requests(text):
        for metric in _metrics(request):
            if metric["name"] != name:
                continue
            data = metric.get("sum") or metric.get("gauge") or {}
            for point in data.get("dataPoints", []):
                if "asInt" in point:
                    values.append(int(point["asInt"]))
                else:
                    values.append(float(point.get("asDouble", 0.0)))
    return values


def span_names(text: str) -> list[str]:
    """The name of every span in the `ExportTraceServiceRequest` lines of `text`."""
    return [
        span["name"]
        for document in documents(text)
        for resource_spans in document.get("resourceSpans", [])
        for scope in resource_spans.get("scopeSpans", [])
        for span in scope.get("spans", [])
    ]


def scopes(text: str) -> list[tuple[str, str]]:
    """(name, version) of every metric scope in `text` ("" where the version is unset)."""
    return [
        (scope["scope"].get("name", ""), scope["scope"].get("version", ""))
        for request in metric_requests(text)
        for resource_metrics in request["resourceMetrics"]
        for scope in resource_metrics.get("scopeMetrics", [])
    ]


def resource_value(text: str, key: str) -> object:
    """The value of resource attribute `key` in the first request of `text`, or None."""
    for document in documents(text):
        for resources in document.values():
            for entry in resources:
                for attribute in entry.get("resource", {}).get("attributes", []):
                    if attribute["key"] == key:
                        return next(iter(attribute["value"].values()))
    return None


def _metrics(request: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for resource_metrics in request["resourceMetrics"]:
        for scope in resource_metrics.get("scopeMetrics", []):
            yield from scope.get("metrics", [])
