"""`record_metrics`: the per-step recording path.

It sits in a training loop, so it never raises an `Exception` into the caller, logs each
distinct failure once, and keeps the common case to a few dictionary look-ups plus the
SDK call. Everything that can go wrong is handled on a slow path beside the loop.
"""

from __future__ import annotations

import inspect
import math
import numbers
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry.metrics import Meter, NoOpMeter

from nemo.lens import _forked_children, _inheritance
from nemo.lens._attributes import (
    INT64_MAX,
    INT64_MIN,
    attribute_key,
    attribute_value,
    is_encodable,
)
from nemo.lens._otel_internals import ProxyMeter, real_meter_of
from nemo.lens.instruments import _cardinality, _coalesce, _finished, _registry, _series
from nemo.lens.instruments._registry import GROUPS, UNREGISTERED, Emitter, MeterCache, MetricGroup
from nemo.lens.instruments._spec import (
    METRIC_KINDS,
    NON_NEGATIVE_KINDS,
    SUM_KINDS,
    MetricSpec,
)
from nemo.lens.semconv import OTEL_METRIC_OVERFLOW

# The largest int that converts to a float without OverflowError.
_FLOAT_INT_LIMIT: Final = int(sys.float_info.max)
_INFINITY: Final = math.inf

#: The keyword of `Meter.create_histogram` that carries a spec's buckets as the advisory
#: explicit bucket boundaries (opentelemetry-api 1.30.0 added it; 1.23 to 1.29 lack it,
#: and there `setup_telemetry` applies the buckets with SDK views instead).
ADVISORY_KEYWORD: Final = "explicit_bucket_boundaries_advisory"
#: Read once from the installed API's signature, never per call.
API_HAS_BUCKET_ADVISORY: Final = (
    ADVISORY_KEYWORD in inspect.signature(Meter.create_histogram).parameters
)


def record_metrics(
    meter: Any,
    group: str,
    values: Mapping[str, object] | None = None,
    /,
    *,
    attributes: Mapping[str, object] | None = None,
    **kwargs: object,
) -> None:
    """Record one value per key of a registered group; never raises an `Exception`.

    Args:
        meter: The meter to record on, usually `handle.meter`. A no-op meter, or the
            global proxy before an SDK provider is installed, returns at once.
        group: A name given to `register_metric_group`.
        values: Key -> value. Merged with `kwargs`; `kwargs` win.
        attributes: Attributes attached to every point of this call.
        **kwargs: Key -> value, for keys that are identifiers (`meter`, `group` and
            `values` included).

    `None` values are skipped silently. Anything else that cannot be recorded (an
    unknown group or key, a bool, NaN, infinity, a non-number, a negative value for a
    counter or histogram, a malformed attribute, an unusable meter, a failing SDK call)
    is skipped with one WARNING per distinct problem, and every other key still records.
    """
    try:
        meter_type = type(meter)
        if meter_type is NoOpMeter:
            return
        if meter_type is ProxyMeter:
            # The global proxy forwards once an SDK provider exists; record on the real
            # meter directly so the cache and the call skip the proxy.
            meter = real_meter_of(meter)
            if meter is None or type(meter) is NoOpMeter:
                return
        try:
            state = GROUPS.get(group)
        except TypeError:  # an unhashable group
            state = None
        if state is None:
            _warn_unregistered(group)
            return
        # No liveness check needed: the weak reference's callback drops the entry while
        # the meter is being freed, before its id can be reused.
        cache = state.meters.get(id(meter))
        if cache is None:
            cache = _attach(state, meter)
            if cache is None:
                return
        emitters = cache.emitters
        if not emitters and cache.silent:  # a meter this group records nothing on: warned
            return
        items: Mapping[Any, Any] = kwargs if values is None else _merge(state, values, kwargs)
        bounded = False
        if attributes is not None:
            # Without a limit, the cardinality limit costs this one read per call: the
            # plain emitters record. With one, the bounded emitters (see _cardinality)
            # do; the loop is the same either way.
            limited = _cardinality.limit
            if not limited and cache.buffer is None and not cache.child:
                attributes = _clean_attributes(state, attributes)
            else:
                # The limit and a coalescing buffer key the attributes once per call, as
                # one copy (see _series); a set keyed before is that copy, cleaned then.
                known = _series.known_set(attributes)
                if known is None:
                    attributes = _clean_attributes(state, attributes)
                    if attributes:
                        known = _series.keyed(attributes)
                if known is not None:
                    attributes = known
                    if limited:
                        emitters = cache.bounded
                        bounded = True
        keeper = cache.keeper
        if keeper is not None and cache.kept and not bounded:
            # The values a coalescing buffer (or a forked child's region) keeps as they
            # are, under one lock; the rest (a first record, a value to check or convert)
            # take the path below.
            items = keeper.keep_call(cache.kept, items, attributes)
            if not items:
                return
        for key, value in items.items():
            try:
                emit, emit_int, lowest = emitters[key]
            except KeyError:  # None, an undeclared key, or the key's first record
                if value is None:
                    continue
                entry = _create_emitter(state, cache, meter, key)
                if entry is not None and bounded:
                    entry = _bound_emitter(state, cache, meter, key, entry)
                if entry is None:
                    continue
                emit, emit_int, lowest = entry
            # One chained comparison per value: it fails for NaN, infinities, values below
            # the kind's floor and ints outside int64 (what OTLP carries); the slow path
            # sorts out which of those can still be recorded.
            value_type = type(value)
            if value_type is float:
                if not lowest <= value < _INFINITY:
                    value = _float_outside_fast_range(state, key, value, lowest)
                    if value is None:
                        continue
            elif value_type is int and lowest <= value <= INT64_MAX:
                emit = emit_int
            else:
                if value is None:
                    continue
                value = _coerce(state, key, value, lowest)
                if value is None:
                    continue
                if type(value) is int:
                    emit = emit_int
            try:
                emit(value, attributes)
            except Exception as exc:
                state.warnings.warn(
                    ("emit", key),
                    "record_metrics: recording key %r of group %r failed (%s: %s); the "
                    "value was dropped",
                    key,
                    state.name,
                    type(exc).__name__,
                    exc,
                )
    except Exception as exc:  # a defect in lens itself: still never break the step
        UNREGISTERED.warnings.warn(
            ("internal", type(exc).__name__),
            "record_metrics: unexpected %s (%s); the call was skipped",
            type(exc).__name__,
            exc,
        )


