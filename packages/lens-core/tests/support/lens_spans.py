"""Span-side test support that `nemo.lens.testing` does not offer."""

from __future__ import annotations

from typing import Any

from nemo.lens.testing import InMemorySpans


def one(spans: InMemorySpans, name: str) -> Any:
    """The single finished span called `name` (fails the test if there are none or several)."""
    (span,) = [span for span in spans.finished() if span.name == name]
    return span
