"""Write the declared metric groups as an OpenTelemetry Weaver semantic-convention registry.

Each `MetricSpec` becomes one `type: metric` group, so `weaver registry check` can lint
the series a framework declares and `weaver registry generate` can document them. The
YAML is written by hand (lens has no YAML dependency at run time); every string is a
double-quoted, ASCII-only scalar, which reads back unchanged whatever it contains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from nemo.lens.instruments import MetricSpec

__all__ = ["INSTRUMENT_BY_KIND", "STABILITY", "render_weaver_registry", "yaml_quote"]

#: lens kind -> Weaver `instrument` (the synchronous instrument names of the semconv syntax).
INSTRUMENT_BY_KIND: Final[dict[str, str]] = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "up_down_counter": "updowncounter",
}
#: A consumer's own series have made no stability promise.
STABILITY: Final = "development"

# YAML's short escapes for the characters that have one.
_SHORT_ESCAPES: Final[dict[str, str]] = {
    "\\": "\\\\",
    '"': '\\"',
    "\0": "\\0",
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\e",
}


def yaml_quote(text: str) -> str:
    """Return `text` as a YAML double-quoted scalar that uses printable ASCII only.

    Anything outside printable ASCII is escaped (`\\xXX`, `\\uXXXX` or `\\UXXXXXXXX`), so
    no character can end the scalar early or fall outside YAML's printable set.
    """
    parts = ['"']
    for char in text:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            parts.append(char)
        elif code <= 0xFF:
            parts.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)


def render_weaver_registry(groups: Mapping[str, Sequence[MetricSpec]]) -> str:
    """Return the registry YAML for `groups` (group name -> its specs, in order).

    Each entry carries the Weaver fields (`id`, `type`, `metric_name`, `instrument`,
    `unit`, `brief`, `stability`) and an `annotations.lens` map with the lens group and key,
    so the lens declaration can be rebuilt from the file.
    """
    lines = [
        "# OpenTelemetry Weaver semantic-convention registry, written by `lens metrics`.",
        "# One `type: metric` group per declared series; annotations.lens names its lens",
        "# metric group and the key passed to record_metrics.",
    ]
    entries: list[str] = []
    for group, specs in groups.items():
        for spec in specs:
            entries += [
                f"  - id: {yaml_quote('metric.' + spec.name)}",
                "    type: metric",
                f"    metric_name: {yaml_quote(spec.name)}",
                f"    instrument: {INSTRUMENT_BY_KIND[spec.kind]}",
                f"    unit: {yaml_quote(spec.unit)}",
                f"    brief: {yaml_quote(spec.description)}",
                f"    stability: {STABILITY}",
                "    annotations:",
                "      lens:",
                f"        group: {yaml_quote(group)}",
                f"        key: {yaml_quote(spec.key)}",
            ]
    if entries:
        lines.append("groups:")
        lines += entries
    else:
        lines.append("groups: []")
    return "\n".join(lines) + "\n"