def _safe_repr(obj: object) -> str:
    try:
        return repr(obj)[:200]
    except Exception:
        return f"<{type(obj).__name__} with a failing repr>"


def _warn_unregistered(group: object) -> None:
    memory_key = group if type(group) is str else ("non-string", _safe_repr(group))
    UNREGISTERED.warnings.warn(
        memory_key,
        "record_metrics: metric group %s is not registered; nothing was recorded. "
        "Declare it with register_metric_group(); registered groups: %s",
        _safe_repr(group),
        sorted(GROUPS),
    )


def _attach(state: MetricGroup, meter: Any) -> MeterCache | None:
    """Create the cache for a meter seen for the first time, or None if unusable."""
    meter_id = id(meter)
    meters = state.meters

    def forget(ref: Any) -> None:
        cache = meters.get(meter_id)
        if cache is not None and cache.ref is ref:
            del meters[meter_id]

    try:
        ref = weakref.ref(meter, forget)
    except TypeError as exc:
        reason = f"it cannot be held weakly ({exc})"
    else:
        try:
            usable = all(
                callable(getattr(meter, create, None)) for create, _ in METRIC_KINDS.values()
            )
            reason = "it lacks the create_counter/create_gauge/create_histogram methods"
        except Exception as exc:  # an attribute look-up that raises
            usable = False
            reason = f"looking up its create methods failed ({type(exc).__name__}: {exc})"
        if usable:
            # In a forked child, a meter of a provider the parent had is never recorded
            # through (its SDK locks may be held for good); see nemo.lens._inheritance.
            inherited = _inheritance.is_inherited_meter(meter)
            finished = _finished.is_finished_meter(meter)
            buffer = None
            if not inherited:
                _inheritance.note_meter(meter)
                buffer = _coalesce.buffer_for(meter)
            with _registry.lock:
                cache = meters.get(meter_id)
                if cache is None:
                    cache = meters[meter_id] = MeterCache(ref)
                    cache.inherited = inherited
                    cache.finished = finished
                    cache.buffer = cache.keeper = buffer
            return cache
    state.warnings.warn(
        ("meter", type(meter).__qualname__),
        "record_metrics: %s of type %s cannot be used as a meter for group %r: %s; "
        "nothing was recorded",
        _safe_repr(meter),
        type(meter).__qualname__,
        state.name,
        reason,
    )
    return None


