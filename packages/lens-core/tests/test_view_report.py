"""`lens view`'s reading of OTLP/JSON lines: what the report's data holds for real runs,
for hand-built temporalities and buckets, and for hostile files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from lens_view_runs import (
    SECOND,
    T0,
    Expected,
    attributes,
    logs_request,
    metrics_request,
    span,
    spans_request,
    two_rank_run,
)

from nemo.lens._view import _decimate, _metric_charts, _quantiles
from nemo.lens._view._page import render_page
from nemo.lens._view._report import build_report


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two ranks' files from a real lens run (lens_view_runs.two_rank_run)."""
    return two_rank_run(tmp_path_factory.mktemp("ranks"))


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def _chart(data: dict[str, Any], name: str) -> dict[str, Any]:
    (chart,) = [chart for chart in data["metrics"] if chart["name"] == name]
    return dict(chart)


def test_a_real_two_rank_run_gives_every_point_span_and_log(rank_files: list[Path]) -> None:
    """Every series of the two ranks gets its points, every span name its count, every log
    a row; the header names both ranks and skips nothing."""
    expected = Expected.of(rank_files)
    data = build_report(rank_files).data
    assert data["counts"]["skippedLines"] == 0
    assert data["counts"]["skippedRecords"] == 0
    assert sorted(source["rank"] for source in data["sources"]) == ["0", "1"]
    assert {chart["name"] for chart in data["metrics"]} == set(expected.points)
    for name in expected.points:
        chart = _chart(data, name)
        assert chart["kind"] == expected.kinds[name]
        drawn = sorted((series["points"] for series in chart["series"]), reverse=True)
        assert drawn == expected.series_points(name)
        assert all(len(series["t"]) == series["points"] for series in chart["series"])
        assert all(series["label"].startswith("trainer rank ") for series in chart["series"])
    rows = {row["name"]: row["count"] for row in data["spanTable"]}
    assert rows == dict(expected.span_counts)
    table = {row["name"]: row for row in data["spanTable"]}
    assert table["train.checkpoint"]["errors"] == 2
    # A share of the ranks' summed wall time: steps on both ranks stay within 100 %.
    assert 0.0 < table["train.step"]["share"] <= 1.0
    assert data["counts"]["logs"] == len(data["logs"]) == expected.logs


def test_logs_link_to_spans_on_the_timeline(rank_files: list[Path]) -> None:
    """Each log written inside a step carries its trace and span, and that trace is on the
    timeline with the span among its rows."""
    data = build_report(rank_files).data
    traces = {trace["traceId"]: trace for trace in data["traces"]}
    for row in data["logs"]:
        assert row["traceId"] in traces
        assert row["spanId"] in {span["spanId"] for span in traces[row["traceId"]]["spans"]}


def test_the_timeline_nests_children_under_their_parent(tmp_path: Path) -> None:
    """Rows come depth-first: a child right under its parent, one level deeper, siblings by
    start; a span whose parent is missing is a root; the slowest trace comes first."""
    trace, quick = "a" * 32, "b" * 32
    spans = [
        span("late-child", trace, "3" * 16, parent="1" * 16, start_s=0.6, end_s=0.9),
        span("grandchild", trace, "4" * 16, parent="2" * 16, start_s=0.2, end_s=0.3),
        span("early-child", trace, "2" * 16, parent="1" * 16, start_s=0.1, end_s=0.5),
        span("root", trace, "1" * 16, start_s=0.0, end_s=2.0),
        span("orphan", trace, "5" * 16, parent="9" * 16, start_s=1.0, end_s=1.1, error=True),
        span("quick-root", quick, "6" * 16, start_s=0.0, end_s=0.1),
    ]
    data = build_report([_write(tmp_path / "spans.jsonl", [spans_request(spans)])]).data
    assert [trace["traceId"] for trace in data["traces"]] == [trace, quick]
    rows = [(row["name"], row["depth"]) for row in data["traces"][0]["spans"]]
    assert rows == [
        ("root", 0),
        ("early-child", 1),
        ("grandchild", 2),
        ("late-child", 1),
        ("orphan", 0),
    ]
    assert data["traces"][0]["spans"][-1]["error"] is True
    table = {row["name"]: row for row in data["spanTable"]}
    assert table["root"]["totalMs"] == pytest.approx(2000.0)
    assert table["root"]["share"] == pytest.approx(1.0)
    assert table["orphan"]["errors"] == 1


def _counter(points: list[tuple[int, int, float]], temporality: int | str) -> dict[str, Any]:
    return {
        "name": "work.items",
        "unit": "{item}",
        "sum": {
            "isMonotonic": True,
            "aggregationTemporality": temporality,
            "dataPoints": [
                {"startTimeUnixNano": str(start), "timeUnixNano": str(time), "asDouble": value}
                for start, time, value in points
            ],
        },
    }


