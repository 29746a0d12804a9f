"""The process-wide span-group gate that `managed_span` and `trace_fn` read.

The enabled groups are one immutable frozenset, rebound on every write, so a reader does a
single membership test and takes no lock. Writers take one lock. The set is either pinned
(`set_enabled_span_groups`, the strict path) or derived from a stored spec that is
re-resolved against `SpanRegistry` whenever the registry changes (`set_span_group_spec`,
the lenient path; setup stores the spec with where `from_env` read it, so that its
warnings name that variable).

This module imports nothing from OpenTelemetry.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable

from nemo.lens._fork_hooks import hold_lock_across_fork
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensTypeError
from nemo.lens.groups import SpanRegistry, _on_registry_change, _source_note, _SpecSource

__all__ = [
    "enabled_span_groups",
    "get_pp_trace_carrier",
    "is_span_group_enabled",
    "pending_span_groups",
    "refresh_enabled_span_groups",
    "set_enabled_span_groups",
    "set_pp_trace_carrier",
    "set_span_group_spec",
]

_logger = logging.getLogger(__name__)

# Rebound, never mutated: readers see either the old set or the new one.
_enabled: frozenset[str] = frozenset()
_pending: frozenset[str] = frozenset()
# The lenient spec last stored, None while the set is pinned; and where it was read.
_spec: str | None = None
_spec_source: _SpecSource = None
# Situations already warned about since the set was last pinned.
_warnings = WarnOnce(_logger, "span_groups resolution")
_pp_trace_carrier: dict[str, str] | None = None

# Lock order: this lock, then SpanRegistry's. Registered for fork after `groups` (which
# this module imports), so it is also taken first before a fork.
_lock = threading.Lock()
hold_lock_across_fork("span state lock", sys.modules[__name__], "_lock")


def is_span_group_enabled(group: str) -> bool:
    """Return True if spans of `group` are recorded; False before setup and for unknown names."""
    try:
        return group in _enabled
    except TypeError:  # an unhashable name names no group
        return False


def set_enabled_span_groups(groups: frozenset[str]) -> None:
    """Pin the enabled groups to `groups` and drop any stored spec.

    No name is validated; the last write wins. `frozenset()` turns every group off.

    Raises:
        TypeError: `groups` is a bare string or not iterable.
    """
    global _enabled, _pending, _spec, _spec_source
    pinned = _as_frozenset(groups)
    with _lock:
        _enabled = pinned
        _pending = frozenset()
        _spec = None
        _spec_source = None
        _warnings.clear()


def set_span_group_spec(spec: str) -> None:
    """Store a span-group spec and resolve it leniently against `SpanRegistry`.

    Tokens nobody has registered stay pending and become enabled when a namespace registers
    them. Never raises. Logs one warning when a token is unknown, the registry is empty or
    the spec selects nothing, naming the bad tokens and what is registered; the same
    situation is never warned twice, and a valid spec never warns.
    """
    _set_configured_span_group_spec(spec, None)


def _set_configured_span_group_spec(spec: str, source: _SpecSource) -> None:
    """`set_span_group_spec` for setup: its warnings, now and on every re-resolution, also
    name `source`, the variable `NemoLensConfig.from_env` read `spec` from."""
    global _spec, _spec_source
    if not isinstance(spec, str):
        _logger.warning(  # type: ignore[unreachable]  # callers ignoring hints
            "set_span_group_spec: spec must be a comma-separated string, got %s (%r); "
            "no span group is enabled",
            type(spec).__name__,
            spec,
        )
        spec = ""
        source = None
    with _lock:
        _spec, _spec_source = spec, source
        due = _resolve_stored_spec(spec, source)
    _log_due(due)


def refresh_enabled_span_groups() -> None:
    """Re-resolve the stored spec against `SpanRegistry`; a no-op while the set is pinned."""
    with _lock:
        if _spec is None:
            return
        due = _resolve_stored_spec(_spec, _spec_source)
    _log_due(due)


def _log_due(due: tuple[tuple[object, ...] | None, bool]) -> None:
    """Log what `_resolve_stored_spec` found due, after `_lock` was released (a logging
    handler may call back into lens)."""
    message, cap_reached = due
    if message is not None:
        _logger.warning(*message)
    if cap_reached:
        _warnings.log_cap()


def enabled_span_groups() -> frozenset[str]:
    """Return the enabled groups (diagnostics)."""
    return _enabled


def pending_span_groups() -> frozenset[str]:
    """Return the spec tokens no namespace has registered yet (diagnostics)."""
    return _pending


def set_pp_trace_carrier(carrier: dict[str, str] | None) -> None:
    """Store the process-global pipeline-parallel trace carrier (None clears it)."""
    global _pp_trace_carrier
    with _lock:
        _pp_trace_carrier = carrier


def get_pp_trace_carrier() -> dict[str, str] | None:
    """Return the pipeline-parallel trace carrier last stored, or None."""
    return _pp_trace_carrier


def _resolve_stored_spec(spec: str, source: _SpecSource) -> tuple[tuple[object, ...] | None, bool]:
    """Resolve the stored `spec` (the caller holds `_lock`); return the warning that is due
    (naming `source`) or None, and whether the warning memory reached its cap: the caller
    logs both once it released `_lock`."""
    global _enabled, _pending
    enabled, pending = SpanRegistry.resolve(spec)
    _enabled, _pending = enabled, pending
    namespaces = SpanRegistry.namespaces()
    has_tokens = any(part.strip() for part in spec.split(","))
    if not has_tokens:
        return None, False
    if not namespaces:
        situation: tuple[str, frozenset[str]] = ("empty registry", pending)
        message: tuple[object, ...] = (
            "span_groups %r selects no span group: no namespace has registered groups in "
            "SpanRegistry yet (unknown tokens: %s). They stay pending until one registers.%s",
            spec,
            sorted(pending),
            _source_note(source),
        )
    elif pending:
        situation = ("unknown tokens", pending)
        message = (
            "span_groups %r names unknown span groups or presets %s; they stay pending "
            "until a namespace registers them%s. Registered groups: %s; presets: %s; "
            "namespaces: %s%s",
            spec,
            sorted(pending),
            "" if enabled else ", and no span group is enabled meanwhile",
            sorted(SpanRegistry.groups()),
            sorted(SpanRegistry.presets()),
            namespaces,
            _source_note(source),
        )
    elif not enabled:
        situation = ("nothing selected", frozenset())
        message = (
            "span_groups %r selects no span group (its presets have no registered "
            "members). Registered groups: %s; presets: %s; namespaces: %s",
            spec,
            sorted(SpanRegistry.groups()),
            sorted(SpanRegistry.presets()),
            namespaces,
        )
    else:
        return None, False
    due, cap_reached = _warnings.claim(situation)
    return (message if due else None), cap_reached


def _groups_configured() -> bool:
    """True once a setup has chosen groups (used to flag late registrations)."""
    return _spec is not None or bool(_enabled)


def _registry_changed() -> bool:
    """Re-resolve the stored spec; True when groups had been chosen before this change."""
    configured = _groups_configured()
    refresh_enabled_span_groups()
    return configured


_on_registry_change(_registry_changed)


def _as_frozenset(groups: Iterable[str]) -> frozenset[str]:
    if isinstance(groups, frozenset):
        return groups
    # A bare string is iterable too; reading it as single letters is never what was meant.
    if isinstance(groups, str) or not isinstance(groups, Iterable):
        raise LensTypeError(
            "set_enabled_span_groups: groups must be a frozenset (or another iterable) of "
            f"group names, got {type(groups).__name__} ({groups!r})"
        )
    return frozenset(groups)