def _merge(state: MetricGroup, values: object, kwargs: dict[str, object]) -> Mapping[Any, Any]:
    """Merge the positional mapping with the keyword values, keywords winning."""
    if type(values) is dict:
        if not kwargs:
            return values
        merged: dict[object, object] = dict(values)
    elif isinstance(values, Mapping):
        merged = {}
        try:
            for key, value in values.items():
                merged[key] = value
        except Exception as exc:
            state.warnings.warn(
                ("values", "unreadable"),
                "record_metrics: the values mapping for group %r could not be read fully "
                "(%s: %s); the keys read so far still record",
                state.name,
                type(exc).__name__,
                exc,
            )
    else:
        state.warnings.warn(
            ("values", "non-mapping"),
            "record_metrics: values for group %r must be a mapping of key -> number, got "
            "%s; it was ignored and keyword values still record",
            state.name,
            type(values).__name__,
        )
        return kwargs
    merged.update(kwargs)
    return merged


def _create_emitter(
    state: MetricGroup, cache: MeterCache, meter: Any, key: object
) -> Emitter | None:
    """Return the record method and lowest value for `key`, creating its instrument once."""
    spec = state.spec_by_key.get(key) if type(key) is str else None
    if spec is None:
        if type(key) is str:
            state.warnings.warn(
                ("unknown-key", key),
                "record_metrics: key %r is not declared in group %r; it was skipped. "
                "Declared keys: %s",
                key,
                state.name,
                sorted(state.spec_by_key),
            )
        else:
            state.warnings.warn(
                ("values", "key-type"),
                "record_metrics: values for group %r hold a non-string key %s; it was "
                "skipped and the string keys still record",
                state.name,
                _safe_repr(key),
            )
        return None
    if cache.inherited:
        return _child_emitter(state, cache, meter, spec)
    if cache.finished:
        cache.silent = True
        state.warnings.warn(
            ("finished", type(meter).__qualname__),
            "record_metrics: the setup this meter belongs to was shut down "
            "(handle.shutdown()), so group %r is not recorded on it: its provider exports "
            "nothing more. Record through the handle of a new setup_telemetry.",
            state.name,
        )
        return None
    with _registry.lock:
        entry = cache.emitters.get(spec.key)
        # (A shutdown marking the meter finished empties the cache under the lock.)
        wanted = entry is None and spec.key not in cache.failed and not cache.finished
    if not wanted:
        return entry
    # The SDK call runs outside the registry lock: the SDK logs inside create_* (a
    # bucket conflict, a duplicate name), and a logging handler that records would
    # otherwise wait for ever on the lock its own thread holds, and so would fork().
    creating = _creating_here()
    marker = (id(cache), spec.key)
    if marker in creating:
        # A record of this key from inside its own creation (such a handler): dropped,
        # not created twice; the creation below goes on.
        state.warnings.warn(
            ("reentrant", spec.key),
            "record_metrics: key %r of group %r was recorded while its instrument was "
            "being created on this thread (by a logging handler the SDK's warning "
            "reached); that value was dropped",
            spec.key,
            state.name,
        )
        return None
    creating.add(marker)
    try:
        entry, error, advisory_error = _create_and_keep(state, cache, meter, spec)
    finally:
        creating.discard(marker)
    # Logged outside the registry lock, as every warning here.
    if advisory_error is not None:
        state.warnings.warn(
            ("advisory", spec.key),
            "record_metrics: %s rejected the buckets of key %r of group %r (%s: %s); the "
            "histogram %r is recorded with the default boundaries",
            type(meter).__qualname__,
            spec.key,
            state.name,
            type(advisory_error).__name__,
            advisory_error,
            spec.name,
        )
    if error is not None:
        state.warnings.warn(
            ("create", spec.key),
            "record_metrics: creating %s %r for key %r of group %r failed (%s: %s); this key "
            "is skipped on this meter until the group is registered again",
            spec.kind,
            spec.name,
            spec.key,
            state.name,
            type(error).__name__,
            error,
        )
    return entry


