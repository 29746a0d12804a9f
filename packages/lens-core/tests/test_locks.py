"""The fork-safe lock helper: held across a real os.fork(), replaced unlocked in the child."""

from __future__ import annotations

import os
import threading

import pytest
from lens_fork import in_child

from nemo.lens import strategies
from nemo.lens._locks import hold_across_fork

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
    # Python 3.12+ warns about fork() while threads run; one test forks with one on purpose.
    pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning"),
]


class Holder:
    """An object holding a lock as an attribute, as lens's registries do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_child_gets_a_fresh_unlocked_lock_and_the_parent_keeps_its_own() -> None:
    """The child's attribute is a new, unlocked lock; the parent's is the same one, released."""
    holder = Holder()
    hold_across_fork(holder, "lock")
    parent_lock = holder.lock

    def check() -> list[bool]:
        return [holder.lock is not parent_lock, not holder.lock.locked()]

    assert in_child(check) == [True, True]
    assert holder.lock is parent_lock
    assert not parent_lock.locked()


def test_fork_waits_for_a_thread_holding_the_lock() -> None:
    """fork() takes the lock first, so a thread's critical section is never cut in half."""
    holder = Holder()
    hold_across_fork(holder, "lock")
    inside = threading.Event()
    steps: list[str] = []

    def critical_section() -> None:
        with holder.lock:
            inside.set()
            threading.Event().wait(0.2)
            steps.append("thread done")

    thread = threading.Thread(target=critical_section)
    thread.start()
    assert inside.wait(10)
    assert in_child(lambda: steps) == ["thread done"]
    thread.join(10)


def test_strategy_registry_lock_is_replaced_in_the_child() -> None:
    """The export-strategy registry's lock is re-created, unlocked, in a forked child."""
    parent_lock = strategies._lock

    def check() -> list[bool]:
        return [strategies._lock is not parent_lock, not strategies._lock.locked()]

    assert in_child(check) == [True, True]
    assert strategies._lock is parent_lock
    assert not parent_lock.locked()
