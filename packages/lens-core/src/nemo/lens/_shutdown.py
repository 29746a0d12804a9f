"""Flushing and shutting down providers within a time budget, and at interpreter exit.

The work runs on daemon threads and the caller waits at most the budget, so a blocked
exporter (a collector that does not answer, a lock held by the signal-interrupted main
thread) cannot hold a training job past its own deadline. Work still running at the
deadline is abandoned with a warning; being on daemon threads, it never delays exit.

Each signal is a lane of its own, run on its own thread against the same deadline, so a
traces collector that is down cannot starve the metrics export of its time (and the
other way round).

A shutdown that is still running when the process exits (a SIGTERM handler calling
`sys.exit` mid-shutdown) is waited for by the exit hook, until that shutdown's own
deadline. Those waits, and a second `shutdown()` waiting for the running one, only poll
flags and sleep: a signal handler runs on the thread it interrupted, so a wait that took a
lock the interrupted frame holds would never end.

A pipeline nobody shut down is shut down at exit by lens's own `atexit` hook, bounded by
`EXIT_TIMEOUT_MS`. The hook hands the work to a daemon thread started beforehand, since
some Pythons (3.12) refuse to start threads once interpreter shutdown has begun.

Those daemon threads are workers (`_Worker`) that wait, idle, between tasks: a lane takes
an idle one, so a process that sets up and shuts down again starts no thread of lens's.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import logging
import math
import operator
import os
import queue
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Final

from nemo.lens._process import BuiltHere
from nemo.lens._warn_once import WarnOnce

_logger = logging.getLogger(__name__)
#: multiprocessing runs its finalisers highest priority first; lens's runs before the
#: default ones (0), while the child's own objects still work.
_FINALIZER_PRIORITY: Final = 100
# The process whose multiprocessing finaliser runs the exit hook (a fork copies the flag).
_finalizer_pid = 0

#: A named piece of work, given the milliseconds left in the budget; False means failed.
Step = tuple[str, Callable[[int], object]]
#: A signal's steps, run in order on one thread: (signal name, steps).
Lane = tuple[str, Sequence[Step]]

#: Slack beyond the budget for a step that honoured its own timeout to report back.
GRACE_MS: Final = 50
#: The budget of `shutdown()` and `force_flush()` when none (or an unusable one) is given.
DEFAULT_TIMEOUT_MS: Final = 5000
#: The largest budget accepted (10 minutes); larger ones, infinity included, are clamped.
MAX_TIMEOUT_MS: Final = 600_000
#: How often a `LaneRuns.join` looks whether the lanes finished.
JOIN_POLL_S: Final = 0.005
#: What lens's exit hook gives a pipeline that was never shut down.
EXIT_TIMEOUT_MS: Final = DEFAULT_TIMEOUT_MS
#: How long an idle worker waits for a task before it leaves (unless exit needs it).
IDLE_S: Final = 2.0
#: Idle workers kept at most: one per signal's lane.
IDLE_MAX: Final = 3
#: An idle worker's thread name (it runs the pending shutdowns at exit).
IDLE_NAME: Final = "nemo-lens-exit"

_budget_warnings = WarnOnce(_logger, "nemo.lens shutdown budgets")


def budget_ms(action: str, timeout_ms: object, default_ms: int = DEFAULT_TIMEOUT_MS) -> int:
    """`timeout_ms` as a budget in [0, MAX_TIMEOUT_MS] milliseconds; never raises.

    None means `default_ms`. A number is truncated to an integer and clamped: negative
    means 0 (do not wait), larger than `MAX_TIMEOUT_MS` (infinity too) means that maximum.
    Anything else (a bool, a string, NaN, an object) means `default_ms`, with one warning
    per action and kind of value.
    """
    if timeout_ms is None:
        return default_ms
    try:
        value: float
        if isinstance(timeout_ms, (bool, str, bytes, bytearray)):
            return _unusable(action, timeout_ms, default_ms)
        if isinstance(timeout_ms, int):
            value = timeout_ms
        else:
            try:
                value = operator.index(timeout_ms)  # type: ignore[arg-type]
            except TypeError:
                value = float(timeout_ms)  # type: ignore[arg-type]
        if isinstance(value, float) and math.isnan(value):
            return _unusable(action, timeout_ms, default_ms)
        if value <= 0:
            return 0
        if value >= MAX_TIMEOUT_MS:
            return MAX_TIMEOUT_MS
        return int(value)
    except Exception:  # not a number, or one whose conversion misbehaves
        return _unusable(action, timeout_ms, default_ms)


def _unusable(action: str, timeout_ms: object, default_ms: int) -> int:
    kind = type(timeout_ms).__name__
    if _budget_warnings.first((action, kind)):
        try:
            shown = repr(timeout_ms)[:80]
        except Exception:
            shown = f"<{kind}>"
        _logger.warning(
            "%s: timeout_ms must be a number of milliseconds (0 to %d), got %s %s; using %d ms",
            action,
            MAX_TIMEOUT_MS,
            kind,
            shown,
            default_ms,
        )
    return default_ms


# _LaneRun and _Worker are plain classes, not dataclasses: building a dataclass costs
# every process importing setup ~1 ms, and nothing compares or prints these.
class _LaneRun:
    """One lane's progress, as the waiting caller sees it."""

    __slots__ = ("claim", "current", "finished", "name", "ok", "steps", "thread")

    def __init__(self, name: str, steps: Sequence[Step]) -> None:
        self.name = name
        self.steps = steps
        self.current: str | None = None
        self.ok = True
        self.finished = threading.Event()
        self.thread: threading.Thread | None = None
        # Taken (without blocking) by whichever thread runs the steps: a lane started twice
        # (by a signal handler that interrupted the start; see `LaneRuns.start`) runs once.
        self.claim = threading.Lock()

    def run(self, action: str, deadline: float) -> None:
        if not self.claim.acquire(blocking=False):
            return
        for label, step in self.steps:
            self.current = label
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                if step(remaining_ms) is False:
                    self.ok = False
            except Exception as exc:
                self.ok = False
                _logger.warning("%s: %s raised %s: %s", action, label, type(exc).__name__, exc)
        self.current = None
        # A finished run stays listed for exit (`_running`): it must not keep what its
        # steps shut down (a handle and its providers) alive.
        self.steps = ()
        self.finished.set()


