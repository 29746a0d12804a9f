"""One forked child's telemetry in memory its parent shares: the child writes, the parent reads.

The region is an anonymous shared mapping the parent makes just before the fork
(`nemo.lens._forked_children`), so what the child writes is in the parent's
memory the moment it is written: nothing is lost when the child ends through `os._exit`
or is killed, nothing is ever on disk, and the kernel frees the pages once both processes
let go of them.

Layout, in 8-byte words (`int64` or `float64` by field; x86-64 and arm64 store an aligned
word at once). The seqlock and the publishing below rely on the other process seeing the
child's stores in the order it made them, which x86-64 guarantees; on weakly ordered CPUs
(arm64) pure Python has no barrier to make sure of it, and a read may, rarely, see a
sequence number before the fields it covers:

    header  MAGIC, creator pid, writer pid, end (first free series word), dropped series,
            span bytes written, span bytes taken, dropped span records
    series  slots: words in the slot, meta bytes, meta (JSON, padded to a word), fields
    spans   a ring of records: bytes, pipeline token, payload (padded to a word)

A slot is one series of one instrument: its fields hold the series' running state, so the
series area grows with series, never with records. The child appends a slot whole, then
publishes it by moving `end`; the parent reads only up to `end`. Each slot's first field
is a sequence number the child makes odd while it updates the fields and even after (a
seqlock): the parent retries a read that saw it odd or changing, so it never takes half
an update.

The span ring holds ended spans until the parent takes them: the child appends a record
whole, then publishes it by adding its size to "written"; the parent reads records up to
"written" and then moves "taken", which frees their room. A record that does not fit in
the room left is dropped and counted. The child is the only writer of everything but
"taken", which only the parent writes.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import mmap
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from nemo.lens._attributes import INT64_MAX
from nemo.lens.instruments._series import SeriesAttributes, series_key, typed_series_key

#: Bytes reserved per child for its series. Virtual: the kernel backs only the pages a
#: child writes.
REGION_BYTES: Final = 4 * 1024 * 1024
#: Bytes of the span ring that follows them (ended spans not yet taken by the parent).
SPAN_RING_BYTES: Final = 4 * 1024 * 1024
MAGIC: Final = 0x4C454E535345_0002  # "LENSSE", layout 2

# Header words.
_MAGIC, _CREATOR, _WRITER, _END, _DROPPED, _SPANS_WRITTEN, _SPANS_TAKEN, _SPANS_DROPPED = range(8)
HEADER_WORDS: Final = 8
_SERIES_WORDS: Final = REGION_BYTES // 8
_RING_START: Final = REGION_BYTES  # byte offset of the span ring
_RECORD_HEADER: Final = 16  # bytes, then token: two words before the payload
# Records start at multiples of this (the header's size, which divides the ring's), so a
# record's header never wraps around the ring's end; its payload may.
_RECORD_ALIGN: Final = _RECORD_HEADER

# Field layouts (offsets from a slot's first field, which is the sequence number).
_SEQ = 0
# counter, up_down_counter: the int part, the float part, 1 once a float was added
_INT_SUM, _FLOAT_SUM, _HAD_FLOAT = 1, 2, 3
# gauge: the value, 1 when it is an int, its time (CLOCK_MONOTONIC ns, one clock per host)
_VALUE, _IS_INT, _SET_AT = 1, 2, 3
# histogram: count, sum, min, max, then one count per bucket
_COUNT, _SUM, _MIN, _MAX, _BUCKETS = 1, 2, 3, 4, 5

_FIELD_WORDS: Final = {"counter": 4, "up_down_counter": 4, "gauge": 4}
#: How many times the parent re-reads a slot it saw mid-update before taking it as is (a
#: child killed inside an update never finishes it).
_READ_ATTEMPTS: Final = 100

_NO_ATTRIBUTES: Final[frozenset[Any]] = frozenset()
_INFINITY: Final = float("inf")
#: An instrument's kind as `RegionWriter.keep_call` tells them apart (by identity).
_KIND_GAUGE: Final = "gauge"
_KIND_SUM: Final = "sum"
_KIND_HISTOGRAM: Final = "histogram"


def new_region(creator_pid: int) -> mmap.mmap:
    """A zeroed region, shared with every child forked after this call."""
    region = mmap.mmap(-1, REGION_BYTES + SPAN_RING_BYTES)
    words = memoryview(region).cast("q")
    words[_MAGIC] = MAGIC
    words[_CREATOR] = creator_pid
    words[_END] = HEADER_WORDS
    words.release()
    return region


def region_creator(region: mmap.mmap) -> int:
    """The pid of the process that made `region` (the one that reads it)."""
    with memoryview(region).cast("q") as words:
        return int(words[_CREATOR])


class InstrumentMeta(NamedTuple):
    """What the parent needs to export a child's series as its own instrument's."""

    pipeline: int
    scope: tuple[str, str | None, str | None]
    name: str
    kind: str
    unit: str
    description: str
    bounds: tuple[float, ...] | None
    gauge_mode: str | None


class RegionWriter:
    """The child's side of its region. Thread-safe: one lock for every update.

    The lock is the child's own (the region is made at the fork), held for a few word
    updates; nothing under it logs or calls the SDK.
    """

    def __init__(self, region: mmap.mmap) -> None:
        self._region = region
        self._words = memoryview(region).cast("q")
        self._floats = memoryview(region).cast("d")
        self._lock = threading.Lock()
        self._instruments: dict[tuple[Any, ...], SeriesWriter] = {}
        self._words[_WRITER] = os.getpid()

    def instrument(self, meta: InstrumentMeta) -> Callable[..., None]:
        """The record method (`(value, attributes)`, as the SDK's) of one instrument; one
        instrument's series keep their slots however many meters ask for it."""
        # One instrument per name and kind, as the SDK has: the first declaration's unit,
        # buckets and mode stand (two slots of one series would hide each other).
        key = (meta.pipeline, meta.scope, meta.name, meta.kind)
        with self._lock:
            writer = self._instruments.get(key)
            if writer is None:
                writer = self._instruments[key] = SeriesWriter(self, meta)
        if meta.kind == "histogram":
            return writer.record
        if meta.kind == "gauge":
            return writer.set
        return writer.add

    def keep_call(
        self,
        kept: Mapping[str, tuple[SeriesWriter, float]],
        items: Mapping[Any, Any],
        attributes: Mapping[str, object] | None,
    ) -> dict[Any, Any]:
        """Write the values of one `record_metrics` call into their series' slots under
        one hold of the lock; return the rest, for the caller's full path (each value's
        record method).

        `kept` maps a key to its instrument's writer and the lowest value its kind takes.
        Written here: a value of a series that has its slot, a float in [lowest, inf) or
        an int in [lowest, int64]; a sum's int goes the full path, through its int64
        guard. What the record methods would write, without a call per value.
        """
        rest: dict[Any, Any] = {}
        key = _key_of(attributes)
        words = self._words
        floats = self._floats
        now = monotonic_ns()
        lock = self._lock
        lock.acquire()  # not `with`: that costs a lock ~80 ns more per hold
        try:
            for name, value in items.items():
                entry = kept.get(name)
                if entry is None:
                    rest[name] = value
                    continue
                writer, lowest = entry
                field = writer._fields.get(key)
                value_type = type(value)
                if field is None or field < 0:  # a slot to allocate, or none to have
                    rest[name] = value
                    continue
                if value_type is float:
                    if not lowest <= value < _INFINITY:
                        rest[name] = value
                        continue
                elif value_type is not int or not lowest <= value <= INT64_MAX:
                    rest[name] = value
                    continue
                kind = writer.kind
                if kind is _KIND_HISTOGRAM:
                    words[field] += 1
                    words[field + _COUNT] += 1
                    floats[field + _SUM] += value
                    if value < floats[field + _MIN]:
                        floats[field + _MIN] = value
                    if value > floats[field + _MAX]:
                        floats[field + _MAX] = value
                    words[field + _BUCKETS + bisect.bisect_left(writer._bounds, value)] += 1
                elif kind is _KIND_GAUGE:
                    words[field] += 1
                    if value_type is int:
                        words[field + _VALUE] = value
                        words[field + _IS_INT] = 1
                    else:
                        floats[field + _VALUE] = value
                        words[field + _IS_INT] = 0
                    words[field + _SET_AT] = now
                elif value_type is float:
                    words[field] += 1
                    floats[field + _FLOAT_SUM] += value
                    words[field + _HAD_FLOAT] = 1
                else:
                    rest[name] = value
                    continue
                words[field] += 1
        finally:
            lock.release()
        return rest

    def append_record(self, token: int, payload: bytes) -> bool:
        """Append one span record of pipeline `token` to the ring; False (and counted)
        when the room the parent has not taken back yet is too small."""
        size = _record_size(len(payload))
        words = self._words
        with self._lock:
            written = int(words[_SPANS_WRITTEN])
            if written + size - int(words[_SPANS_TAKEN]) > SPAN_RING_BYTES:
                words[_SPANS_DROPPED] += 1
                return False
            at = written % SPAN_RING_BYTES  # a multiple of _RECORD_ALIGN
            words[(_RING_START + at) // 8] = len(payload)
            words[(_RING_START + at) // 8 + 1] = token
            _ring_write(self._region, (at + _RECORD_HEADER) % SPAN_RING_BYTES, payload)
            words[_SPANS_WRITTEN] = written + size  # published: the parent may take it
        return True

    def allocate(
        self,
        meta: InstrumentMeta,
        attributes: Mapping[str, object] | None,
        fields: dict[frozenset[Any] | None, int],
        key: frozenset[Any] | None,
    ) -> int:
        """The first field's word of series `key` of `meta` (noted in `fields`): a slot
        appended for it unless a thread just did, or -1 when the region is full (the
        series is counted as dropped)."""
        encoded = _encode_meta(meta, attributes)
        meta_words = _words_for(len(encoded))
        if meta.kind == "histogram":
            field_words = _BUCKETS + len(meta.bounds or ()) + 1
        else:
            field_words = _FIELD_WORDS[meta.kind]
        size = 2 + meta_words + field_words
        words = self._words
        with self._lock:
            known = fields.get(key)
            if known is not None:
                return known
            start = words[_END]
            if start + size > _SERIES_WORDS:
                words[_DROPPED] += 1
                fields[key] = -1
                return -1
            words[start] = size
            words[start + 1] = len(encoded)
            first_byte = (start + 2) * 8
            self._region[first_byte : first_byte + len(encoded)] = encoded
            field = start + 2 + meta_words
            if meta.kind == "histogram":
                self._floats[field + _MIN] = float("inf")
                self._floats[field + _MAX] = float("-inf")
            words[_END] = start + size  # published: the parent may read it from now on
            fields[key] = field
        return field


class SeriesWriter:
    """One instrument's series in the child's region: series key -> first field word."""

    __slots__ = ("_bounds", "_fields", "_floats", "_lock", "_meta", "_words", "kind", "region")

    def __init__(self, region: RegionWriter, meta: InstrumentMeta) -> None:
        self.region = region
        self._meta = meta
        #: How `RegionWriter.keep_call` writes its values (one of the `_KIND_` names).
        self.kind = {"gauge": _KIND_GAUGE, "histogram": _KIND_HISTOGRAM}.get(meta.kind, _KIND_SUM)
        self._bounds = meta.bounds or ()
        self._words = region._words
        self._floats = region._floats
        self._lock = region._lock
        self._fields: dict[frozenset[Any] | None, int] = {}

    def _field(self, attributes: Mapping[str, object] | None) -> int:
        key = _key_of(attributes)
        field = self._fields.get(key)
        if field is None:
            field = self.region.allocate(self._meta, attributes, self._fields, key)
        return field

    def add(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        field = self._field(attributes)
        if field < 0:
            return
        words = self._words
        with self._lock:
            words[field] += 1
            if type(value) is int:
                words[field + _INT_SUM] += value
            else:
                self._floats[field + _FLOAT_SUM] += value
                words[field + _HAD_FLOAT] = 1
            words[field] += 1

    def set(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        field = self._field(attributes)
        if field < 0:
            return
        words = self._words
        now = monotonic_ns()
        with self._lock:
            words[field] += 1
            if type(value) is int:
                words[field + _VALUE] = value
                words[field + _IS_INT] = 1
            else:
                self._floats[field + _VALUE] = value
                words[field + _IS_INT] = 0
            words[field + _SET_AT] = now
            words[field] += 1

    def record(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        field = self._field(attributes)
        if field < 0:
            return
        # The SDK's rule: a value equal to a boundary counts in the bucket it closes.
        bucket = bisect.bisect_left(self._bounds, value)
        words = self._words
        floats = self._floats
        with self._lock:
            words[field] += 1
            words[field + _COUNT] += 1
            floats[field + _SUM] += value
            if value < floats[field + _MIN]:
                floats[field + _MIN] = value
            if value > floats[field + _MAX]:
                floats[field + _MAX] = value
            words[field + _BUCKETS + bucket] += 1
            words[field] += 1


def _words_for(length: int) -> int:
    """The 8-byte words `length` bytes take."""
    return -(-length // 8)


def _record_size(length: int) -> int:
    """The ring bytes a span record with a `length`-byte payload takes."""
    return _RECORD_HEADER + -(-length // _RECORD_ALIGN) * _RECORD_ALIGN


def _ring_write(region: mmap.mmap, at: int, payload: bytes) -> None:
    """Copy `payload` into the span ring from ring offset `at`, wrapping at its end."""
    first = min(len(payload), SPAN_RING_BYTES - at)
    region[_RING_START + at : _RING_START + at + first] = payload[:first]
    if first < len(payload):
        region[_RING_START : _RING_START + len(payload) - first] = payload[first:]


def _ring_read(region: mmap.mmap, at: int, length: int) -> bytes:
    """`length` bytes of the span ring from ring offset `at`, wrapping at its end."""
    first = min(length, SPAN_RING_BYTES - at)
    data = region[_RING_START + at : _RING_START + at + first]
    if first < length:
        data += region[_RING_START : _RING_START + length - first]
    return data


def _key_of(attributes: Mapping[str, object] | None) -> frozenset[Any] | None:
    """The series key a series' slot is found by: the one `record_metrics` keyed the
    call's attributes with, else keyed here."""
    if not attributes:
        return _NO_ATTRIBUTES
    if type(attributes) is SeriesAttributes:
        return attributes.series_key
    try:
        return series_key(attributes)
    except TypeError:  # cleaned attributes are hashable; anything else shares one slot
        return None


#: The clock gauge values are ordered by: one per machine, shared by its processes.
monotonic_ns: Final = time.monotonic_ns


def _encode_meta(meta: InstrumentMeta, attributes: Mapping[str, object] | None) -> bytes:
    document = {
        "p": meta.pipeline,
        "s": list(meta.scope),
        "n": meta.name,
        "k": meta.kind,
        "u": meta.unit,
        "d": meta.description,
        "b": None if meta.bounds is None else list(meta.bounds),
        "m": meta.gauge_mode,
        "a": [[key, value] for key, value in (attributes or {}).items()],
    }
    return json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode(
        "ascii"
    )


def _decode_meta(encoded: bytes) -> tuple[InstrumentMeta, dict[str, Any]]:
    document = json.loads(encoded)
    bounds = document["b"]
    meta = InstrumentMeta(
        pipeline=document["p"],
        scope=tuple(document["s"]),
        name=document["n"],
        kind=document["k"],
        unit=document["u"],
        description=document["d"],
        bounds=None if bounds is None else tuple(bounds),
        gauge_mode=document["m"],
    )
    attributes = {
        key: tuple(value) if type(value) is list else value for key, value in document["a"]
    }
    return meta, attributes


class SlotInfo(NamedTuple):
    """One published slot, as the parent decoded it."""

    meta: InstrumentMeta
    attributes: dict[str, Any]
    field: int
    #: The series across processes: (pipeline, scope, instrument name, kind, the
    #: attributes' key by value and type, as the data model has series: 1 and True differ).
    series_id: tuple[int, tuple[str, str | None, str | None], str, str, frozenset[Any]]


class RegionReader:
    """The parent's side of one child's region: the slots it published and their values."""

    def __init__(self, region: mmap.mmap) -> None:
        self._region = region
        self._words = memoryview(region).cast("q")
        self._floats = memoryview(region).cast("d")
        self._read_up_to = HEADER_WORDS
        self.slots: list[SlotInfo] = []

    @property
    def writer_pid(self) -> int:
        """The child's pid, or 0 while it has not started writing."""
        return int(self._words[_WRITER])

    @property
    def dropped_series(self) -> int:
        """Series the child could not keep because the region was full."""
        return int(self._words[_DROPPED])

    @property
    def dropped_span_records(self) -> int:
        """Span records the child dropped because the ring was full."""
        return int(self._words[_SPANS_DROPPED])

    def take_records(self) -> list[tuple[int, bytes]]:
        """The span records (token, payload) published since the last call, oldest first;
        their room goes back to the child."""
        words = self._words
        taken = int(words[_SPANS_TAKEN])
        written = int(words[_SPANS_WRITTEN])
        records = []
        while taken < written:
            at = taken % SPAN_RING_BYTES
            length = int(words[(_RING_START + at) // 8])
            token = int(words[(_RING_START + at) // 8 + 1])
            start = (at + _RECORD_HEADER) % SPAN_RING_BYTES
            records.append((token, _ring_read(self._region, start, length)))
            taken += _record_size(length)
        words[_SPANS_TAKEN] = taken  # the parent's one write
        return records

    def refresh(self) -> list[SlotInfo]:
        """Decode the slots published since the last call; return every slot."""
        words = self._words
        end = int(words[_END])
        at = self._read_up_to
        while at < end:
            size = int(words[at])
            length = int(words[at + 1])
            first_byte = (at + 2) * 8
            meta, attributes = _decode_meta(bytes(self._region[first_byte : first_byte + length]))
            field = at + 2 + _words_for(length)
            series_id = (
                meta.pipeline,
                meta.scope,
                meta.name,
                meta.kind,
                typed_series_key(attributes),
            )
            self.slots.append(SlotInfo(meta, attributes, field, series_id))
            at += size
        self._read_up_to = at
        return self.slots

    def updates(self, slot: SlotInfo) -> int:
        """How many writes the child finished on `slot` (-1 while one is under way)."""
        sequence = int(self._words[slot.field])
        return -1 if sequence % 2 else sequence // 2

    def read(self, slot: SlotInfo, *, ended: bool = False) -> tuple[int, tuple[Any, ...]] | None:
        """The slot's updates and values, as one consistent snapshot (see the module
        docstring), or None while the child was inside an update at every attempt. Values:
        sums (total,); gauges (value, set_at); histograms (count, sum, min, max, bucket
        counts). `updates` counts the child's finished writes.

        With `ended` (the child has exited), a slot left inside an update (the child was
        killed there) is taken as it is, counted as one more write.
        """
        words = self._words
        field = slot.field
        for _ in range(_READ_ATTEMPTS):
            before = int(words[field])
            if before % 2 == 0:
                values = self._fields(slot.meta, field)
                if int(words[field]) == before:
                    return (before // 2, values)
        if ended:
            return (int(words[field]) // 2 + 1, self._fields(slot.meta, field))
        return None

    def _fields(self, meta: InstrumentMeta, field: int) -> tuple[Any, ...]:
        words = self._words
        floats = self._floats
        if meta.kind == "histogram":
            buckets = len(meta.bounds or ()) + 1
            start = field + _BUCKETS
            return (
                int(words[field + _COUNT]),
                float(floats[field + _SUM]),
                float(floats[field + _MIN]),
                float(floats[field + _MAX]),
                tuple(words[start : start + buckets]),
            )
        if meta.kind == "gauge":
            value: int | float = (
                int(words[field + _VALUE])
                if words[field + _IS_INT]
                else float(floats[field + _VALUE])
            )
            return (value, int(words[field + _SET_AT]))
        total: int | float = int(words[field + _INT_SUM])
        if words[field + _HAD_FLOAT]:
            total = total + float(floats[field + _FLOAT_SUM])
        return (total,)

    def release(self) -> None:
        """Let go of the region (the child's mapping, if it still lives, stays)."""
        self._words.release()
        self._floats.release()
        with contextlib.suppress(BufferError):  # a writer's view lives here: the GC unmaps
            self._region.close()
