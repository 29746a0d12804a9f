"""Reading OTLP/JSON lines, as lens's console exporter and the Collector's file exporter
write them: one export request per line, `{"resourceMetrics": [...]}`,
`{"resourceSpans": [...]}` or `{"resourceLogs": [...]}`, in protobuf's JSON mapping
(64-bit integers as strings or numbers, ids as hex, enums as numbers or names).

Files are read one line at a time, so memory follows the longest line, not the file. A
line that is not such a request (not JSON, truncated, not an object, no signal in it) is
counted in `ReadCounts.skipped_lines`; a record of a good line that lacks what the report
needs (a point without a time, a span without ids) in `skipped_records`. Fields the report
does not know are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nemo.lens import semconv
from nemo.lens._redaction import redact_url_credentials, redact_value

#: Each signal's request key -> (its scope list's key, its record list's key).
SIGNALS: Final = {
    "resourceMetrics": ("scopeMetrics", "metrics"),
    "resourceSpans": ("scopeSpans", "spans"),
    "resourceLogs": ("scopeLogs", "logRecords"),
}
# AnyValue nests arrays and key-value lists; deeper than this a value is shown as "...".
_MAX_DEPTH: Final = 8
# What the report shows of one attribute: its value cut to this many characters, and at
# most this many attributes of one record.
MAX_SHOWN_VALUE: Final = 200
MAX_SHOWN_ATTRIBUTES: Final = 32


class Malformed(ValueError):
    """A record lacks a field the report needs, or holds one of the wrong type."""


@dataclass
class ReadCounts:
    """What reading found: lines read, and what was skipped as malformed."""

    lines: int = 0
    skipped_lines: int = 0
    skipped_records: int = 0
    #: The first few reasons a line was skipped, `path:line: reason`, for the report.
    examples: list[str] = field(default_factory=list)

    def skip_line(self, path: Path, number: int, reason: str) -> None:
        self.skipped_lines += 1
        if len(self.examples) < 5:
            self.examples.append(f"{path.name}:{number}: {reason}")


def read_requests(
    paths: Iterable[Path], counts: ReadCounts, *, containing: bytes | None = None
) -> Iterator[tuple[str, list[Any]]]:
    """Yield (signal key, its list of resource entries) for each request in `paths`.

    With `containing`, only lines holding those bytes are parsed (a second pass that
    wants spans alone); the others are passed over, uncounted.
    """
    for path in paths:
        with path.open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                if containing is not None and containing not in raw:
                    continue
                if not raw.strip():
                    continue
                counts.lines += 1
                try:
                    request = json.loads(raw)
                except RecursionError:
                    counts.skip_line(path, number, "nested too deeply")
                    continue
                except ValueError as exc:  # also UnicodeDecodeError: not UTF-8
                    counts.skip_line(path, number, f"not JSON ({type(exc).__name__})")
                    continue
                found = False
                if isinstance(request, dict):
                    for signal in SIGNALS:
                        entries = request.get(signal)
                        if isinstance(entries, list):
                            found = True
                            yield signal, entries
                if not found:
                    counts.skip_line(path, number, "not an OTLP export request")


def records(signal: str, entries: list[Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Yield (resource attributes, record) for every record of one request's entries;
    entries and scopes that are not objects are passed over."""
    scopes_key, records_key = SIGNALS[signal]
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        resource = entry.get("resource")
        attributes = (
            decode_attributes(resource.get("attributes")) if isinstance(resource, dict) else {}
        )
        for scope in _list(entry.get(scopes_key)):
            if isinstance(scope, dict):
                for record in _list(scope.get(records_key)):
                    if isinstance(record, dict):
                        yield attributes, record


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- values -------------------------------------------------------------------------------


def any_value(value: Any, depth: int = 0) -> Any:
    """The Python value of an OTLP AnyValue object (None when it holds none)."""
    if not isinstance(value, dict):
        return None
    if depth >= _MAX_DEPTH:
        return "..."
    for key, held in value.items():
        if key == "stringValue":
            return held if isinstance(held, str) else str(held)
        if key in ("intValue", "doubleValue"):
            try:
                return integer(held) if key == "intValue" else number(held)
            except Malformed:
                return shown_text(held)  # an attribute is only shown: show what is there
        if key == "boolValue":
            return bool(held)
        if key == "bytesValue":
            return str(held)
        if key == "arrayValue" and isinstance(held, dict):
            return [any_value(item, depth + 1) for item in _list(held.get("values"))]
        if key == "kvlistValue" and isinstance(held, dict):
            return decode_attributes(held.get("values"), depth + 1)
    return None


