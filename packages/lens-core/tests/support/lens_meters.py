"""Real meters with a twist, for the registry's failure paths.

Each wraps a real SDK meter and changes one behaviour, so the rest of the pipeline
(aggregation, the in-memory reader) stays the real thing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class CountingMeter:
    """Delegates to a real meter and counts every create_* call by instrument name."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.creates: Counter[str] = Counter()

    def __getattr__(self, attribute: str) -> Any:
        target = getattr(self._real, attribute)
        if not attribute.startswith("create_"):
            return target

        def create(name: str, *args: Any, **kwargs: Any) -> Any:
            self.creates[name] += 1
            return target(name, *args, **kwargs)

        return create


class FailingCreateMeter(CountingMeter):
    """Like CountingMeter, but creating an instrument of one kind raises."""

    def __init__(self, real: Any, failing_method: str) -> None:
        super().__init__(real)
        self._failing_method = failing_method

    def __getattr__(self, attribute: str) -> Any:
        create = super().__getattr__(attribute)
        if attribute != self._failing_method:
            return create

        def failing(name: str, *args: Any, **kwargs: Any) -> Any:
            create(name, *args, **kwargs)
            raise RuntimeError(f"cannot create {name}")

        return failing


class BrokenInstrument:
    """An instrument whose every record method raises the given exception."""

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def _raise(self, *args: Any, **kwargs: Any) -> None:
        raise self._error

    add = record = set = _raise


class FailingEmitMeter(CountingMeter):
    """Like CountingMeter, but one instrument name gets an instrument that raises on record."""

    def __init__(self, real: Any, failing_name: str, error: BaseException) -> None:
        super().__init__(real)
        self._failing_name = failing_name
        self._error = error

    def __getattr__(self, attribute: str) -> Any:
        create = super().__getattr__(attribute)
        if not attribute.startswith("create_"):
            return create

        def maybe_broken(name: str, *args: Any, **kwargs: Any) -> Any:
            instrument = create(name, *args, **kwargs)
            return BrokenInstrument(self._error) if name == self._failing_name else instrument

        return maybe_broken


def sdk_forgets_delta_series() -> bool:
    """True on a release that forgets delta series at each collection (1.45.2 and newer):
    it replaces its mapping of a counter's series to their aggregations there."""
    from opentelemetry.sdk.metrics import Counter, MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

    from nemo.lens import _otel_internals

    reader = InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA})
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    try:
        counter = provider.get_meter("forgets").create_counter("forgets")
        counter.add(1)
        match = _otel_internals.series_match(counter, "counter")
        assert match is not None
        before = match.aggregations()
        reader.get_metrics_data()
        return match.aggregations() is not before
    finally:
        provider.shutdown()
