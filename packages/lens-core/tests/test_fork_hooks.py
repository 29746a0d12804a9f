"""The fork-hook table: one os.register_at_fork, hooks in an explicit order, locks held
across a real os.fork() and replaced unlocked in the child."""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from lens_fork import in_child

import nemo.lens
from nemo.lens import _fork_hooks, strategies
from nemo.lens._fork_hooks import FORK_ORDER, ForkHooks

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
    # Python 3.12+ warns about fork() while threads run; one test forks with one on purpose.
    pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning"),
]

LENS_ROOT = Path(nemo.lens.__file__).parent


class Holder:
    """An object holding a lock as an attribute, as lens's registries do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_register_at_fork_is_called_in_one_module_only() -> None:
    """Only nemo/lens/_fork_hooks.py calls os.register_at_fork."""
    callers = []
    for path in sorted(LENS_ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "register_at_fork":
                callers.append(path.relative_to(LENS_ROOT).as_posix())
    assert callers == ["_fork_hooks.py"]


def test_every_hook_lens_registers_is_in_the_order() -> None:
    """Each name lens registers is a FORK_ORDER entry; an unknown name is refused."""
    # Import every module that registers a hook (some load only when a setup needs them).
    import nemo.lens._sdk._pipeline
    import nemo.lens._sdk._prometheus
    import nemo.lens.handle
    import nemo.lens.instruments  # noqa: F401

    registered = list(_fork_hooks.FORK_HOOKS._hooks)
    assert set(registered) == set(FORK_ORDER)
    with pytest.raises(ValueError, match="not in the fork order"):
        _fork_hooks.register("a hook nobody listed", after_in_child=lambda: None)


def test_hooks_run_in_order_before_and_in_reverse_after() -> None:
    """before runs in the table's order, both after phases in reverse, whatever the
    registration order."""
    calls: list[str] = []

    def noting(text: str) -> Callable[[], None]:
        return lambda: calls.append(text)

    hooks = ForkHooks(("first", "second", "third"))
    for name in ("third", "first", "second"):
        hooks.register(
            name,
            before=noting(f"before {name}"),
            after_in_parent=noting(f"parent {name}"),
            after_in_child=noting(f"child {name}"),
        )
    hooks.run_before()
    hooks.run_after_in_parent()
    hooks.run_after_in_child()
    assert calls == [
        "before first",
        "before second",
        "before third",
        "parent third",
        "parent second",
        "parent first",
        "child third",
        "child second",
        "child first",
    ]


def test_a_failing_hook_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """A hook that raises is logged; the hooks after it still run."""
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    hooks = ForkHooks(("broken", "fine"))
    hooks.register("broken", before=broken)
    hooks.register("fine", before=lambda: ran.append("fine"))
    hooks.run_before()
    assert ran == ["fine"]
    assert "RuntimeError: boom" in caplog.text


@pytest.mark.fork
def test_child_gets_a_fresh_unlocked_lock_and_the_parent_keeps_its_own() -> None:
    """The child's attribute is a new, unlocked lock; the parent's is the same one, released."""
    holder = Holder()
    hooks = ForkHooks(("holder lock",))
    hooks.hold_lock("holder lock", holder, "lock")
    hooks.install()
    parent_lock = holder.lock

    def check() -> list[bool]:
        return [holder.lock is not parent_lock, not holder.lock.locked()]

    assert in_child(check) == [True, True]
    assert holder.lock is parent_lock
    assert not parent_lock.locked()


@pytest.mark.fork
def test_fork_waits_for_a_thread_holding_the_lock() -> None:
    """fork() takes the lock first, so a thread's critical section is never cut in half."""
    holder = Holder()
    hooks = ForkHooks(("holder lock",))
    hooks.hold_lock("holder lock", holder, "lock")
    hooks.install()
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


@pytest.mark.fork
def test_strategy_registry_lock_is_replaced_in_the_child() -> None:
    """The export-strategy registry's lock is re-created, unlocked, in a forked child."""
    parent_lock = strategies._lock

    def check() -> list[bool]:
        return [strategies._lock is not parent_lock, not strategies._lock.locked()]

    assert in_child(check) == [True, True]
    assert strategies._lock is parent_lock
    assert not parent_lock.locked()
