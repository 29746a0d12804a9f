"""Threads released at the same moment, to show that a call is safe under concurrency."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

#: The interpreter's thread switch interval during a race: the default 5 ms lets one
#: thread run a short check-then-act to its end before the other starts; 10 us interleaves.
RACE_SWITCH_INTERVAL_S = 1e-5
#: How long `eventually` waits for another thread's work.
EVENTUALLY_S = 10.0


def eventually(condition: Callable[[], bool], timeout_s: float = EVENTUALLY_S) -> bool:
    """Poll `condition` for up to `timeout_s`, for work another thread finishes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def call_at_once(function: Callable[[], object], threads: int = 2, timeout_s: float = 20) -> None:
    """Run `function` in `threads` threads that a barrier releases together, with the
    thread switch interval at `RACE_SWITCH_INTERVAL_S` (restored after); every wait ends
    within `timeout_s`. Re-raises the first exception a thread raised."""
    saved_interval = sys.getswitchinterval()
    sys.setswitchinterval(RACE_SWITCH_INTERVAL_S)
    try:
        _race(function, threads, timeout_s)
    finally:
        sys.setswitchinterval(saved_interval)


def _race(function: Callable[[], object], threads: int, timeout_s: float) -> None:
    barrier = threading.Barrier(threads, timeout=timeout_s)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            function()
        except BaseException as exc:
            errors.append(exc)

    started = [threading.Thread(target=run, name=f"caller-{n}") for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout_s)
    assert not any(thread.is_alive() for thread in started), "a caller did not finish"
    if errors:
        raise errors[0]