def decode_attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    """A KeyValue list as a dict; items without a string key are left out."""
    decoded: dict[str, Any] = {}
    for item in _list(items):
        if isinstance(item, dict) and isinstance(key := item.get("key"), str):
            decoded[key] = any_value(item.get("value"), depth)
    return decoded


def integer(value: Any) -> int:
    """An int64 field: a JSON number or a decimal string."""
    if isinstance(value, bool) or not isinstance(value, (int, str, float)):
        raise Malformed(f"expected an integer, got {type(value).__name__}")
    try:
        return int(value)
    except (ValueError, OverflowError) as exc:  # OverflowError: int(float("inf"))
        raise Malformed(f"expected an integer, got {value!r:.40}") from exc


def number(value: Any) -> float:
    """A double field: a JSON number, or "NaN"/"Infinity" as protobuf's JSON writes them."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Malformed(f"expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except (ValueError, OverflowError) as exc:
        raise Malformed(f"expected a number, got {value!r:.40}") from exc


def point_value(point: dict[str, Any]) -> float:
    """A number data point's value (`asDouble` or `asInt`)."""
    if "asDouble" in point:
        return number(point["asDouble"])
    if "asInt" in point:
        return float(integer(point["asInt"]))
    raise Malformed("a number point without asDouble or asInt")


def enum(value: Any, names: dict[str, int]) -> int:
    """An enum field: its number, or its name (`"STATUS_CODE_ERROR"`); 0 when absent."""
    if value is None:
        return 0
    if isinstance(value, str) and value in names:
        return names[value]
    return integer(value)


#: OTLP's times are unsigned 64-bit nanoseconds (up to the year 2554).
_MAX_NANOS: Final = 2**64


def nanos(record: dict[str, Any], key: str) -> int:
    """A required `...UnixNano` field, in nanoseconds since the epoch."""
    if key not in record:
        raise Malformed(f"no {key}")
    found = integer(record[key])
    if not 0 <= found < _MAX_NANOS:
        raise Malformed(f"{key} {found} is not a 64-bit time")
    return found


def hex_id(record: dict[str, Any], key: str) -> str:
    """An id field as lower-case hex ("" when absent)."""
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"{key} is not a string")
    return value.lower()


# --- what the page shows ----------------------------------------------------------------


def shown_text(value: Any) -> str:
    """A value as the page shows it: text, cut to `MAX_SHOWN_VALUE` characters."""
    if isinstance(value, str):
        text = value
    elif type(value) in (int, float):
        text = repr(value)  # the common case, without json.dumps's cost
    else:
        text = json.dumps(value, default=str)
    if len(text) > MAX_SHOWN_VALUE:
        return text[: MAX_SHOWN_VALUE - 1] + "\u2026"
    return text


def shown_attributes(attributes: dict[str, Any]) -> dict[str, str]:
    """Attributes as the page shows them: the first `MAX_SHOWN_ATTRIBUTES`, each value as
    short text, with lens's redaction rule applied (a report is one more channel a secret
    must not leave by)."""
    shown: dict[str, str] = {}
    for key, value in attributes.items():
        if len(shown) >= MAX_SHOWN_ATTRIBUTES:
            break
        shown[key] = redact_value(key, redact_url_credentials(shown_text(value)))
    return shown


#: The resource keys a source is told apart by, and how the header names them.
RANK_KEYS: Final = (semconv.DL_RANK, semconv.NV_DL_RANK)


@dataclass
class Sources:
    """The resources seen (one per process, usually), numbered in order of appearance."""

    by_key: dict[tuple[tuple[str, str], ...], int] = field(default_factory=dict)
    rows: list[dict[str, str]] = field(default_factory=list)

    def id_of(self, attributes: dict[str, Any]) -> int:
        key = tuple(sorted((name, shown_text(value)) for name, value in attributes.items()))
        found = self.by_key.get(key)
        if found is None:
            found = self.by_key[key] = len(self.rows)
            rank = next((attributes[k] for k in RANK_KEYS if k in attributes), None)
            self.rows.append(
                {
                    "service": shown_text(attributes.get(semconv.SERVICE_NAME, "unknown service")),
                    "rank": "" if rank is None else shown_text(rank),
                    "host": shown_text(attributes.get(semconv.HOST_NAME, "")),
                    "pid": shown_text(attributes.get(semconv.PROCESS_PID, "")),
                }
            )
        return found

    def labels(self) -> list[str]:
        """A short name per source: its service, its rank where there is one, and its
        pid where service and rank alone would name two sources alike."""
        base = [
            f"{row['service']} rank {row['rank']}" if row["rank"] else row["service"]
            for row in self.rows
        ]
        return [
            f"{name} pid {row['pid']}" if base.count(name) > 1 and row["pid"] else name
            for name, row in zip(base, self.rows, strict=True)
        ]
