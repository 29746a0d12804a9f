"""Metrics from forked children: each child's series reach the pipeline of its parent.

A process whose setup exports metrics makes, just before each `fork()`, one shared region
for the child to come (`_shared_region`). In the child, `record_metrics` on a meter of
that pipeline (which the child never records through: see `nemo.lens._inheritance`)
writes each value into the region instead: a counter's sum, a gauge's last value, a
histogram's count, sum, min, max and buckets, per series. At each collection the parent
reads every child's region and its pipeline exports those series as its own
(`nemo.lens._sdk._children_metrics`), so nothing is configured in the child, and what a
child recorded is kept the moment `record_metrics` returns, however the child ends.

A child that has ended is folded: its final values join the parent's folded totals and
its region is released. The parent tells that a child ended by asking the kernel about
its own child (`waitid` with `WNOWAIT`, which leaves the exit status to whoever waits),
so no child need say goodbye. The parent's `shutdown` releases every region.

Spans go the same way: a span a child ends on the parent's tracer provider is written,
encoded, into the span ring of the child's region (`nemo.lens._sdk._children_spans`),
and the parent takes the ring's records every `SPAN_DRAIN_INTERVAL_S` on a daemon thread,
at its trace pipeline's flush and shutdown, and when it folds an ended child, and hands
them to its batch span processor.

Only the direct children of the process that built the pipeline report; a child of a
child records nothing through the inherited meters (as before: one warning), since its
region would be its parent's, which exports nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from nemo.lens import _fork_hooks, _shared_region
from nemo.lens._process import BuiltHere
from nemo.lens._warn_once import WarnOnce
from nemo.lens.instruments._spec import SDK_DEFAULT_BUCKETS, MetricSpec

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens forked children")

#: A series across processes: (pipeline, scope, instrument name, kind, attribute key).
SeriesId = tuple[int, tuple[str, str | None, str | None], str, str, frozenset[Any]]
#: A slot as last read: the slot, the child's writes to it, its values.
Snapshot = tuple["_shared_region.SlotInfo", int, tuple[Any, ...]]


class SeriesTotal(NamedTuple):
    """One series summed over a pipeline's children, live and ended.

    `values` is per kind: sums `(total,)`; gauges `(value, set_at)` combined by the mode;
    histograms `(count, sum, min, max, buckets)`. `updates` counts every write.
    """

    meta: _shared_region.InstrumentMeta
    attributes: dict[str, Any]
    updates: int
    values: tuple[Any, ...]


# The three records below are not dataclasses: building one costs every process that
# imports setup ~1 ms, and nothing compares or prints them.
class _Child:
    __slots__ = ("created", "last", "reader", "spans_dropped_seen")

    def __init__(self, reader: _shared_region.RegionReader) -> None:
        self.reader = reader
        #: The span records it dropped that the parent has counted.
        self.spans_dropped_seen = 0
        #: When the fork made it (monotonic seconds).
        self.created = time.monotonic()
        #: Each series it published, with its snapshot at the last read (an ended child's
        #: final one).
        self.last: dict[SeriesId, Snapshot] = {}


class _Pipeline(NamedTuple):
    consumer: weakref.ReferenceType[Any]
    built: BuiltHere


class _SpanSink(NamedTuple):
    #: Takes the payloads of the span records children wrote for this pipeline, and how
    #: many records children dropped because their ring was full.
    deliver: Callable[[list[bytes], int], None]
    built: BuiltHere


#: How often the parent takes its children's span records while any child lives.
SPAN_DRAIN_INTERVAL_S: Final = 0.5
#: A region whose child never wrote its pid this long after the fork is released (the
#: fork failed: CPython runs the after-fork hooks in the parent all the same).
UNSTARTED_CHILD_S: Final = 60.0

# Pipelines whose children report, by token (the token travels in each slot's meta and
# each span record).
_pipelines: dict[int, _Pipeline] = {}
_span_sinks: dict[int, _SpanSink] = {}
_next_token = 0
# The region made for the child a fork in progress creates.
_region_for_next_child: Any = None
# In the parent: one per child forked since a pipeline accepted children, until folded.
_children: list[_Child] = []
# Span records taken from ended children (token, payload), and the records they dropped,
# not yet delivered.
_taken_spans: list[tuple[int, bytes]] = []
_spans_dropped = [0]
# The parent's drain thread (None before one is needed), and what wakes it to stop.
_drainer: _SpanDrainer | None = None
_wake_drainer = threading.Event()
# Ended children's series, summed: id -> SeriesTotal.
_folded: dict[SeriesId, SeriesTotal] = {}
# Histograms children bucketed by different declarations, to warn about (by name).
_conflicting: set[str] = set()
# Series ended children could not keep (one mutable cell: no `global` in the folding).
_dropped = [0]
# Guards the children and what was taken from them (collections run on reader threads,
# the drain on its own; fork() appends). Under it: reading the regions (their metas, the
# ring's records) and asking the kernel whether a child ended; no logging, no SDK call.
_lock = threading.Lock()
# One drain at a time (re-entrant: a sink's SDK call may log, and a handler may flush).
_drain_lock = threading.RLock()
# In a child: its region's writer, and the pid of the parent that reads it.
_writer: _shared_region.RegionWriter | None = None
_reader_pid = 0


def accept_children(consumer: object) -> int:
    """Make the children forked from now on report to the pipeline of measurement consumer
    `consumer` (built in this process); return the pipeline's token."""
    global _next_token
    _next_token += 1
    _pipelines[_next_token] = _Pipeline(weakref.ref(consumer), BuiltHere())
    return _next_token


