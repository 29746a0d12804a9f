"""Test ids that are the same in every collection.

pytest-xdist has each worker collect the tests and refuses to run when two workers see
different ids, so an id must never carry a memory address (`<object object at 0x...>`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_id(value: object) -> str:
    """`type:repr` of `value` (cut to 40 characters), with any memory address left out."""
    return _ADDRESS.sub("", f"{type(value).__name__}:{value!r}")[:40]


def refuse_unstable_ids(items: Iterable[pytest.Item]) -> None:
    """Stop the run when a collected test id carries a memory address."""
    unstable = [item.nodeid for item in items if _ADDRESS.search(item.nodeid)]
    if unstable:
        raise pytest.UsageError(
            "test ids must be the same in every collection (pytest-xdist compares them); "
            f"use lens_ids.stable_id for these: {', '.join(unstable)}"
        )