class LaneRuns:
    """Lanes run by one deadline, each on a daemon thread: started once, waited on by many.

    The caller that starts them waits with `wait`. Anyone else, a signal handler that
    interrupted that caller on its own thread included, waits with `join`: it only reads
    flags and sleeps, taking no lock the interrupted caller could hold, so it cannot
    deadlock, and it is bounded by its own deadline and this run's.
    """

    def __init__(
        self,
        action: str,
        lanes: Sequence[Lane],
        timeout_ms: int,
        exit_key: object | None = None,
    ) -> None:
        self.action = action
        self.budget = max(0, int(timeout_ms))
        self.deadline = time.monotonic() + self.budget / 1000
        self.runs = [_LaneRun(name, steps) for name, steps in lanes if steps]
        self.built = BuiltHere()
        # The key this run shuts down at exit (see `shutdown_at_exit`), if any: the lanes
        # may take every idle worker, as exit no longer needs one for it.
        self.exit_key = exit_key

    def finished(self) -> bool:
        """True once every lane finished (read without a lock)."""
        return all(run.finished.is_set() for run in self.runs)

    def start(self) -> None:
        """Start every lane not started yet; idempotent (a lane started twice runs once).

        Each lane runs on a worker (`_Worker`): an idle one, or one started for it. Where
        no thread can be started (interpreter shutdown on Python 3.12), the lanes run
        here, one after the other in the order given, each with an equal share of what is
        left.
        """
        inline: list[_LaneRun] = []
        for run in self.runs:
            if run.thread is not None or run.finished.is_set():
                continue
            if not inline:
                task = functools.partial(run.run, self.action, self.deadline)
                run.thread = _run_on_worker(f"nemo-lens-{self.action}", task)
                if run.thread is not None:
                    continue
            inline.append(run)
        _keep_one_idle(self.exit_key)
        # The key (a handle) is not needed again, and this run stays listed for exit
        # (`_running`) after it finishes.
        self.exit_key = None
        for index, run in enumerate(inline):
            left = max(0.0, self.deadline - time.monotonic())
            run.run(self.action, time.monotonic() + left / (len(inline) - index))

    def wait(self) -> bool:
        """Wait for the lanes until the deadline (and `GRACE_MS`), warning about each one
        unfinished; True when every step finished in time without failing."""
        ok = True
        for run in self.runs:
            wait_s = max(0.0, self.deadline - time.monotonic()) + GRACE_MS / 1000
            if not run.finished.wait(wait_s):
                ok = False
                _logger.warning(
                    "%s did not finish within %d ms (still in: %s); abandoned it on daemon "
                    "thread %r, so %s data not yet exported may be lost",
                    self.action,
                    self.budget,
                    run.current,
                    run.thread.name if run.thread is not None else None,
                    run.name,
                )
            elif not run.ok:
                ok = False
        return ok

    def join(self, timeout_ms: int) -> bool:
        """Wait, lock-free, until every lane finished, at most `timeout_ms` and never past
        this run's deadline (and `GRACE_MS`); True if they all finished."""
        until = min(time.monotonic() + max(0, timeout_ms) / 1000, self.deadline + GRACE_MS / 1000)
        return _poll_until(self.finished, until)


