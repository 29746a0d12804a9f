"""The report as one HTML file that opens offline: Plotly's script, the page's script and
style, and the data, all inline; nothing is fetched.

Plotly (the `lens-core[view]` extra) is imported here and nowhere else in lens.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from importlib import resources
from pathlib import Path
from typing import Final

from nemo.lens._view._report import Report
from nemo.lens.version import __version__

_PLACEHOLDER: Final = re.compile(r"__LENS_([A-Z]+)__")


def _asset(name: str) -> str:
    return resources.files("nemo.lens._view").joinpath(name).read_text(encoding="utf-8")


def _embedded_json(data: object) -> str:
    # Inside <script type="application/json">, "</script>" (or "<!--") in a value must not
    # end the element: every "<" is written as its JSON escape.
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def render_page(report: Report, title: str) -> str:
    """The whole page as text."""
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

    parts = {
        "VERSION": html.escape(__version__),
        "TITLE": html.escape(title),
        "CSS": _asset("report.css"),
        "DATA": _embedded_json(report.data),
        "PLOTLY": get_plotlyjs(),
        "SCRIPT": _asset("report.js"),
    }
    # One pass over the template: text substituted in is never searched again.
    return _PLACEHOLDER.sub(lambda match: parts[match[1]], _asset("report.html"))


def write_page(report: Report, title: str, out: Path) -> int:
    """Write the page to `out` whole or not at all (a full disk leaves no half page);
    returns its size in bytes."""
    encoded = render_page(report, title).encode("utf-8")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(encoded)
            os.fchmod(file.fileno(), 0o644)  # mkstemp's 0600 would keep the report private
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(encoded)
