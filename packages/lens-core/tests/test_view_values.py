"""`lens view`'s reading of single values and records: OTLP's AnyValue forms, enums and
numbers as protobuf's JSON writes them, exponential histograms, summaries, logs'
severities, and the bounds on what the page shows."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from lens_cli import run_lens
from lens_view_runs import SECOND, T0, logs_request, metrics_request, span, spans_request

from nemo.lens._view import _decimate, _log_table, _metric_charts, _otlp_json, _quantiles
from nemo.lens._view._page import render_page
from nemo.lens._view._report import build_report


def _report(tmp_path: Path, *lines: str) -> dict[str, Any]:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return build_report([path]).data


def test_every_any_value_form_decodes() -> None:
    """Strings, ints as strings, doubles, bools, bytes, arrays and key-value lists decode;
    a value nested past the depth limit shows as an ellipsis."""
    items = [
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "i", "value": {"intValue": "12"}},
        {"key": "d", "value": {"doubleValue": 0.5}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "y", "value": {"bytesValue": "AAE="}},
        {"key": "a", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "z"}]}}},
        {"key": "k", "value": {"kvlistValue": {"values": [{"key": "n", "value": {}}]}}},
        {"key": 3, "value": {"stringValue": "no string key"}},
    ]
    decoded = _otlp_json.decode_attributes(items)
    assert decoded == {
        "s": "x",
        "i": 12,
        "d": 0.5,
        "b": True,
        "y": "AAE=",
        "a": [1, "z"],
        "k": {"n": None},
    }
    deep: dict[str, Any] = {"stringValue": "bottom"}
    for _ in range(20):
        deep = {"arrayValue": {"values": [deep]}}
    value = _otlp_json.any_value(deep)
    for _ in range(8):
        value = value[0]
    assert value == "..."


@pytest.mark.parametrize(
    ("read", "field"),
    [
        (_otlp_json.integer, "twelve"),
        (_otlp_json.integer, True),
        (_otlp_json.integer, None),
        (_otlp_json.number, "fast"),
        (_otlp_json.number, [1.0]),
    ],
)
def test_a_bad_number_is_malformed(read: Any, field: object) -> None:
    """A number field that is not one raises Malformed (the record is counted, skipped)."""
    with pytest.raises(_otlp_json.Malformed):
        read(field)


def test_numbers_and_enums_as_protobuf_json_writes_them() -> None:
    """NaN and Infinity come as strings; enums as numbers or names; ids as hex strings."""
    assert math.isinf(_otlp_json.number("Infinity"))
    assert _otlp_json.enum("STATUS_CODE_ERROR", {"STATUS_CODE_ERROR": 2}) == 2
    assert _otlp_json.enum(None, {}) == 0
    assert _otlp_json.hex_id({"traceId": "ABCD"}, "traceId") == "abcd"
    with pytest.raises(_otlp_json.Malformed):
        _otlp_json.hex_id({"traceId": 5}, "traceId")
    with pytest.raises(_otlp_json.Malformed):
        _otlp_json.point_value({"timeUnixNano": "1"})


def test_what_the_page_shows_is_bounded() -> None:
    """A long value is cut with an ellipsis; at most MAX_SHOWN_ATTRIBUTES are shown."""
    assert len(_otlp_json.shown_text("x" * 1000)) == _otlp_json.MAX_SHOWN_VALUE
    assert _otlp_json.shown_text([1, "a"]) == '[1, "a"]'
    many = {f"k{i}": i for i in range(100)}
    assert len(_otlp_json.shown_attributes(many)) == _otlp_json.MAX_SHOWN_ATTRIBUTES


def test_exponential_histograms_chart_quantiles(tmp_path: Path) -> None:
    """An exponential histogram (scale 0, values in (4, 8] and (8, 16]) gives quantiles in
    those buckets, and a distribution."""
    point = {
        "startTimeUnixNano": str(T0),
        "timeUnixNano": str(T0 + SECOND),
        "count": "10",
        "scale": 0,
        "zeroCount": "0",
        "positive": {"offset": 2, "bucketCounts": ["5", "5"]},
        "negative": {"offset": 0, "bucketCounts": ["1"]},
    }
    metric = {
        "name": "latency",
        "exponentialHistogram": {"aggregationTemporality": 1, "dataPoints": [point]},
    }
    data = _report(tmp_path, metrics_request([metric]))
    (chart,) = data["metrics"]
    assert chart["kind"] == "histogram"
    (series,) = chart["series"]
    assert 4.0 < series["p50"][0] <= 8.0
    assert 8.0 < series["p99"][0] <= 16.0
    assert sum(chart["distribution"][0]["counts"]) == 11


def test_negative_exponential_buckets_mirror_the_positive_ones() -> None:
    """Negative buckets come first, most negative first, then zero, then positive."""
    bounds, counts = _quantiles.exponential_buckets(0, 2, (0, []), (1, [3, 4]))
    assert bounds == [-8.0, -4.0, -2.0, -5e-324, 0.0, 1.0]
    assert counts == [0, 4, 3, 0, 2, 0, 0]


def test_quantile_edges() -> None:
    """Open ends fall back on the nearest bound; mismatched buckets give NaN."""
    assert _quantiles.quantile(0.5, [], [4]) == 0.0
    assert _quantiles.quantile(0.5, [-10.0, 10.0], [4, 0, 0]) == pytest.approx(-10.0)
    assert _quantiles.quantile(0.99, [10.0], [0, 4]) == 10.0
    assert _quantiles.quantile(0.5, [10.0], [0, 4], low=20.0, high=15.0) == 20.0
    assert math.isnan(_quantiles.quantile(0.5, [1.0, 2.0], [1, 1]))


def test_summaries_chart_their_quantiles(tmp_path: Path) -> None:
    """A summary's 0.5/0.9/0.99 quantile values are its p50/p90/p99 lines."""
    point = {
        "timeUnixNano": str(T0),
        "quantileValues": [
            {"quantile": 0.5, "value": 1.0},
            {"quantile": 0.9, "value": 2.0},
            {"quantile": 0.99, "value": 3.0},
            "not an object",
        ],
    }
    data = _report(tmp_path, metrics_request([{"name": "s", "summary": {"dataPoints": [point]}}]))
    (series,) = data["metrics"][0]["series"]
    assert (series["p50"], series["p90"], series["p99"]) == ([1.0], [2.0], [3.0])