def _poll_until(condition: Callable[[], bool], until: float) -> bool:
    # time.sleep takes no lock, so this is safe in a signal handler that interrupted
    # the very thread it waits for.
    while not condition():
        left = until - time.monotonic()
        if left <= 0:
            return condition()
        time.sleep(min(left, JOIN_POLL_S))
    return True


def start_lanes(action: str, lanes: Sequence[Lane], timeout_ms: int) -> LaneRuns:
    """Start `lanes` (see `run_lanes`) and return them, to `wait` or `join` on."""
    started = LaneRuns(action, lanes, timeout_ms)
    started.start()
    return started


def run_lanes(action: str, lanes: Sequence[Lane], timeout_ms: int) -> bool:
    """Run each lane's steps in order, every lane on its own daemon thread, all by one
    deadline `timeout_ms` from now; wait at most about `timeout_ms`.

    Every step of a lane runs even if an earlier one failed; a step that raises is
    logged as a warning. A lane unfinished at the deadline is abandoned with a warning.
    Returns True when every step finished in time without failing.
    """
    return start_lanes(action, lanes, timeout_ms).wait()


def run_within(action: str, steps: Sequence[Step], timeout_ms: int) -> bool:
    """Run `steps` in order on one daemon thread and wait at most about `timeout_ms`.

    Every step runs even if an earlier one failed. A step that raises is logged as a
    warning. Returns True when every step finished in time without failing.
    """
    return run_lanes(action, [("", steps)], timeout_ms)


def provider_steps(provider: object, label: str, *, flush: bool, shut_down: bool) -> list[Step]:
    """Steps that force-flush and/or shut down `provider`, skipping missing methods."""
    steps: list[Step] = []
    for wanted, method_name in ((flush, "force_flush"), (shut_down, "shutdown")):
        method = getattr(provider, method_name, None) if wanted else None
        if callable(method):
            steps.append((f"{label}.{method_name}", with_budget(method)))
    return steps


def final_export_steps(provider: object, label: str) -> list[Step]:
    """The steps that export what `provider` holds once and shut it down.

    An SDK provider's `shutdown` already exports everything once (the batch span
    processor drains its queue, a periodic metric reader collects a last time), so a
    flush before it would export a second time; only a provider without `shutdown` is
    flushed.
    """
    steps = provider_steps(provider, label, flush=False, shut_down=True)
    return steps or provider_steps(provider, label, flush=True, shut_down=False)


def with_budget(method: Callable[..., object]) -> Callable[[int], object]:
    """Call `method(timeout_millis=budget)` where it accepts that argument, else `method()`."""
    if _accepts_timeout(method):
        return lambda remaining_ms: method(timeout_millis=remaining_ms)
    return lambda remaining_ms: method()