def _child_emitter(  # pragma: no cover - runs in forked children, which coverage skips
    state: MetricGroup, cache: MeterCache, meter: Any, spec: MetricSpec
) -> Emitter | None:
    """In a forked child, the entry recording `spec` on `meter`, a meter of the parent's
    pipeline, into this child's shared region (no SDK call: see `_forked_children`)."""
    with _registry.lock:
        entry = cache.emitters.get(spec.key)
    if entry is not None:
        return entry
    record = _forked_children.child_recorder(_inheritance.consumer_of(meter), meter, spec)
    if record is None:
        cache.silent = True
        state.warnings.warn(
            ("inherited", type(meter).__qualname__),
            "record_metrics: this process was forked from one that had this meter's "
            "provider, and that provider's pipeline does not take this process's values "
            "(it was not built by this process's parent, or it is shut down), so group %r "
            "is not recorded on it here: a child never records through its parent's SDK "
            "objects. Call setup_telemetry in this process and record through its handle.",
            state.name,
        )
        return None
    # The region's writer takes a call's values of this instrument at once.
    keeper = _forked_children.keeper_of(record)
    with _registry.lock:
        entry = cache.emitters.get(spec.key)
        if entry is None and not cache.finished:
            entry = cache.emitters[spec.key] = _emitter(state, spec, record)
            cache.child = True
            if keeper is not None:
                cache.keeper = keeper[0]
                cache.kept[spec.key] = (keeper[1], entry[2])
    return entry


def _create_and_keep(
    state: MetricGroup, cache: MeterCache, meter: Any, spec: MetricSpec
) -> tuple[Emitter | None, Exception | None, Exception | None]:
    """Create the instrument of `spec` on `meter` (no lock held) and keep its entry in
    `cache` (under the registry lock); return the entry, the creation's error and the
    advisory keyword's rejection."""
    create_name, record_name = METRIC_KINDS[spec.kind]
    error: Exception | None = None
    advisory_error: Exception | None = None
    instrument: Any = None
    direct: Callable[..., object] | None = None
    entry: Emitter | None = None
    buffer = cache.buffer
    try:
        instrument, advisory_error = _create_instrument(meter, spec, create_name)
        if buffer is None or not buffer.coalesces(spec.kind):
            direct = getattr(instrument, record_name)
    except Exception as exc:
        error = exc
    with _registry.lock:
        if error is None:
            entry = cache.emitters.get(spec.key)  # another thread's, created meanwhile
            if entry is None and not cache.finished:
                if direct is not None:
                    entry = cache.emitters[spec.key] = _emitter(state, spec, direct)
                elif buffer is not None:  # dict work only, no SDK call
                    # The buffer keeps int sums within int64 itself.
                    pending = buffer.instrument(instrument, record_name, spec.kind)
                    entry = _emitter(state, spec, pending.keep, guard=False)
                    cache.emitters[spec.key] = entry
                    cache.kept[spec.key] = (pending, entry[2])
        if error is not None:
            cache.failed.add(spec.key)
    return entry, error, advisory_error


def _emitter(
    state: MetricGroup, spec: MetricSpec, emit: Callable[..., object], *, guard: bool = True
) -> Emitter:
    """The entry `record_metrics` keeps for a key whose instrument records with `emit`
    (for a sum, behind the int64 guard unless `guard` is false)."""
    # The floor is also the fast path's int64 bound for signed kinds.
    lowest = 0 if spec.kind in NON_NEGATIVE_KINDS else INT64_MIN
    emit_int = emit
    if guard and spec.kind in SUM_KINDS:
        # Only ints can pass int64; floats skip the guard's extra call.
        emit_int = _Int64Sum(emit, _sum_warning(state, spec.key))
    return emit, emit_int, lowest


# Per thread: the (meter cache, key) pairs whose instrument this thread is creating.
_creating = threading.local()


