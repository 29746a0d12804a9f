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
from collections.abc import Callable, Iterator
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


def page_parts(report: Report, title: str) -> Iterator[str]:
    """The page as consecutive pieces of text: the template's, and what fills each of its
    placeholders (never searched again), so a large page is never held whole twice."""
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

    fillers: dict[str, Callable[[], str]] = {
        "VERSION": lambda: html.escape(__version__),
        "TITLE": lambda: html.escape(title),
        "CSS": lambda: _asset("report.css"),
        "DATA": lambda: _embedded_json(report.data),
        "PLOTLY": get_plotlyjs,
        "SCRIPT": lambda: _asset("report.js"),
    }
    template = _asset("report.html")
    done = 0
    for match in _PLACEHOLDER.finditer(template):
        yield template[done : match.start()]
        yield fillers[match[1]]()
        done = match.end()
    yield template[done:]


def render_page(report: Report, title: str) -> str:
    """The whole page as text."""
    return "".join(page_parts(report, title))


def write_page(report: Report, title: str, out: Path) -> int:
    """Write the page to `out` whole or not at all (a full disk leaves no half page);
    returns its size in bytes."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    size = 0
    try:
        with os.fdopen(descriptor, "wb") as file:
            for part in page_parts(report, title):
                # A file name that is not UTF-8 (surrogate escapes) must not stop the page.
                encoded = part.encode("utf-8", "replace")
                file.write(encoded)
                size += len(encoded)
            os.fchmod(file.fileno(), 0o644)  # mkstemp's 0600 would keep the report private
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return size