# A bound method's function -> whether the method takes `timeout_millis`. Every setup
# asks about the same few SDK methods; reading a signature costs ~25 us each time.
_timeout_parameter: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()


def _accepts_timeout(method: Callable[..., object]) -> bool:
    # Only bound methods are remembered: their signature is their function's (less the
    # first parameter, whatever the instance), and the function outlives the instance.
    function = method.__func__ if isinstance(method, types.MethodType) else None
    known = None
    if function is not None:
        with contextlib.suppress(TypeError):  # a function that takes no weak reference
            known = _timeout_parameter.get(function)
    if known is not None:
        return known
    try:
        accepts = "timeout_millis" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        accepts = False
    if function is not None:
        with contextlib.suppress(TypeError):
            _timeout_parameter[function] = accepts
    return accepts


# --- at interpreter exit ------------------------------------------------------------------

#: id(key) -> (the pid that registered it, the key, its shutdown taking a budget in ms).
_at_exit: dict[int, tuple[BuiltHere, object, Callable[[int], object]]] = {}
_hook_registered = False
#: Shutdowns started in this process that exit still waits for (see `wait_at_exit`).
_running: list[LaneRuns] = []


class _Worker:
    """A daemon thread that runs what it is handed, one task at a time: a lane of a flush
    or shutdown, or at exit the shutdowns still pending.

    Between tasks it waits in `_idle`, so a process that sets up and shuts down again
    starts no thread for it, and one is idle, started beforehand, whenever a shutdown is
    pending at exit. An idle worker leaves after `IDLE_S` unless it is that one.
    """

    __slots__ = ("built", "tasks", "thread")

    def __init__(self) -> None:
        self.built = BuiltHere()
        self.tasks: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=IDLE_NAME, daemon=True)

    def start(self) -> bool:
        """Start the thread; False where none can start (interpreter shutdown on 3.12)."""
        try:
            self.thread.start()
        except RuntimeError:
            return False
        return True

    def run(self, name: str, task: Callable[[], object]) -> None:
        """Run `task` on this worker's thread (named `name` meanwhile); the caller took
        the worker out of `_idle` or just started it. Takes no lock: `SimpleQueue.put`
        is safe in a signal handler that interrupted a `put` or `get` of the same queue."""
        self.thread.name = name
        self.tasks.put(task)

    def _serve(self) -> None:
        while True:
            try:
                task = self.tasks.get(timeout=IDLE_S)
            except queue.Empty:
                if self._leave():
                    return
                continue
            try:
                task()
            except Exception as exc:  # a worker never dies with a traceback
                _logger.warning("%s raised %s: %s", self.thread.name, type(exc).__name__, exc)
            del task  # what it shut down is not kept alive while idle
            self.thread.name = IDLE_NAME
            if not self.built.here() or len(_idle_here()) >= IDLE_MAX:
                return
            _idle.append(self)

    def _leave(self) -> bool:
        """Whether this idle worker may leave: not while it is the only one idle with a
        shutdown pending at exit, nor once someone took it (its task is on the way)."""
        if _pending_here() and not [worker for worker in _idle_here() if worker is not self]:
            return False
        try:
            _idle.remove(self)
        except ValueError:
            return False
        return True


#: Workers waiting for a task; a forked child finds its parent's there, and skips them.
_idle: list[_Worker] = []


def _idle_here() -> list[_Worker]:
    return [worker for worker in _idle if worker.built.here()]


def _take_idle() -> _Worker | None:
    """An idle worker of this process, taken out of `_idle`; None if there is none."""
    while True:
        try:
            worker = _idle.pop()
        except IndexError:  # list.pop is atomic: no lock, safe in a signal handler
            return None
        if worker.built.here():
            return worker


def _run_on_worker(name: str, task: Callable[[], object]) -> threading.Thread | None:
    """Run `task` on an idle worker, or on a new one; None where no thread can start
    (interpreter shutdown on Python 3.12), and then the caller runs it."""
    worker = _take_idle()
    if worker is None:
        worker = _Worker()
        if not worker.start():
            return None
    worker.run(name, task)
    return worker.thread