def _creating_here() -> set[tuple[int, str]]:
    pairs: set[tuple[int, str]] | None = getattr(_creating, "pairs", None)
    if pairs is None:
        pairs = _creating.pairs = set()
    return pairs


def _bound_emitter(
    state: MetricGroup, cache: MeterCache, meter: Any, key: str, entry: Emitter
) -> Emitter:
    """Return `entry` wrapped to apply the cardinality limit, wrapping it once per key."""
    emit_int, lowest = entry[1:]
    name = state.spec_by_key[key].name
    try:
        scope = repr(meter.name)
    except Exception:  # a meter without a readable name: its type names it instead
        scope = type(meter).__qualname__

    def warn() -> None:
        state.warnings.warn(
            ("cardinality", key, scope),
            "record_metrics: key %r of group %r (series %r, meter %s) reached "
            "metric_cardinality_limit=%d distinct attribute sets; each further new set is "
            "recorded on the overflow series {%r: True}, and the sets seen so far keep "
            "their own",
            key,
            state.name,
            name,
            scope,
            _cardinality.limit,
            OTEL_METRIC_OVERFLOW,
        )

    per_collection = _cardinality.counts_per_collection(meter, state.spec_by_key[key].kind)
    with _registry.lock:
        bounded = cache.bounded.get(key)
        if bounded is None:
            # One wrapper for both (it keeps the attribute sets seen); the int path's
            # record method takes floats too.
            limited = _cardinality.BoundedEmitter(emit_int, warn, per_collection)
            bounded = cache.bounded[key] = (limited, limited, lowest)
    return bounded


def _create_instrument(
    meter: Any, spec: MetricSpec, create_name: str
) -> tuple[Any, Exception | None]:
    """Create the instrument of `spec` on `meter`, its buckets as the advisory if any.

    Returns the instrument and, when the meter rejected the advisory keyword (a wrapper
    written against the older signature), the `TypeError` it raised: the histogram is then
    created without the buckets rather than losing the key.
    """
    create = getattr(meter, create_name)
    if spec.buckets is None or not API_HAS_BUCKET_ADVISORY:
        return create(spec.name, unit=spec.unit, description=spec.description), None
    try:
        advised = {ADVISORY_KEYWORD: spec.buckets}
        return create(spec.name, unit=spec.unit, description=spec.description, **advised), None
    except TypeError as exc:
        return create(spec.name, unit=spec.unit, description=spec.description), exc


def _float_outside_fast_range(
    state: MetricGroup, key: str, value: float, lowest: int
) -> float | None:
    """A float the fast path did not pass: recordable if finite and above the kind's floor
    (a signed kind's fast-path floor is int64's, which finite floats may pass)."""
    if value - value != 0.0:
        _warn_value(state, key, value, "it is not finite")
        return None
    if lowest == 0 and value < 0:
        _warn_value(state, key, value, "this kind only accepts values >= 0")
        return None
    return value


def _coerce(state: MetricGroup, key: str, value: object, lowest: int) -> int | float | None:
    """Turn any accepted real number into a Python int or float, or warn and give None.

    An integer outside int64 (`2**63`, `numpy.uint64(2**64 - 1)`) becomes a float: OTLP
    carries integers as int64, and one such int would make every export of the batch fail.
    """
    reason = "it is not a real number"
    try:
        number: int | float
        if isinstance(value, bool):
            reason = "bool is not accepted as a number"
        elif isinstance(value, numbers.Real):
            number = int(value) if isinstance(value, numbers.Integral) else float(value)
            if isinstance(number, int) and not INT64_MIN <= number <= INT64_MAX:
                number = (
                    float(number) if -_FLOAT_INT_LIMIT <= number <= _FLOAT_INT_LIMIT else _INFINITY
                )
            if number - number != 0:
                reason = "it is not finite, or too large for a float"
            elif lowest == 0 and number < 0:
                reason = "this kind only accepts values >= 0"
            else:
                return number
    except Exception as exc:
        reason = f"converting it failed ({type(exc).__name__})"
    _warn_value(state, key, value, reason)
    return None