def test_bad_metrics_and_points_are_counted(tmp_path: Path) -> None:
    """A metric without a name or without known data, and a point that is not an object,
    are skipped records; the good point beside them charts."""
    metrics: list[dict[str, Any]] = [
        {"gauge": {"dataPoints": []}},
        {"name": "no.data", "futureKind": {}},
        {"name": "g", "gauge": {"dataPoints": ["nope", {"timeUnixNano": str(T0), "asInt": "3"}]}},
    ]
    data = _report(tmp_path, metrics_request(metrics))
    assert data["counts"]["skippedRecords"] == 3
    assert data["metrics"][0]["series"][0]["value"] == [3.0]


def test_points_out_of_order_are_drawn_in_time_order(tmp_path: Path) -> None:
    """Two files' points of one series, read out of time order, draw in time order."""
    late = {"timeUnixNano": str(T0 + 2 * SECOND), "asDouble": 2.0}
    early = {"timeUnixNano": str(T0 + SECOND), "asDouble": 1.0}
    lines = [
        metrics_request([{"name": "g", "gauge": {"dataPoints": [point]}}])
        for point in (late, early)
    ]
    (series,) = _report(tmp_path, *lines)["metrics"][0]["series"]
    assert series["value"] == [1.0, 2.0]
    assert series["t"] == sorted(series["t"])