def _keep_one_idle(shut_down: object | None = None) -> None:
    """Start an idle worker if none is and a shutdown other than `shut_down`'s is
    pending at exit: exit may find no thread it can start."""
    if _idle_here() or not [key for key, _ in _pending_here() if key is not shut_down]:
        return
    worker = _Worker()
    if worker.start():  # else already shutting down: the exit hook runs the work itself
        _idle.append(worker)


def shutdown_at_exit(key: object, shutdown: Callable[[int], object]) -> None:
    """At interpreter exit, call `shutdown(budget_ms)` unless `forget_at_exit(key)` ran.

    Only in the process that registered it: a forked child never shuts down its parent's
    pipeline. All pending shutdowns together get `EXIT_TIMEOUT_MS`.
    """
    global _hook_registered
    _at_exit[id(key)] = (BuiltHere(), key, shutdown)
    if not _hook_registered:
        _hook_registered = True
        atexit.register(_run_at_exit)
    _run_at_multiprocessing_exit()
    _keep_one_idle()


def _run_at_multiprocessing_exit() -> None:
    """In a `multiprocessing` child, run the exit hook at the child's end too: it leaves
    through `os._exit` (no `atexit`), after running its finalisers. Once per process."""
    global _finalizer_pid
    if _finalizer_pid == os.getpid():
        return
    process_module = sys.modules.get("multiprocessing.process")
    util = sys.modules.get("multiprocessing.util")
    if process_module is None or util is None or process_module.parent_process() is None:
        return  # not started by multiprocessing (which imports both first)
    _finalizer_pid = os.getpid()
    util.Finalize(None, _run_at_exit, exitpriority=_FINALIZER_PRIORITY)


def forget_at_exit(key: object) -> None:
    """Do not shut `key` down at exit (it was shut down already)."""
    _at_exit.pop(id(key), None)


def _pending_here() -> list[tuple[object, Callable[[int], object]]]:
    return [(key, shutdown) for built, key, shutdown in list(_at_exit.values()) if built.here()]


def _run_pending(budget: int) -> None:
    deadline = time.monotonic() + budget / 1000
    pending = _pending_here()
    for index, (key, shutdown) in enumerate(pending):
        forget_at_exit(key)
        left_ms = max(0, int((deadline - time.monotonic()) * 1000))
        try:
            shutdown(left_ms // (len(pending) - index))
        except Exception as exc:
            _logger.warning("telemetry shutdown at exit raised %s: %s", type(exc).__name__, exc)


def wait_at_exit(started: LaneRuns) -> None:
    """If the process exits while `started` runs, exit waits for it, until its deadline.

    A signal handler that exits (`sys.exit`) while a shutdown runs would otherwise end
    the process with that shutdown's export in flight on a daemon thread. Idempotent.
    """
    now = time.monotonic()
    _running[:] = [
        run for run in _running if run.built.here() and run.deadline > now and not run.finished()
    ]
    if not any(run is started for run in _running):
        _running.append(started)


def _join_running() -> None:
    """Wait (lock-free) for each shutdown of this process still running, to its deadline."""
    for started in list(_running):
        if started.built.here():
            started.join(MAX_TIMEOUT_MS)
    _running.clear()


def _run_at_exit() -> None:
    """lens's atexit hook: wait for the shutdowns still running, within their budgets;
    then shut down what nobody shut down, within `EXIT_TIMEOUT_MS`."""
    _join_running()
    if not _pending_here():
        return
    done = threading.Event()

    def run_pending() -> None:
        try:
            _run_pending(EXIT_TIMEOUT_MS)
        finally:
            done.set()

    worker = _take_idle()
    if worker is None:
        run_pending()
        return
    worker.run(IDLE_NAME, run_pending)
    if not done.wait((EXIT_TIMEOUT_MS + 2 * GRACE_MS) / 1000):
        _logger.warning(
            "telemetry shutdown at exit did not finish within %d ms; exiting without it",
            EXIT_TIMEOUT_MS,
        )
