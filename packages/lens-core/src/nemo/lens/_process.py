"""Process ownership: was this object built in this process?

A forked child inherits every object its parent built (providers, exporters, the
Prometheus endpoint, shutdown workers) but none of their threads, and must neither use
them nor tear them down. Whatever lens builds that belongs to its process records a
`BuiltHere` when it is built and asks `here()` before it acts.
"""

from __future__ import annotations

import os


class BuiltHere:
    """The process an object was built in."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    def here(self) -> bool:
        """True in the process that built the object; False in a forked child."""
        return os.getpid() == self.pid

    def __repr__(self) -> str:
        return f"BuiltHere(pid={self.pid})"
