"""Which attribute sets are one series: the one series key of `record_metrics`.

The SDK keeps one series per distinct key of the attributes it is given, and its releases
differ in that key: older ones use `frozenset(attributes.items())`, in which the values
1, True and 1.0 (equal in Python) are one; newer ones key each value with its type, so
`{"k": 1}`, `{"k": True}` and `{"k": 1.0}` are three series, as OpenTelemetry's data
model has them. Two parts of lens count series themselves and must count them as the SDK
keeps them: the cardinality limit (counting fewer would let more series through than the
limit) and the coalescing buffer (one entry must be one SDK series, or a gauge's last
value could be handed over out of order). Both key with `series_key`.

`series_key` follows the installed SDK once a pipeline asked it
(`nemo.lens._sdk._coalescing.sdk_keys_by_type`, at setup, before any limit is set); until
then it keys by type, the data model's rule. `record_metrics` keys a call's attributes
once (`SeriesAttributes`), whatever number of values it records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

# Marks a value whose series key carries its type (see `_typed_value`); never equal to
# any attribute value.
_TYPED: Final = object()


def _typed_value(value: object) -> object:
    """`value` with its type, so 1, True and 1.0 (equal in Python) key apart."""
    if type(value) is tuple:  # cleaned sequences hold items of one type
        return (_TYPED, tuple, type(value[0]) if value else None, value)
    return (_TYPED, type(value), value)


def plain_series_key(attributes: Mapping[str, object]) -> frozenset[Any]:
    """The series an attribute set records on where the SDK keys by `frozenset(items)`."""
    return frozenset(attributes.items())


def typed_series_key(attributes: Mapping[str, object]) -> frozenset[Any]:
    """The series where the SDK keys by value and type (1, True and 1.0 are three series).

    Strings and ints cannot be confused with each other, so only other values are typed.
    """
    for value in attributes.values():
        value_type = type(value)
        if value_type is not str and value_type is not int:
            return frozenset(
                [
                    (key, item if type(item) is str or type(item) is int else _typed_value(item))
                    for key, item in attributes.items()
                ]
            )
    return frozenset(attributes.items())


#: The installed SDK's rule (see the module docstring). Read on every keying, so that the
#: limit and the buffer always key alike.
series_key: Callable[[Mapping[str, object]], frozenset[Any]] = typed_series_key


def follow_sdk(keyed_by_type: bool) -> None:
    """Key series as the installed SDK does: by value and type, or by `frozenset(items)`."""
    global series_key
    series_key = typed_series_key if keyed_by_type else plain_series_key
    _forget_known_sets()


class SeriesAttributes(dict[str, object]):
    """A copy of a series' attributes that carries its series key.

    `record_metrics` gets one per call with attributes where the limit or a buffer keys
    them, and hands it to every record method of the call: each reads `series_key`
    instead of keying again, and the SDK gets a dict, as it expects. For a set of strs
    and ints, one per series, made from the first call's attributes and shared by every
    later call of that series (nothing ever changes it), so a buffered interval holds no
    copy of its own and every dict keyed by the series finds its key by identity; a copy,
    so the caller may change its own dict before the values reach the SDK. Get it with
    `keyed`.
    """

    __slots__ = ("series_key",)

    series_key: frozenset[Any] | None  # None for a set that cannot be hashed


def keyed(attributes: Mapping[str, object]) -> SeriesAttributes:
    """The `SeriesAttributes` of `attributes`' series (by the installed SDK's rule): for a
    set of strs and ints, the one made for its series before, else a copy of
    `attributes`; never raises for an unhashable value (cleaned attributes never hold
    one): its key is None."""
    for value in attributes.values():
        value_type = type(value)
        if value_type is not str and value_type is not int:
            # Equal keys may hold other values here (1 and True under the plain rule,
            # 0.0 and -0.0 under both), and the SDK keeps the first set it is given.
            return _copied(attributes)
    key = frozenset(attributes.items())  # a set of strs and ints: its key by either rule
    known = _known_sets.get(key)
    if known is not None:
        return known
    copied = SeriesAttributes(attributes)
    copied.series_key = key
    if len(_known_sets) >= _KNOWN_SETS_MAX:  # past it, the sets in use come back first
        _forget_known_sets()
    _known_sets[key] = copied
    if len(copied) == 1:
        (item,) = copied.items()
        _known_pairs[item] = copied
    return copied


def known_set(attributes: object) -> SeriesAttributes | None:
    """The `SeriesAttributes` `keyed` made before for a dict equal to `attributes`, where
    both hold only str keys and str or int values, else None; never raises.

    `keyed` is given cleaned attributes (`record_metrics`), and a set of exactly these
    types equal to a cleaned one is the same content, so it needs no cleaning again: a
    call whose set is known skips both the cleaning and the keying.
    """
    if type(attributes) is not dict:
        return None
    if len(attributes) == 1:  # the usual one attribute: its item finds it, no set made
        (item,) = attributes.items()
        value_type = type(item[1])
        if type(item[0]) is str and (value_type is str or value_type is int):
            return _known_pairs.get(item)
        return None
    for key, value in attributes.items():
        value_type = type(value)
        if type(key) is not str or (value_type is not str and value_type is not int):
            return None
    return _known_sets.get(frozenset(attributes.items()))


def _copied(attributes: Mapping[str, object]) -> SeriesAttributes:
    copied = SeriesAttributes(attributes)
    try:
        copied.series_key = series_key(copied)
    except TypeError:
        copied.series_key = None
    return copied


#: The `SeriesAttributes` of each series of strs and ints keyed lately, by its key: at
#: most `_KNOWN_SETS_MAX` (about 520-620 bytes each for one or two attributes, the one
#: attribute's item included; 80 MB at most), then it starts afresh.
_known_sets: dict[frozenset[Any], SeriesAttributes] = {}
#: The same, for the sets of one attribute, by their one item.
_known_pairs: dict[tuple[str, object], SeriesAttributes] = {}
_KNOWN_SETS_MAX: Final = 2**17


def _forget_known_sets() -> None:
    _known_sets.clear()
    _known_pairs.clear()