def test_past_the_chart_limit_metrics_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metrics beyond MAX_CHARTS get no chart but are listed with their point counts."""
    monkeypatch.setattr(_metric_charts, "MAX_CHARTS", 1)
    point = {"timeUnixNano": str(T0), "asDouble": 1.0}
    metrics = [{"name": name, "gauge": {"dataPoints": [point, point]}} for name in ("a", "b")]
    data = _report(tmp_path, metrics_request(metrics))
    assert [chart["name"] for chart in data["metrics"]] == ["a"]
    assert data["uncharted"] == [{"name": "b", "points": 2}]
    assert data["counts"]["metrics"] == 2


def test_decimation_edges() -> None:
    """Short series are kept whole; a run of missing values keeps one point for its gap."""
    assert _decimate.kept_indices([2.0, 1.0], [1.0, 1.0], 5) == [1, 0]
    values = [math.nan] * 10 + [1.0] * 10
    kept = _decimate.kept_indices([float(i) for i in range(20)], values, 2)
    assert kept == [0, 10]


def test_log_severities_bodies_and_traces(tmp_path: Path) -> None:
    """Severity comes from its text or its number (named or numbered); a record without a
    time is skipped; a long body is cut; the traces of the latest records come first."""
    records: list[dict[str, Any]] = [
        {"timeUnixNano": str(T0), "severityNumber": "SEVERITY_NUMBER_WARN", "body": {}},
        {"timeUnixNano": str(T0), "severityText": "notice", "body": {"stringValue": "y" * 5000}},
        {"observedTimeUnixNano": str(T0), "severityNumber": 99, "traceId": "ab" * 16},
        {"severityNumber": 9},
    ]
    data = _report(tmp_path, logs_request(records))
    assert [row["severity"] for row in data["logs"]] == ["WARN", "notice", "UNSPECIFIED"]
    assert len(data["logs"][1]["message"]) == _log_table.MAX_BODY
    assert data["counts"]["skippedRecords"] == 1
    assert data["logsBySeverity"] == {"WARN": 1, "NOTICE": 1, "UNSPECIFIED": 1}
    table = _log_table.LogTable()
    for trace in ("1" * 32, "2" * 32, "3" * 32):
        table.add(0, {"timeUnixNano": str(T0), "traceId": trace})
    assert table.trace_ids(2) == ["3" * 32, "2" * 32]


def test_out_must_not_be_a_directory(tmp_path: Path) -> None:
    """--out naming a directory is bad input."""
    path = tmp_path / "run.jsonl"
    path.write_text("", encoding="utf-8")
    (tmp_path / "dir").mkdir()
    result = run_lens("view", "run.jsonl", "-o", "dir", cwd=tmp_path)
    assert result.returncode == 2
    assert "is a directory" in result.stderr


def test_decimation_while_reading_keeps_old_spikes_apart(tmp_path: Path) -> None:
    """A 200,000-point series, thinned again and again as it is read, still shows two
    spikes 500 points apart near its start, as it does near its end."""
    spikes = {10_000, 10_500, 190_000, 190_500}
    points = [
        {"timeUnixNano": str(T0 + i * SECOND), "asDouble": 100.0 if i in spikes else 1.0}
        for i in range(200_000)
    ]
    lines = [
        metrics_request([{"name": "g", "gauge": {"dataPoints": points[i : i + 20_000]}}])
        for i in range(0, 200_000, 20_000)
    ]
    (series,) = _report(tmp_path, *lines)["metrics"][0]["series"]
    peaks = [t for t, value in zip(series["t"], series["value"], strict=True) if value == 100.0]
    assert [round((t * 1e6 - T0) / SECOND) for t in peaks] == sorted(spikes)


def _gauge(value: object, **point: object) -> dict[str, Any]:
    return {
        "name": "g",
        "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asDouble": value, **point}]},
    }


def _histogram_point(**point: object) -> dict[str, Any]:
    base: dict[str, Any] = {"timeUnixNano": str(T0), "count": "1", "bucketCounts": ["1"]}
    return {
        "name": "h",
        "histogram": {"aggregationTemporality": 1, "dataPoints": [{**base, **point}]},
    }


HOSTILE_RECORDS = {
    "an infinite gauge value": metrics_request([_gauge("Infinity")]),
    "a value past a float": metrics_request([_gauge(1e400)]),
    "an int past any int64": metrics_request(
        [
            {
                "name": "g",
                "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asInt": "1" + "0" * 400}]},
            }
        ]
    ),
    "a time past 64 bits": metrics_request([_gauge(1.0, timeUnixNano=str(10**22))]),
    "a negative time": metrics_request([_gauge(1.0, timeUnixNano="-5")]),
    "an infinite histogram bound": metrics_request(
        [_histogram_point(bucketCounts=["1", "0"], explicitBounds=["Infinity"])]
    ),
    "a NaN histogram bound": metrics_request(
        [_histogram_point(bucketCounts=["1", "0"], explicitBounds=["NaN"])]
    ),
    "bounds out of order": metrics_request(
        [_histogram_point(bucketCounts=["1", "0", "0"], explicitBounds=[5.0, 1.0])]
    ),
    "a bucket count past a float": metrics_request([_histogram_point(bucketCounts=[str(10**400)])]),
    "an infinite histogram max": metrics_request(
        [_histogram_point(max="Infinity", min="-Infinity")]
    ),
    "too many buckets": metrics_request(
        [_histogram_point(bucketCounts=["0"] * 200_001, explicitBounds=list(range(200_000)))]
    ),
    "an exponential scale out of range": metrics_request(
        [
            {
                "name": "e",
                "exponentialHistogram": {"dataPoints": [{"timeUnixNano": str(T0), "scale": -40}]},
            }
        ]
    ),
    "an exponential offset past a float": metrics_request(
        [
            {
                "name": "e",
                "exponentialHistogram": {
                    "dataPoints": [
                        {
                            "timeUnixNano": str(T0),
                            "positive": {"offset": 5000, "bucketCounts": ["1"]},
                        }
                    ]
                },
            }
        ]
    ),
    "a rate past a float": metrics_request(
        [
            {
                "name": "c",
                "sum": {
                    "isMonotonic": True,
                    "aggregationTemporality": 1,
                    "dataPoints": [
                        {
                            "startTimeUnixNano": str(T0),
                            "timeUnixNano": str(T0 + 1),
                            "asDouble": 1e308,
                        }
                    ],
                },
            }
        ]
    ),
    "a log time past 64 bits": logs_request([{"timeUnixNano": str(10**30)}]),
    "dataPoints as a string": metrics_request([{"name": "g", "gauge": {"dataPoints": "abc"}}]),
}


# What becomes of each hostile record: counted and skipped, drawn as a gap (a value JSON
# cannot carry), drawn (what cannot be used is ignored), or nothing to read at all.
DRAWN_AS = {
    "an infinite gauge value": "gap",
    "a value past a float": "gap",
    "a rate past a float": "gap",
    "an infinite histogram max": "drawn",
    "dataPoints as a string": "nothing",
}


@pytest.mark.parametrize("case", list(HOSTILE_RECORDS))
def test_a_hostile_record_never_stops_the_page(tmp_path: Path, case: str) -> None:
    """Values and times past what a float, an int64 or a browser's Date hold, bad bounds,
    too many buckets: the record is skipped or drawn as a gap, and the page renders."""
    path = tmp_path / "run.jsonl"
    path.write_text(HOSTILE_RECORDS[case] + "\n", encoding="utf-8")
    page = render_page(build_report([path]), "hostile")
    data = json.loads(page.split('id="lens-report-data">', 1)[1].split("</script>", 1)[0])
    values = [
        value
        for chart in data["metrics"]
        for series in chart["series"]
        for column in ("value", "rate", "p50")
        for value in series.get(column, [])
    ]
    outcome = {
        (1, False, False): "skipped",
        (0, True, False): "gap",
        (0, False, True): "drawn",
        (0, False, False): "nothing",
    }.get(
        (
            data["counts"]["skippedRecords"],
            None in values,
            any(value is not None for value in values),
        )
    )
    assert outcome == DRAWN_AS.get(case, "skipped")


def test_a_resource_attribute_of_a_wrong_type_is_shown_as_text(tmp_path: Path) -> None:
    """A resource's intValue that is not an int does not stop its records."""
    request = json.loads(metrics_request([_gauge(1.0)]))
    request["resourceMetrics"][0]["resource"]["attributes"].append(
        {"key": "odd", "value": {"intValue": [1]}}
    )
    data = _report(tmp_path, json.dumps(request))
    assert data["counts"]["points"] == 1
    assert data["counts"]["skippedRecords"] == 0


