"""SDK views that apply `MetricSpec.buckets` where the advisory boundaries cannot.

`record_metrics` passes a histogram's buckets as `explicit_bucket_boundaries_advisory`
when the installed OpenTelemetry API has that keyword (1.30.0 on). The SDK honours it for
every reader from 1.32.0: on 1.30 and 1.31 a reader that asks for the explicit-bucket
aggregation itself (the OTLP exporters do) ignores it (1.30) or applies the first
histogram's advisory to all (1.31). Below 1.32, `setup_telemetry`'s pipeline installs one
view per declared histogram instead. A view is fixed when the MeterProvider is built, so
there only the groups registered before `setup_telemetry` get their buckets.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Final

from opentelemetry.sdk.metrics import Histogram
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.version import __version__ as _sdk_version

from nemo.lens.instruments import MetricSpec, registered_metric_groups
from nemo.lens.instruments._record import API_HAS_BUCKET_ADVISORY

_logger = logging.getLogger(__name__)

#: The first SDK release whose every reader honours the advisory boundaries.
ADVISORY_HONOURED_FROM: Final = (1, 32)


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


#: True when the advisory alone gives every reader a spec's buckets (read once).
ADVISORY_SUFFICES: Final = (
    API_HAS_BUCKET_ADVISORY and _release(_sdk_version) >= ADVISORY_HONOURED_FROM
)


def histogram_views() -> list[View]:
    """The views `setup_telemetry` adds: `bucket_views` of every registered group, or `[]`
    where the advisory boundaries already give every reader the declared buckets."""
    if ADVISORY_SUFFICES:
        return []
    return bucket_views(registered_metric_groups())


def bucket_views(groups: Mapping[str, Sequence[MetricSpec]]) -> list[View]:
    """One view per histogram series of `groups` that declares buckets.

    Each view selects the histogram by its series name (histograms only, so a counter of
    the same name elsewhere keeps its aggregation) and sets its explicit boundaries. When
    two groups declare the same series name (compared case-insensitively, as OpenTelemetry
    does) with different buckets, the first wins and the other is logged.
    """
    buckets_by_name: dict[str, tuple[float, ...]] = {}
    origin: dict[str, str] = {}
    for group, specs in groups.items():
        for spec in specs:
            if spec.buckets is None:
                continue
            # The SDK matches a view against the lower-cased instrument name (names are
            # case-insensitive), and fnmatch is case-sensitive on POSIX.
            name = spec.name.lower()
            buckets = tuple(spec.buckets)
            known = buckets_by_name.setdefault(name, buckets)
            if known != buckets:
                _logger.warning(
                    "setup_telemetry: histogram %r of group %r declares buckets %s, but "
                    "group %r declared it first with %s; the first declaration's buckets "
                    "apply",
                    spec.name,
                    group,
                    list(buckets),
                    origin[name],
                    list(known),
                )
            origin.setdefault(name, group)
    return [
        View(
            instrument_type=Histogram,
            instrument_name=name,
            aggregation=ExplicitBucketHistogramAggregation(boundaries=buckets),
        )
        for name, buckets in buckets_by_name.items()
    ]
