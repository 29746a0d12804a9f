"""Everything lens does around `os.fork()`, in one table with an explicit order.

A thread holding a lock at the moment another thread forks leaves the child with a copy
that is locked for good, since the holder does not exist there. So every lock lens holds
across calls is acquired before the fork, released in the parent and replaced in the
child (as CPython's `logging` does for its own lock). Other hooks only run in the child:
they forget what belongs to the parent (its open spans, its instruments, its socket).

This is the only module that calls `os.register_at_fork`. Before a fork the hooks run in
`FORK_ORDER`, which is therefore the order the locks are acquired in: a lock that code
takes while holding another must come after it. After the fork they run in reverse.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from nemo.lens.errors import LensValueError

_logger = logging.getLogger(__name__)

#: Every hook lens registers, in the order they run before a fork.
FORK_ORDER: Final = (
    # A collection callback may record metrics (taking the registry lock), so the gate
    # that metric collections run under is taken before every other lock.
    "metric collection gate",
    # `state` resolves the span-group spec against `SpanRegistry` while holding its lock.
    "span state lock",
    "span registry lock",
    "metric registry lock",
    "export strategy lock",
    # Attribute reads only: which providers the child must not record through.
    "inherited meters",
    # Makes the shared region the child records into (no lock before the fork); starts
    # the parent's span drain after it.
    "forked children",
    # Child-only hooks: nothing here takes a lock.
    "setup guard",
    "inherited instruments",
    "coalescing buffers",
    "open spans",
    "span queue gates",
    "prometheus endpoint",
    "span ids",
)

Action = Callable[[], None]


class _Hook(NamedTuple):  # not a dataclass: building one costs an import of setup ~1 ms
    before: Action | None
    after_in_parent: Action | None
    after_in_child: Action | None


class ForkHooks:
    """An ordered table of fork hooks; `install()` registers it with `os.register_at_fork`.

    Args:
        order: Every hook name that may be registered, in before-fork order.
    """

    def __init__(self, order: Sequence[str]) -> None:
        self._order = tuple(order)
        self._hooks: dict[str, _Hook] = {}

    def register(
        self,
        name: str,
        *,
        before: Action | None = None,
        after_in_parent: Action | None = None,
        after_in_child: Action | None = None,
    ) -> None:
        """Register the hook `name` (one of the order's names); a second call replaces it.

        Raises:
            ValueError: `name` is not in this table's order.
        """
        if name not in self._order:
            raise LensValueError(
                f"fork hook {name!r} is not in the fork order; known hooks: {list(self._order)}"
            )
        self._hooks[name] = _Hook(before, after_in_parent, after_in_child)

    def hold_lock(
        self,
        name: str,
        owner: object,
        attribute: str,
        new_lock: Callable[[], Any] = threading.Lock,
    ) -> None:
        """Hold the lock at `owner.<attribute>` across every fork; bind `new_lock()` in the child.

        The lock is looked up when each fork happens, so the attribute must stay bound to
        one lock between forks.
        """
        held: list[Any] = []

        def acquire() -> None:
            lock = getattr(owner, attribute)
            lock.acquire()
            held.append(lock)

        def release_in_parent() -> None:
            while held:
                held.pop().release()

        def replace_in_child() -> None:
            held.clear()
            setattr(owner, attribute, new_lock())

        self.register(
            name, before=acquire, after_in_parent=release_in_parent, after_in_child=replace_in_child
        )

    def run_before(self) -> None:
        """Run every `before` hook, in order."""
        for hook in self._ordered():
            _run(hook.before)

    def run_after_in_parent(self) -> None:
        """Run every `after_in_parent` hook, in reverse order."""
        for hook in reversed(self._ordered()):
            _run(hook.after_in_parent)

    def run_after_in_child(self) -> None:
        """Run every `after_in_child` hook, in reverse order."""
        for hook in reversed(self._ordered()):
            _run(hook.after_in_child)

    def install(self) -> None:
        """Register this table with the interpreter (once per table)."""
        os.register_at_fork(
            before=self.run_before,
            after_in_parent=self.run_after_in_parent,
            after_in_child=self.run_after_in_child,
        )

    def _ordered(self) -> list[_Hook]:
        hooks = self._hooks
        return [hooks[name] for name in self._order if name in hooks]


def _run(action: Action | None) -> None:
    if action is None:
        return
    try:
        action()
    except Exception as exc:  # one failing hook must not stop the others, or the fork
        _logger.warning("a fork hook failed (%s: %s)", type(exc).__name__, exc)


#: lens's own table, installed at import.
FORK_HOOKS: Final = ForkHooks(FORK_ORDER)
FORK_HOOKS.install()

register = FORK_HOOKS.register
hold_lock_across_fork = FORK_HOOKS.hold_lock
