"""The logs part of the report: severity, time and message of the latest records.

Every record is counted by severity; the last `MAX_LOGS` are kept to show, each with its
trace and span ids so the page can link it to its span. Bodies go through lens's text
redaction rule and are cut to `MAX_BODY` characters.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from typing import Any, Final

from nemo.lens._redaction import redact_url_credentials
from nemo.lens._view._otlp_json import (
    Malformed,
    any_value,
    decode_attributes,
    enum,
    hex_id,
    nanos,
    shown_attributes,
)

#: Records shown: the last ones read.
MAX_LOGS: Final = 1000
MAX_BODY: Final = 2000
_MAX_SEVERITIES: Final = 20
# OpenTelemetry's severity numbers come in fours: 1-4 TRACE ... 21-24 FATAL.
_SEVERITY_NAMES: Final = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
_SEVERITY_NUMBERS: Final = {
    f"SEVERITY_NUMBER_{name}{suffix}": 1 + 4 * index + step
    for index, name in enumerate(_SEVERITY_NAMES)
    for step, suffix in enumerate(("", "2", "3", "4"))
}


def severity_name(number: int) -> str:
    """The severity's short name ("INFO") for its number; "UNSPECIFIED" for 0 or out of range."""
    if 1 <= number <= 24:
        return _SEVERITY_NAMES[(number - 1) // 4]
    return "UNSPECIFIED"


class LogTable:
    """Every log record of the files, fed one at a time."""

    def __init__(self) -> None:
        self.logs = 0
        self.by_severity: Counter[str] = Counter()
        self.kept: deque[dict[str, Any]] = deque(maxlen=MAX_LOGS)
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def add(self, source: int, record: dict[str, Any]) -> None:
        # A record without its own time (0) is placed at the time it was observed.
        time_ns = nanos(record, "timeUnixNano") if "timeUnixNano" in record else 0
        if time_ns == 0 and "observedTimeUnixNano" in record:
            time_ns = nanos(record, "observedTimeUnixNano")
        if time_ns == 0:
            raise Malformed("a log record without a time")
        number = enum(record.get("severityNumber"), _SEVERITY_NUMBERS)
        text = record.get("severityText")
        severity = text if isinstance(text, str) and text else severity_name(number)
        body = any_value(record.get("body"))
        message = body if isinstance(body, str) else json.dumps(body, default=str)
        if len(message) > MAX_BODY:
            message = message[: MAX_BODY - 1] + "\u2026"
        self.logs += 1
        # Counted by OpenTelemetry's names; a text of the file's own only while few differ.
        counted = severity_name(number) if number else severity.upper()
        if counted not in self.by_severity and len(self.by_severity) >= _MAX_SEVERITIES:
            counted = "OTHER"
        self.by_severity[counted] += 1
        self.first_ns = time_ns if self.first_ns is None else min(self.first_ns, time_ns)
        self.last_ns = time_ns if self.last_ns is None else max(self.last_ns, time_ns)
        self.kept.append(
            {
                "timeMs": time_ns / 1e6,
                "severity": severity[:20],
                "severityNumber": number,
                "message": redact_url_credentials(message),
                "traceId": hex_id(record, "traceId"),
                "spanId": hex_id(record, "spanId"),
                "source": source,
                "attributes": shown_attributes(decode_attributes(record.get("attributes"))),
            }
        )

    def trace_ids(self, limit: int) -> list[str]:
        """The traces of the latest kept records, newest first, at most `limit`."""
        found: list[str] = []
        for row in reversed(self.kept):
            trace_id = row["traceId"]
            if trace_id and trace_id.strip("0") and trace_id not in found:
                found.append(trace_id)
                if len(found) >= limit:
                    break
        return found

    def drawn(self, source_labels: list[str]) -> list[dict[str, Any]]:
        """The kept records, oldest first, with their sources named."""
        return [{**row, "source": source_labels[row["source"]]} for row in self.kept]
