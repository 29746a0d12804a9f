"""Locks that survive `os.fork()`: held across the fork, replaced unlocked in the child.

A thread holding a lock at the moment another thread forks leaves the child with a copy
that is locked for good, since the holder does not exist there. CPython's `logging`
avoids this by acquiring its lock before the fork, releasing it in the parent and
binding a fresh one in the child; `hold_across_fork` does the same for lens's registries.
"""

from __future__ import annotations

import os
import threading

__all__ = ["hold_across_fork"]


def hold_across_fork(owner: object, attribute: str) -> None:
    """Hold the lock at `owner.<attribute>` across every fork; rebind a fresh one in the child.

    The lock is looked up when each fork happens, so the attribute must stay bound to
    one lock between forks. Handlers run in reverse registration order before a fork,
    so a module that takes its lock before another module's must register after it.

    Args:
        owner: The module or class that holds the lock as an attribute.
        attribute: The attribute's name.
    """
    held: list[threading.Lock] = []

    def acquire_before_fork() -> None:
        lock: threading.Lock = getattr(owner, attribute)
        lock.acquire()
        held.append(lock)

    def release_in_parent() -> None:
        held.pop().release()

    def replace_in_child() -> None:
        held.clear()
        setattr(owner, attribute, threading.Lock())

    os.register_at_fork(
        before=acquire_before_fork,
        after_in_parent=release_in_parent,
        after_in_child=replace_in_child,
    )