def test_delta_and_cumulative_counters_chart_the_same_rate_and_total(tmp_path: Path) -> None:
    """10 items/s for 3 intervals, then 20/s: delta and cumulative give the same rates
    and running totals (cumulative's first point has no rate: it needs two points)."""
    per_second = [10.0, 10.0, 10.0, 20.0]
    times = [T0 + (i + 1) * SECOND for i in range(4)]
    cumulative, delta, total = [], [], 0.0
    for index, rate in enumerate(per_second):
        total += rate
        cumulative.append((T0, times[index], total))
        delta.append((times[index] - SECOND, times[index], rate))
    lines = [metrics_request([_counter(cumulative, 2)], service="c")]
    lines.append(metrics_request([_counter(delta, "AGGREGATION_TEMPORALITY_DELTA")], service="d"))
    data = build_report([_write(tmp_path / "counters.jsonl", lines)]).data
    chart = _chart(data, "work.items")
    by_service = {
        data["sources"][series["source"]]["service"]: series for series in chart["series"]
    }
    assert by_service["c"]["rate"] == [None, 10.0, 10.0, 20.0]
    assert by_service["d"]["rate"] == per_second
    assert by_service["c"]["total"] == by_service["d"]["total"] == [10.0, 20.0, 30.0, 50.0]


def _histogram(points: list[tuple[int, list[int]]], temporality: int) -> dict[str, Any]:
    return {
        "name": "step.duration",
        "unit": "ms",
        "histogram": {
            "aggregationTemporality": temporality,
            "dataPoints": [
                {
                    "startTimeUnixNano": str(start),
                    "timeUnixNano": str(start + SECOND),
                    "count": str(sum(counts)),
                    "bucketCounts": [str(count) for count in counts],
                    "explicitBounds": [10.0, 20.0, 30.0],
                }
                for start, counts in points
            ],
        },
    }


def test_delta_and_cumulative_histograms_give_the_same_quantiles(tmp_path: Path) -> None:
    """Per interval, p50/p90/p99 come from the buckets that interval added; both
    temporalities chart the same, and the distribution is everything up to the last
    export. An interval that added nothing is a gap."""
    added = [[0, 10, 0, 0], [0, 0, 10, 0], [0, 0, 0, 0], [5, 5, 0, 0]]
    running = [0, 0, 0, 0]
    cumulative, delta = [], []
    for index, counts in enumerate(added):
        running = [held + new for held, new in zip(running, counts, strict=True)]
        cumulative.append((T0, list(running)))
        delta.append((T0 + index * SECOND, counts))
    # Cumulative points all start at T0 but end a second after their own start in
    # _histogram; give them increasing times by shifting each start, same run kept.
    cumulative_metric = _histogram(cumulative, 2)
    for index, point in enumerate(cumulative_metric["histogram"]["dataPoints"]):
        point["timeUnixNano"] = str(T0 + (index + 1) * SECOND)
    lines = [metrics_request([cumulative_metric], service="c")]
    lines.append(metrics_request([_histogram(delta, 1)], service="d"))
    data = build_report([_write(tmp_path / "histograms.jsonl", lines)]).data
    chart = _chart(data, "step.duration")
    by_service = {
        data["sources"][series["source"]]["service"]: series for series in chart["series"]
    }
    for column in ("p50", "p90", "p99"):
        assert by_service["c"][column] == pytest.approx(by_service["d"][column], nan_ok=True)
    assert by_service["c"]["p50"] == pytest.approx([15.0, 25.0, None, 10.0], nan_ok=True)
    distributions = [entry["counts"] for entry in chart["distribution"]]
    assert distributions == [[5, 15, 10, 0], [5, 15, 10, 0]]


def test_quantiles_interpolate_inside_the_bucket() -> None:
    """The quantile sits at its rank's place inside its bucket, clamped by min and max."""
    bounds, counts = [0.0, 10.0, 100.0], [0, 4, 4, 2]
    assert _quantiles.quantile(0.5, bounds, counts) == pytest.approx(10.0 + 90 * 0.25)
    assert _quantiles.quantile(0.25, bounds, counts) == pytest.approx(6.25)
    assert _quantiles.quantile(0.99, bounds, counts, high=150.0) == pytest.approx(147.5)
    assert math.isnan(_quantiles.quantile(0.5, bounds, [0, 0, 0, 0]))


def test_exponential_buckets_become_explicit_ones() -> None:
    """Scale 0 (base 2): positive buckets from offset 1 hold (2, 4] and (4, 8]; an empty
    bucket at each end keeps their outer limits; the zero bucket is as narrow as a float
    allows, so values there sit at 0."""
    bounds, counts = _quantiles.exponential_buckets(0, 1, (1, [3, 5]), (0, []))
    assert bounds == [-1.0, -5e-324, 0.0, 2.0, 4.0, 8.0]
    assert counts == [0, 0, 1, 0, 3, 5, 0]
    assert _quantiles.quantile(0.1, bounds, counts) == pytest.approx(0.0)


