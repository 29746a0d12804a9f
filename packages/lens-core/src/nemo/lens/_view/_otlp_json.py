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
import marshal
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

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


@dataclass
class SpanLines:
    """Where each file's lines that may hold spans start (byte offsets, in order, by the
    file's place in the list: one may be given twice), noted while the files are read so
    that a second pass reads those lines alone; past `MAX_NOTED` lines in all, nothing
    more is noted and that pass reads every line again."""

    offsets: dict[int, array[int]] = field(default_factory=dict)
    noted: int = 0
    complete: bool = True

    def note(self, place: int, offset: int) -> None:
        if self.noted >= MAX_NOTED:
            self.complete = False
            self.offsets.clear()  # never read now: the second pass reads every line
            return
        self.noted += 1
        self.offsets.setdefault(place, array("q")).append(offset)


#: Lines whose offsets are noted at most (8 bytes each).
MAX_NOTED: Final = 1 << 20
#: What a line that holds spans holds, byte for byte (unless it escapes the key).
SPANS_KEY: Final = b'"resourceSpans"'


def read_requests(
    paths: Iterable[Path], counts: ReadCounts, *, span_lines: SpanLines | None = None
) -> Iterator[tuple[str, list[Any]]]:
    """Yield (signal key, its list of resource entries) for each request in `paths`,
    noting in `span_lines` where the lines are that hold requests and `SPANS_KEY`."""
    for place, path in enumerate(paths):
        with path.open("rb") as lines:
            offset = 0
            for number, raw in enumerate(lines, start=1):
                requests = _requests(raw, path, number, counts)
                if requests and span_lines is not None and SPANS_KEY in raw:
                    span_lines.note(place, offset)
                yield from requests
                offset += len(raw)


def reread_requests(
    paths: Iterable[Path], span_lines: SpanLines, wanted: Callable[[bytes], bool]
) -> Iterator[tuple[str, list[Any]]]:
    """Yield the requests of the lines `span_lines` noted (of every line, where it could
    not note them all) that `wanted` accepts; what is skipped is not counted again."""
    counts = ReadCounts()
    for place, path in enumerate(paths):
        with path.open("rb") as lines:
            found: Iterable[bytes] = lines
            # A pipe (`<(zcat run.jsonl.gz)`) cannot seek: read on, as every line is read
            # where nothing was noted (its second read finds nothing left).
            if span_lines.complete and lines.seekable():
                at = span_lines.offsets.get(place, array("q"))
                found = (_line_at(lines, offset) for offset in at)
            for raw in found:
                if wanted(raw):
                    yield from _requests(raw, path, 0, counts)


def _line_at(lines: BinaryIO, offset: int) -> bytes:
    lines.seek(offset)
    return lines.readline()


def _requests(raw: bytes, path: Path, number: int, counts: ReadCounts) -> list[tuple[str, Any]]:
    """The requests of one line (one, unless it holds several signals); a line that holds
    none is counted as skipped."""
    if not raw.strip():
        return []
    counts.lines += 1
    try:
        request = json.loads(raw)
    except RecursionError:
        counts.skip_line(path, number, "nested too deeply")
        return []
    except ValueError as exc:  # also UnicodeDecodeError: not UTF-8
        counts.skip_line(path, number, f"not JSON ({type(exc).__name__})")
        return []
    found = []
    if isinstance(request, dict):
        for signal in SIGNALS:
            entries = request.get(signal)
            if isinstance(entries, list):
                found.append((signal, entries))
    if not found:
        counts.skip_line(path, number, "not an OTLP export request")
    return found


def record_lists(signal: str, entries: list[Any]) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    """Yield (resource attributes as written, records) for every scope of one request's
    entries that holds records; entries, scopes and records that are not objects are
    passed over."""
    scopes_key, records_key = SIGNALS[signal]
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        resource = entry.get("resource")
        attributes = resource.get("attributes") if isinstance(resource, dict) else None
        for scope in _list(entry.get(scopes_key)):
            if isinstance(scope, dict):
                found = [
                    record for record in _list(scope.get(records_key)) if isinstance(record, dict)
                ]
                if found:
                    yield attributes, found


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


def written_key(value: Any) -> bytes | None:
    """A JSON value as it was written, as bytes, one way for each value, type for type
    (True is not 1, -0.0 not 0.0): marshal's format 2, which has no back-references, is
    such a key, and cheap; None for a value nested past what marshal walks."""
    try:
        return marshal.dumps(value, 2)
    except ValueError:
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
    # Nearly every field is a str or an int: the type checks only see the others.
    plain = type(value) is str or type(value) is int
    if not plain and (isinstance(value, bool) or not isinstance(value, (int, str, float))):
        raise Malformed(f"expected an integer, got {type(value).__name__}")
    try:
        return int(value)
    except (ValueError, OverflowError) as exc:  # OverflowError: int(float("inf"))
        raise Malformed(f"expected an integer, got {value!r:.40}") from exc


def number(value: Any) -> float:
    """A double field: a JSON number, or "NaN"/"Infinity" as protobuf's JSON writes them."""
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Malformed(f"expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except (ValueError, OverflowError) as exc:
        raise Malformed(f"expected a number, got {value!r:.40}") from exc


def point_value(point: dict[str, Any]) -> float:
    """A number data point's value (`asDouble` or `asInt`)."""
    value = point.get("asDouble")
    if type(value) is float:  # most points: no more checks
        return value
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
    value = record.get(key)
    if value is None and key not in record:
        raise Malformed(f"no {key}")
    found = integer(value)
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
# How many resources' written attributes are remembered, each of up to this many characters.
_MAX_SOURCE_TEXTS: Final = 1024
_MAX_SOURCE_TEXT: Final = 65_536


@dataclass
class Sources:
    """The resources seen (one per process, usually), numbered in order of appearance."""

    by_key: dict[tuple[tuple[str, str], ...], int] = field(default_factory=dict)
    rows: list[dict[str, str]] = field(default_factory=list)
    #: A resource's attributes as written (`written_key`) -> its source: every request of
    #: a process writes them alike.
    by_text: dict[bytes | None, int] = field(default_factory=dict)

    def id_of_written(self, items: Any) -> int:
        """The source of a resource's KeyValue list, as written."""
        text = written_key(items)
        found = self.by_text.get(text)
        if found is None:
            found = self.id_of(decode_attributes(items))
            room = len(self.by_text) < _MAX_SOURCE_TEXTS
            if text is not None and room and len(text) <= _MAX_SOURCE_TEXT:
                self.by_text[text] = found
        return found

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
