"""Warn-once memory: each distinct problem is logged once per owner, up to a cap.

A recording path runs every step, so a problem that is logged every time it happens would
flood a job's log. Every owner (a metric group, the span helpers, propagation, a shim)
keeps one `WarnOnce`: the first occurrence of a key is logged, later ones are not, and past
`cap` distinct keys one last line says the rest are muted. `clear_all()` forgets every
owner's memory (`nemo.lens.testing.reset_all()` calls it), so a warning can be seen again.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Hashable
from typing import Final

#: Distinct warnings remembered per owner; past it, one line says the rest are muted.
DEFAULT_CAP: Final = 100


class WarnOnce:
    """The warning memory of one owner.

    Args:
        logger: Where the warnings go.
        owner: How the cap's last line names the owner, e.g. "record_metrics: group 'rl'".
        cap: How many distinct keys are remembered (and logged).
    """

    __slots__ = ("__weakref__", "_cap", "_capped", "_logger", "_seen", "owner")

    def __init__(self, logger: logging.Logger, owner: str, cap: int = DEFAULT_CAP) -> None:
        self._logger = logger
        self.owner = owner
        self._cap = cap
        self._seen: dict[Hashable, object] = {}
        self._capped = False
        _every_memory.add(self)

    def first(self, key: Hashable) -> bool:
        """True the first time `key` is seen (and while under the cap), else False.

        Safe across threads without a lock: exactly one caller wins a new key. The cap's
        last line is logged here; a caller holding a lock uses `claim` instead.
        """
        due, cap_reached = self.claim(key)
        if cap_reached:
            self.log_cap()
        return due

    def claim(self, key: Hashable) -> tuple[bool, bool]:
        """Decide without logging: (is `key` new and under the cap, did this call reach
        the cap). For a caller holding a lock, which logs the warning, and `log_cap()`
        when the cap was reached, only after releasing it: a logging handler may call
        back into lens and take that lock."""
        seen = self._seen
        if key in seen:
            return False, False
        if len(seen) >= self._cap:
            if self._capped:
                return False, False
            self._capped = True
            return False, True
        token = object()
        # setdefault is atomic under the GIL: only the first thread gets its own token back.
        return seen.setdefault(key, token) is token, False

    def log_cap(self) -> None:
        """Log the cap's last line (once `claim` said the cap was reached)."""
        self._logger.warning(
            "%s reached %d distinct warnings; further warnings are suppressed",
            self.owner,
            self._cap,
        )

    def warn(self, key: Hashable, message: str, *args: object) -> None:
        """Log `message % args` at WARNING the first time `key` is seen."""
        if self.first(key):
            self._logger.warning(message, *args)

    def failure(self, where: str, exc: BaseException, consequence: str) -> None:
        """Log that `where` failed with `exc`, once per (`where`, exception type); never raises.

        The line reads "<where> failed (<Type>: <message>); <consequence>. Further <Type>
        errors here are not logged."; an exception whose `str()` fails is still named.

        Args:
            where: The step that failed, e.g. "inject_context" or "managed_span: ending
                the span".
            exc: What it raised.
            consequence: What lens does instead, e.g. "the carrier is ignored".
        """
        kind = type(exc).__name__
        if self.first((where, kind)):
            self._logger.warning(
                "%s failed (%s); %s. Further %s errors here are not logged.",
                where,
                describe(exc),
                consequence,
                kind,
            )

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        """Forget every key, so each warning is logged again."""
        self._seen.clear()
        self._capped = False


def describe(exc: BaseException) -> str:
    """`TypeName: message` for a log line; an exception whose `str()` fails is still named."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return f"{type(exc).__name__} (its message cannot be shown)"


# Weak, so a memory owned by a dropped metric group goes with it.
_every_memory: weakref.WeakSet[WarnOnce] = weakref.WeakSet()


def clear_all() -> None:
    """Forget the keys of every `WarnOnce` in the process."""
    for memory in list(_every_memory):
        memory.clear()
