"""Everything in lens that imports the OpenTelemetry SDK or an exporter package.

The rest of lens needs only the API, and imports a module from here only inside the
function that builds an SDK object, so `import nemo.lens` never loads the SDK. A ruff rule
(banned-api, TID251) refuses SDK and exporter imports anywhere else except
`nemo.lens.testing`.

The names below are the SDK types other modules mention in annotations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader as MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter as SpanExporter