def accept_spans(deliver: Callable[[list[bytes], int], None]) -> int:
    """Make the children forked from now on write the spans they end on the trace
    pipeline of `deliver` (built in this process) into their regions; `deliver` gets
    their records' payloads. Return the pipeline's token."""
    global _next_token
    _next_token += 1
    _span_sinks[_next_token] = _SpanSink(deliver, BuiltHere())
    return _next_token


def stop_accepting(token: int) -> None:
    """The pipeline `token` is shut down: forget it, and every region once none is left."""
    _pipelines.pop(token, None)
    _span_sinks.pop(token, None)
    if not _sinks_here():
        _wake_drainer.set()
    if _accepting_here():
        return
    with _lock:
        children = list(_children)
        _children.clear()
        _folded.clear()
        _dropped[0] = 0
        _taken_spans.clear()
        _spans_dropped[0] = 0
    for child in children:
        child.reader.release()


def _accepting_here() -> bool:
    # Copies: a setup or shutdown on another thread may change the tables meanwhile.
    return any(pipeline.built.here() for pipeline in list(_pipelines.values())) or _sinks_here()


def write_span(token: int, payload: bytes) -> bool | None:
    """In a forked child, write one ended span's `payload` for the parent's trace
    pipeline `token`: True once written, False when the ring was full (counted), None
    where this process does not report to that pipeline."""
    writer = _writer
    sink = _span_sinks.get(token)
    if writer is None or sink is None or sink.built.pid != _reader_pid:
        return None
    return writer.append_record(token, payload)


def drain_spans() -> None:
    """Hand every span record this process's children wrote to its pipelines' sinks, and
    fold the children that ended. Drains run one at a time, so a flush that drains finds
    every record taken before it queued (the sinks run outside `_lock`: they call the
    SDK)."""
    with _drain_lock:
        _drain()


def _drain() -> None:
    with _lock:
        ended = _fold_ended()
        taken = list(_taken_spans)
        _taken_spans.clear()
        dropped, _spans_dropped[0] = _spans_dropped[0], 0
        for child in _children:
            taken += child.reader.take_records()
            dropped += _new_span_drops(child)
    for child in ended:
        child.reader.release()
    by_token: dict[int, list[bytes]] = {}
    for token, payload in taken:
        by_token.setdefault(token, []).append(payload)
    # Newest first: a ring's drops are counted once, by the newest trace pipeline here
    # (the child counts them per region, not per pipeline; a process has one, mostly).
    sinks = sorted(
        ((token, sink) for token, sink in list(_span_sinks.items()) if sink.built.here()),
        reverse=True,
    )
    for token, sink in sinks:
        payloads = by_token.get(token, [])
        if payloads or dropped:
            sink.deliver(payloads, dropped)
            dropped = 0


def _new_span_drops(child: _Child) -> int:
    total = child.reader.dropped_span_records
    new, child.spans_dropped_seen = total - child.spans_dropped_seen, total
    return new


def parents_consumer() -> Any:
    """In a forked child, the measurement consumer of the parent's (newest) pipeline that
    takes this child's values; None elsewhere."""
    if _writer is None:
        return None
    for pipeline in reversed(list(_pipelines.values())):
        consumer = pipeline.consumer()
        if consumer is not None and pipeline.built.pid == _reader_pid:
            return consumer
    return None


def reports_to_parent(consumer: object) -> bool:
    """True in a forked child whose parent's pipeline of measurement consumer `consumer`
    takes its values."""
    return _writer is not None and _token_of(consumer) is not None


def child_recorder(consumer: object, meter: object, spec: MetricSpec) -> Callable[..., None] | None:
    """In a forked child, the record method that writes `spec`'s values on `meter` (which
    records into `consumer`, of the parent's pipeline) into this child's region; None
    where it cannot report."""
    if _writer is None:
        return None
    token = _token_of(consumer)
    if token is None:
        return None
    bounds = None
    if spec.kind == "histogram":
        bounds = tuple(spec.buckets) if spec.buckets is not None else SDK_DEFAULT_BUCKETS
    meta = _shared_region.InstrumentMeta(
        pipeline=token,
        scope=_scope_of(meter),
        name=spec.name,
        kind=spec.kind,
        unit=spec.unit,
        description=spec.description,
        bounds=bounds,
        gauge_mode=(spec.multiprocess or "last") if spec.kind == "gauge" else None,
    )
    return _writer.instrument(meta)


