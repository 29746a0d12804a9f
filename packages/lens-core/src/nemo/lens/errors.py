"""The exceptions lens raises at declaration and setup time.

Recording paths never raise; these reach the caller only from calls that declare or
configure something, where a clear, early error is what the caller wants.
"""

from __future__ import annotations

__all__ = ["LensError", "LensTypeError", "LensValueError"]


class LensError(Exception):
    """Base class of every exception lens raises on purpose."""


class LensValueError(LensError, ValueError):
    """A declaration or setting holds a value lens does not accept."""


class LensTypeError(LensError, TypeError):
    """A declaration or setting holds an object of the wrong type."""