class _Int64Sum:
    """A counter's `add` that keeps the running int sum inside int64.

    The SDK sums the ints it is given; once a sum passes int64, every export of every
    group fails to encode. This tracks a bound on the sum (the total of the magnitudes
    added, over all attribute sets) and, once adding a value would pass int64, hands that
    and every later value to the SDK as a float, which turns the sum into a double: the
    series stays exportable and loses nothing but integer precision beyond 2**53.
    """

    __slots__ = ("_add", "_as_float", "_lock", "_total", "_warn")

    def __init__(self, add: Callable[..., object], warn: Callable[[], None]) -> None:
        self._add = add
        self._warn = warn
        self._total = 0
        self._as_float = False
        self._lock = threading.Lock()

    def __call__(self, value: float, attributes: Mapping[str, object] | None = None) -> None:
        if type(value) is int and not self._as_float:
            lock = self._lock
            lock.acquire()  # not `with`: that costs a lock ~80 ns more per hold
            try:
                total = self._total + (value if value >= 0 else -value)
                switched = total > INT64_MAX
                if switched:
                    self._as_float = True
                else:
                    self._total = total
            finally:
                lock.release()
            if switched:
                self._warn()
        if self._as_float:
            value = float(value)
        self._add(value, attributes)


def _sum_warning(state: MetricGroup, key: str) -> Callable[[], None]:
    def warn() -> None:
        state.warnings.warn(
            ("int64-sum", key),
            "record_metrics: the running sum of key %r of group %r would pass int64, which "
            "OTLP cannot carry; its values are recorded as floats from now on",
            key,
            state.name,
        )

    return warn


def _warn_value(state: MetricGroup, key: str, value: object, reason: str) -> None:
    state.warnings.warn(
        ("value", key),
        "record_metrics: value %s for key %r of group %r was skipped: %s",
        _safe_repr(value),
        key,
        state.name,
        reason,
    )


def _clean_attributes(state: MetricGroup, attributes: object) -> Mapping[str, object] | None:
    """Return the attributes to send, dropping entries the SDK cannot carry."""
    if type(attributes) is dict:
        # The common case: every entry already valid, so pass the caller's dict as is.
        for key, value in attributes.items():
            if type(key) is not str or not key or not key.isascii():
                break
            value_type = type(value)
            if value_type is str:
                if not value.isascii():  # maybe a lone surrogate: the slow path checks
                    break
            elif value_type is int:
                if not INT64_MIN <= value <= INT64_MAX:
                    break
            elif value_type is not float and value_type is not bool:
                break
        else:
            return attributes
    elif not isinstance(attributes, Mapping):
        state.warnings.warn(
            ("attributes", "non-mapping"),
            "record_metrics: attributes for group %r must be a mapping, got %s; the values "
            "were recorded without attributes",
            state.name,
            type(attributes).__name__,
        )
        return None
    cleaned: dict[str, object] = {}
    dropped: list[str] = []
    try:
        entries = list(attributes.items())
    except Exception:
        entries = []
        dropped.append("<unreadable mapping>")
    replaced: list[str] = []
    for key, value in entries:
        clean_key = attribute_key(key)
        clean_value = attribute_value(value)
        if clean_key is not None and clean_value is not None:
            cleaned[clean_key] = clean_value
            if not _is_encodable_entry(key, value):
                replaced.append(clean_key)
        else:
            dropped.append(_safe_repr(key))
    if replaced:
        state.warnings.warn(
            ("attributes", "replaced"),
            "record_metrics: attributes %s for group %r held characters that cannot be "
            "encoded (lone surrogates, as os.fsdecode gives for undecodable bytes); each "
            "was replaced by U+FFFD",
            ", ".join(replaced),
            state.name,
        )
    if dropped:
        state.warnings.warn(
            ("attributes", "entry"),
            "record_metrics: attributes %s for group %r were dropped: keys must be non-empty "
            "strings and values str, bool, int, float or a sequence of one of those; the "
            "values were still recorded",
            ", ".join(dropped),
            state.name,
        )
    return cleaned


def _is_encodable_entry(key: object, value: object) -> bool:
    """False when the key, or a str in the value, needed a character replaced."""
    texts = [key, *(value if isinstance(value, (list, tuple)) else (value,))]
    return all(is_encodable(text) for text in texts if isinstance(text, str))