def keeper_of(
    record: Callable[..., None],
) -> tuple[_shared_region.RegionWriter, _shared_region.SeriesWriter] | None:
    """The region writer and the instrument a `child_recorder` method writes through, so
    `record_metrics` can hand the writer a call's values at once (`keep_call`)."""
    writer = getattr(record, "__self__", None)
    if isinstance(writer, _shared_region.SeriesWriter):
        return writer.region, writer
    return None


def _token_of(consumer: object) -> int | None:
    if consumer is None:
        return None
    for token, pipeline in list(_pipelines.items()):
        if pipeline.consumer() is consumer and pipeline.built.pid == _reader_pid:
            return token
    return None


def _scope_of(meter: object) -> tuple[str, str | None, str | None]:
    return (
        str(getattr(meter, "name", "")),
        getattr(meter, "version", None),
        getattr(meter, "schema_url", None),
    )


def collect(token: int) -> dict[SeriesId, SeriesTotal]:
    """Every series the children of pipeline `token` recorded, summed over them (the
    ended ones' folded in), read now; children found ended are folded and released."""
    with _lock:
        ended = _fold_ended()
        # Not copied: `_add_all` replaces a total it adds to, never changes one.
        totals = {series_id: total for series_id, total in _folded.items() if series_id[0] == token}
        for child in _children:
            _add_all(totals, _read(child, token), token)
    for child in ended:
        child.reader.release()
    return totals


def never_had_children() -> bool:
    """True while this process has had no child to collect from (none forked, none
    folded, nothing dropped or left out), so a collection has nothing to merge. Read
    without the lock: a child forked meanwhile is merged from the next collection on."""
    return not (_children or _folded or _dropped[0] or _conflicting)


def _fold_ended() -> list[_Child]:
    """Under `_lock`: fold the children that ended into `_folded` and take their last
    span records; return them, to be released outside the lock."""
    ended = _ended_children()
    for child in ended:
        _dropped[0] += child.reader.dropped_series
        _add_all(_folded, child.last, None)
        _taken_spans.extend(child.reader.take_records())
        _spans_dropped[0] += _new_span_drops(child)
        _children.remove(child)  # last: a failure above leaves it to the next round
    return ended


def dropped_series() -> int:
    """Series this process's children could not keep (their region was full), so far."""
    with _lock:
        return _dropped[0] + sum(child.reader.dropped_series for child in _children)


def _read(
    child: _Child, token: int | None = None, *, ended: bool = False
) -> dict[SeriesId, Snapshot]:
    """Read `child`'s series (of pipeline `token` only, when given) into `child.last`;
    a slot the child has not written since the last read, or is writing right now (a
    torn read would report a value twice or not at all), keeps its snapshot. `ended`: the
    child has exited, this is its final read."""
    reader = child.reader
    last = child.last
    for slot in reader.refresh():
        if token is not None and slot.meta.pipeline != token:
            continue
        known = last.get(slot.series_id)
        if known is not None and reader.updates(slot) == known[1]:
            continue
        snapshot = reader.read(slot, ended=ended)
        if snapshot is not None:
            last[slot.series_id] = (slot, *snapshot)
    return last


def _ended_children() -> list[_Child]:
    """The children that have ended (their regions no longer change), oldest first.

    A pid a newer child carries again (the kernel reused it) marks the older child ended,
    and so does a region no child took within `UNSTARTED_CHILD_S` of the fork.
    """
    # Each pid read once: a child starting now writes its pid between two reads.
    pids = [(child, child.reader.writer_pid) for child in _children]
    newest_with_pid = {pid: child for child, pid in pids if pid}
    ended = []
    now = time.monotonic()
    for child, pid in pids:
        if pid:
            if newest_with_pid[pid] is not child or _has_ended(pid):
                _read(child, ended=True)  # its final values
                ended.append(child)
        elif now - child.created > UNSTARTED_CHILD_S:
            ended.append(child)  # the fork failed, or the child died before it began
    return ended


def _has_ended(pid: int) -> bool:
    """True once child `pid` of this process has exited (its status stays for `wait`)."""
    try:
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already waited for, or SIGCHLD ignored: gone
        return True
    except OSError:
        return False
    return status is not None