def test_decimation_keeps_a_one_point_spike() -> None:
    """A 100,000-point series drawn in 2,000 points still shows its single spike."""
    times = [float(i) for i in range(100_000)]
    values = [1.0] * 100_000
    values[54_321] = 1000.0
    kept = _decimate.kept_indices(times, values, 1000)
    assert len(kept) <= 2000
    assert 54_321 in kept
    assert kept == sorted(kept)


def test_a_long_series_is_drawn_decimated(tmp_path: Path) -> None:
    """A gauge of 30,000 points is drawn in at most MAX_DRAWN points, its extremes kept,
    and the chart says how many it had."""
    points = [
        {"timeUnixNano": str(T0 + i * SECOND), "asDouble": -5.0 if i == 12_345 else float(i % 7)}
        for i in range(30_000)
    ]
    metric = {"name": "long.gauge", "gauge": {"dataPoints": points}}
    data = build_report([_write(tmp_path / "long.jsonl", [metrics_request([metric])])]).data
    chart = _chart(data, "long.gauge")
    (series,) = chart["series"]
    assert series["points"] == 30_000
    assert len(series["t"]) <= _metric_charts.MAX_DRAWN
    assert chart["decimated"] is True
    assert min(series["value"]) == -5.0
    assert max(series["value"]) == 6.0
    assert series["t"] == sorted(series["t"])


HOSTILE_LINES = [
    '{"resourceMetrics": [{"resource": {}, "scopeMetrics": [',  # truncated
    "this is not json",
    "[1, 2, 3]",
    '{"somethingElse": 1}',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]}',
    '{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "gauge": '
    '{"dataPoints": [{"asDouble": 1.0}]}}]}]}]}',  # a point without a time
    "[" * 100_000,
]


def test_hostile_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    """Truncated, non-JSON, non-object, unknown, deeply nested lines and records without
    what the report needs are counted; the good lines among them still report, and
    unknown fields are ignored."""
    good = {
        "name": "good.gauge",
        "futureField": {"nested": [1, 2]},
        "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asDouble": 2.5, "extra": True}]},
    }
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(
        "\n".join([metrics_request([good]), *HOSTILE_LINES]).encode() + b"\n\xff\xfe\x00bad\n"
    )
    data = build_report([path]).data
    assert data["counts"]["skippedLines"] == 6
    assert data["counts"]["skippedRecords"] == 2
    assert _chart(data, "good.gauge")["series"][0]["value"] == [2.5]
    assert data["skippedExamples"][0].startswith("hostile.jsonl:2:")


def test_an_empty_file_gives_an_empty_report(tmp_path: Path) -> None:
    """No lines: zero counts, no charts, no time range."""
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    data = build_report([path]).data
    assert data["counts"]["lines"] == 0
    assert data["metrics"] == data["traces"] == data["logs"] == []
    assert data["startMs"] is None


def test_many_series_keep_memory_and_the_page_bounded(tmp_path: Path) -> None:
    """100,000 series of one metric: MAX_SERIES are drawn, the rest counted, and the page
    stays under 10 MB."""
    path = tmp_path / "series.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for batch in range(100):
            points = [
                {
                    "timeUnixNano": str(T0 + batch * SECOND),
                    "asDouble": 1.0,
                    "attributes": attributes(shard=f"shard-{batch * 1000 + i}"),
                }
                for i in range(1000)
            ]
            metric = {"name": "per.shard", "gauge": {"dataPoints": points}}
            out.write(metrics_request([metric]) + "\n")
    report = build_report([path])
    chart = _chart(report.data, "per.shard")
    assert len(chart["series"]) == _metric_charts.MAX_SERIES
    assert chart["hiddenSeries"] == 100_000 - _metric_charts.MAX_SERIES
    assert report.data["counts"]["points"] == 100_000
    assert len(render_page(report, "series").encode()) < 10_000_000


def test_secrets_never_reach_the_page(tmp_path: Path) -> None:
    """A secret-named attribute and a `password=...` in a log body are redacted, and text
    that looks like markup stays inside the data block."""
    metric = {
        "name": "m",
        "gauge": {
            "dataPoints": [
                {
                    "timeUnixNano": str(T0),
                    "asDouble": 1.0,
                    "attributes": attributes(api_key="sk-live-123", note="</script><b>x"),
                }
            ]
        },
    }
    log = {
        "timeUnixNano": str(T0),
        "severityNumber": 17,
        "body": {"stringValue": "login failed password=hunter2"},
    }
    path = _write(tmp_path / "secret.jsonl", [metrics_request([metric]), logs_request([log])])
    page = render_page(build_report([path]), "secret")
    assert "sk-live-123" not in page
    assert "hunter2" not in page
    assert "[REDACTED]" in page
    data_block = page.split('id="lens-report-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data_block)["logs"][0]["severity"] == "ERROR"
    assert "\\u003c/script>\\u003cb>x" in data_block
