"""Flushing and shutting down providers within a time budget.

The work runs on a daemon thread and the caller waits at most the budget, so a blocked
exporter (a collector that does not answer, a lock held by the signal-interrupted main
thread) cannot hold a training job past its own deadline. Work still running at the
deadline is abandoned with a warning; being a daemon thread, it never delays exit.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

_logger = logging.getLogger(__name__)

#: A named piece of work, given the milliseconds left in the budget; False means failed.
Step = tuple[str, Callable[[int], object]]

#: Slack beyond the budget for a step that honoured its own timeout to report back.
GRACE_MS: Final = 50


def run_within(action: str, steps: Sequence[Step], timeout_ms: int) -> bool:
    """Run `steps` in order on a daemon thread and wait at most about `timeout_ms`.

    Every step runs even if an earlier one failed. A step that raises is logged as a
    warning. Returns True when every step finished in time without failing.
    """
    if not steps:
        return True
    budget_ms = max(0, int(timeout_ms))
    deadline = time.monotonic() + budget_ms / 1000
    finished = threading.Event()
    state: dict[str, object] = {"current": None, "ok": True}

    def work() -> None:
        for label, step in steps:
            state["current"] = label
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                if step(remaining_ms) is False:
                    state["ok"] = False
            except Exception as exc:
                state["ok"] = False
                _logger.warning("%s: %s raised %s: %s", action, label, type(exc).__name__, exc)
        state["current"] = None
        finished.set()

    worker = threading.Thread(target=work, name=f"nemo-lens-{action}", daemon=True)
    try:
        worker.start()
    except RuntimeError:
        # Some Pythons (3.12) refuse new threads once interpreter shutdown has begun, which
        # is when atexit handlers call shutdown(). Run inline: the SDK steps still honour
        # their own time budgets, and flushing late beats not flushing.
        work()
        return bool(state["ok"])
    if finished.wait((budget_ms + GRACE_MS) / 1000):
        return bool(state["ok"])
    _logger.warning(
        "%s did not finish within %d ms (still in: %s); abandoned it on daemon thread %r, "
        "so data not yet exported may be lost",
        action,
        budget_ms,
        state["current"],
        worker.name,
    )
    return False


def provider_steps(provider: object, label: str, *, flush: bool, shut_down: bool) -> list[Step]:
    """Steps that force-flush and/or shut down `provider`, skipping missing methods."""
    steps: list[Step] = []
    for wanted, method_name in ((flush, "force_flush"), (shut_down, "shutdown")):
        method = getattr(provider, method_name, None) if wanted else None
        if callable(method):
            steps.append((f"{label}.{method_name}", _with_budget(method)))
    return steps


def _with_budget(method: Callable[..., object]) -> Callable[[int], object]:
    """Call `method(timeout_millis=budget)` where it accepts that argument, else `method()`."""
    try:
        accepts_timeout = "timeout_millis" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        accepts_timeout = False
    if accepts_timeout:
        return lambda remaining_ms: method(timeout_millis=remaining_ms)
    return lambda remaining_ms: method()