def _add_all(
    totals: dict[SeriesId, SeriesTotal],
    snapshots: dict[SeriesId, Snapshot],
    token: int | None,
) -> None:
    """Add one child's `snapshots` (of pipeline `token`, or all) into `totals`."""
    for series_id, (slot, updates, values) in snapshots.items():
        if not updates or (token is not None and series_id[0] != token):
            continue
        known = totals.get(series_id)
        if known is None:
            totals[series_id] = SeriesTotal(slot.meta, slot.attributes, updates, values)
        elif known.meta.bounds != slot.meta.bounds:
            # Two children bucketed one histogram by different declarations: the first
            # one's stands (as in the SDK), the other's values cannot be added.
            _conflicting.add(slot.meta.name)
        else:
            totals[series_id] = SeriesTotal(
                known.meta,
                known.attributes,
                known.updates + updates,
                combine(slot.meta, known.values, values),
            )


def conflicting_instruments() -> list[str]:
    """The histograms whose values some child bucketed otherwise than the others (left
    out), noted since the last call."""
    with _lock:
        names = sorted(_conflicting)
        _conflicting.clear()
    return names


def combine(
    meta: _shared_region.InstrumentMeta, first: tuple[Any, ...], second: tuple[Any, ...]
) -> tuple[Any, ...]:
    """Two processes' values of one series as one (each kind's rule; see `SeriesTotal`)."""
    if meta.kind == "histogram":
        count, total, low, high, buckets = first
        other_count, other_total, other_low, other_high, other_buckets = second
        return (
            count + other_count,
            total + other_total,
            min(low, other_low),
            max(high, other_high),
            tuple(a + b for a, b in zip(buckets, other_buckets, strict=True)),
        )
    if meta.kind == "gauge":
        return combine_gauges(meta.gauge_mode or "last", [first, second])
    return (first[0] + second[0],)


def combine_gauges(mode: str, values: Iterable[tuple[Any, int]]) -> tuple[Any, int]:
    """(value, set_at) pairs of one gauge series as one pair, by `mode` (see GAUGE_MODES)."""
    pairs = list(values)
    newest = max(set_at for _, set_at in pairs)
    if mode == "max":
        return (max(value for value, _ in pairs), newest)
    if mode == "min":
        return (min(value for value, _ in pairs), newest)
    if mode == "sum":
        return (sum(value for value, _ in pairs), newest)
    return max(pairs, key=lambda pair: pair[1])


class _SpanDrainer:
    """The parent's daemon thread that takes its children's span records every
    `SPAN_DRAIN_INTERVAL_S` while any trace pipeline built here takes them."""

    def __init__(self) -> None:
        self.built = BuiltHere()
        self.thread = threading.Thread(
            target=self._run, name="nemo-lens-children-spans", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        # Until no child is left (the next fork starts another) or no pipeline takes spans.
        while _children and _sinks_here():
            _wake_drainer.wait(SPAN_DRAIN_INTERVAL_S)
            if not _sinks_here():
                return  # shut down: its last drain ran in the span processor's shutdown
            try:
                drain_spans()
            except Exception as exc:  # a bad record or sink: the next round tries again
                _warnings.failure("taking forked children's spans", exc, "they are retried")


def _sinks_here() -> bool:
    return any(sink.built.here() for sink in list(_span_sinks.values()))


def _ensure_drainer() -> None:
    global _drainer
    drainer = _drainer
    if drainer is not None and drainer.built.here() and drainer.thread.is_alive():
        return
    if _sinks_here():
        _wake_drainer.clear()
        _drainer = _SpanDrainer()


def _before_fork() -> None:
    global _region_for_next_child
    _region_for_next_child = None
    if _accepting_here():
        try:
            _region_for_next_child = _shared_region.new_region(os.getpid())
        except (OSError, ValueError):  # no memory for it: this child records nothing
            _region_for_next_child = None


def _after_fork_in_parent() -> None:
    global _region_for_next_child
    region, _region_for_next_child = _region_for_next_child, None
    if region is not None:
        with _lock:
            _children.append(_Child(_shared_region.RegionReader(region)))
        _ensure_drainer()


def _after_fork_in_child() -> None:  # pragma: no cover - runs in children, untraced
    global _region_for_next_child, _writer, _lock, _children, _folded, _dropped, _reader_pid
    global _taken_spans, _spans_dropped, _drainer, _drain_lock
    region, _region_for_next_child = _region_for_next_child, None
    _drain_lock = threading.RLock()  # the parent's drain thread may have held it
    _taken_spans = []
    _spans_dropped = [0]
    _drainer = None
    _conflicting.clear()
    # The parent's readers of its other children are the parent's (a collection may have
    # held the lock at the fork).
    _lock = threading.Lock()
    _children = []
    _folded = {}
    _dropped = [0]
    _writer = None
    _reader_pid = 0
    if region is not None:
        _writer = _shared_region.RegionWriter(region)
        _reader_pid = _shared_region.region_creator(region)


_fork_hooks.register(
    "forked children",
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