def test_a_batch_written_twice_is_one_trace_on_the_timeline(tmp_path: Path) -> None:
    """The same spans twice (a file given twice): the timeline lists the trace once."""
    batch = spans_request([span("root", "a" * 32, "1" * 16)])
    data = _report(tmp_path, batch, batch)
    assert [trace["traceId"] for trace in data["traces"]] == ["a" * 32]


def test_a_status_message_is_redacted(tmp_path: Path) -> None:
    """A span's status message passes the redaction rule before the page shows it."""
    record = span("root", "a" * 32, "1" * 16, error=True)
    record["status"]["message"] = "connect failed password=hunter2 via https://u:pw@db"
    page = render_page(build_report([_write_one(tmp_path, spans_request([record]))]), "t")
    assert "hunter2" not in page
    assert ":pw@" not in page


def _write_one(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    return path


def test_a_file_name_that_is_not_utf8_still_gets_a_report(tmp_path: Path) -> None:
    """A file name with bytes that are not UTF-8 reaches the title without stopping it."""
    name = os.fsdecode(b"r\xff.jsonl")
    (tmp_path / name).write_text(metrics_request([_gauge(1.0)]) + "\n", encoding="utf-8")
    result = run_lens("view", name, "-o", "out.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.html").stat().st_size > 0


def test_a_chart_remembers_a_bounded_number_of_attribute_texts() -> None:
    """One series written a thousand ways (an ignored field that differs) over ten
    sources: one series, its points all read, and at most _MAX_KNOWN texts remembered."""
    charts = _metric_charts.MetricCharts()
    for source in range(10):
        for way in range(100):
            written = [{"key": "shard", "value": {"stringValue": "a"}, "ignored": way}]
            point = {"timeUnixNano": str(T0 + way), "asDouble": 1.0, "attributes": written}
            charts.add(source, {"name": "g", "gauge": {"dataPoints": [point]}})
    chart = charts.charts[("g", "gauge")]
    assert chart.points == 1000
    assert len(chart.series) == 10  # one per source
    remembered = sum(len(texts) for texts in chart.known.values())
    assert remembered == chart.known_texts == _metric_charts._MAX_KNOWN
