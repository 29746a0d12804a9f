"""Values compared as exported: the type with the value, and a float's bits."""

from __future__ import annotations

import struct


def exact(value: object) -> tuple[str, object]:
    """A value with its type and, for floats, its bits (-0.0 and 0.0 differ)."""
    if type(value) is float:
        return ("float", struct.pack("<d", value))
    return (type(value).__name__, value)
