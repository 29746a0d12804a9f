"""Export strategies: which processes of a distributed job export telemetry.

A strategy is called once per setup as `strategy(config, rank, world_size)`, and its
result is read as a bool. Consumers select one by name through
`NemoLensConfig.export_strategy`, or pass a callable to `setup_telemetry`.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from nemo.lens import _otel_env
from nemo.lens._fork_hooks import hold_lock_across_fork
from nemo.lens._warn_once import WarnOnce
from nemo.lens.config import NemoLensConfig
from nemo.lens.errors import LensTypeError, LensValueError

__all__ = [
    "BUILTIN_STRATEGIES",
    "ExportStrategy",
    "get_export_strategy",
    "register_export_strategy",
    "registered_strategies",
    "unregister_export_strategy",
]

ExportStrategy: TypeAlias = Callable[[NemoLensConfig, int, int], bool]
"""A strategy: `(config, rank, world_size) -> bool`, whether that rank exports."""

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "export strategies")


def _all_ranks(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """Every process exports."""
    return True


def _single_rank(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """Only `config.export_rank` exports; -1 means the last rank.

    An enabled config whose `export_rank` names no rank of the world (8 of 4 ranks, or
    below -1) selects no process. That is a warning, logged once per process and so on
    every rank: each rank reaches the same decision, and one rank's log is often the only
    one read. It is not an error, because a job may legitimately run a smaller world than
    its configuration was written for (a debug run on fewer GPUs), and no telemetry
    setting should stop it.
    """
    export_rank = config.export_rank
    target = world_size - 1 if export_rank == -1 else export_rank
    selected = rank == target
    if not selected and config.enabled and _names_no_rank(export_rank, world_size):
        shown = _shown(export_rank)
        _warnings.warn(
            ("export_rank", shown, world_size),
            "export_rank %s (%s) names no rank of this world of %d, so no process exports "
            "telemetry; expected -1 (the last rank) or a rank from 0 to %d",
            shown,
            config._label("export_rank"),
            world_size,
            world_size - 1,
        )
    return selected


def _names_no_rank(export_rank: Any, world_size: int) -> bool:
    """True when `export_rank` is not -1 and equals no rank in [0, world_size)."""
    try:
        if export_rank == -1:
            return False
        # 3.0 still equals rank 3; 2.5, NaN or 10**30 equals none.
        in_world = 0 <= export_rank < world_size and export_rank == int(export_rank)
    except Exception:  # a str, None, or an object whose comparisons fail: equals no rank
        return True
    return not in_world


def _shown(value: object) -> str:
    try:
        return repr(value)[:100]
    except Exception:
        return f"<{type(value).__name__} with a failing repr>"


def _rank_in_sample(rank: int, sample_rate: float) -> bool:
    """True when `rank` falls in the `sample_rate` share of ranks the hash keeps.

    Deterministic (md5 of the rank), so every process reaches the same answer for a
    rank; the `sampled` strategy and the rank-aware span sampler both use it.
    """
    import hashlib  # here: its OpenSSL binding costs every `import` of setup ~3 ms

    digest = hashlib.md5(str(rank).encode(), usedforsecurity=False).hexdigest()
    return int(digest, 16) % 10000 / 10000 < sample_rate


def _sampled(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """A deterministic `export_sample_rate` share of the ranks exports, chosen by hash."""
    return _rank_in_sample(rank, config.export_sample_rate)


def _first_rank_per_node(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """The process with `LOCAL_RANK` 0 (or unset) on each node exports."""
    return _otel_env.local_rank() == 0


#: The built-in strategies under which at most one process of a node exports, so a
#: Prometheus endpoint needs no per-rank port.
_ONE_EXPORTER_PER_NODE: Final = frozenset({"single_rank", "first_rank_per_node"})


def _exports_once_per_node(name: str, *, custom: bool = False) -> bool:
    """True when the strategy `name` lets at most one process per node export.

    `custom` says a strategy object was passed to `setup_telemetry` instead of a name;
    lens cannot know what such a strategy selects, so it counts as several per node.
    """
    return not custom and name in _ONE_EXPORTER_PER_NODE


_BUILTINS: Final[dict[str, ExportStrategy]] = {
    "all_ranks": _all_ranks,
    "single_rank": _single_rank,
    "sampled": _sampled,
    "first_rank_per_node": _first_rank_per_node,
}

BUILTIN_STRATEGIES: Final = frozenset(_BUILTINS)
"""The strategies registered at import; they can be overridden but never unregistered."""

_strategies: dict[str, ExportStrategy] = dict(_BUILTINS)
_lock = threading.Lock()
hold_lock_across_fork("export strategy lock", sys.modules[__name__], "_lock")


def register_export_strategy(
    name: str, strategy: ExportStrategy, *, allow_override: bool = False
) -> None:
    """Register `strategy` under `name`, so `export_strategy=name` selects it.

    Args:
        name: A non-empty name.
        strategy: A callable `(config, rank, world_size) -> bool`.
        allow_override: Replace an existing entry, a built-in included.

    Raises:
        ValueError: `name` is empty, or taken and `allow_override` is false.
        TypeError: `strategy` is not callable.
    """
    if not isinstance(name, str) or not name.strip():
        raise LensValueError(
            f"register_export_strategy: name must be a non-empty string, got {name!r}"
        )
    if not callable(strategy):
        raise LensTypeError(
            "register_export_strategy: strategy must be a callable (config, rank, "
            f"world_size) -> bool, got {type(strategy).__name__} ({strategy!r})"
        )
    with _lock:
        if name in _strategies and not allow_override:
            kind = "built-in" if name in BUILTIN_STRATEGIES else "custom"
            raise LensValueError(
                f"register_export_strategy: {kind} strategy {name!r} is already "
                "registered; pass allow_override=True to replace it"
            )
        _strategies[name] = strategy


def unregister_export_strategy(name: str) -> None:
    """Remove a custom strategy.

    Raises:
        ValueError: `name` is a built-in, or is not registered.
    """
    if name in BUILTIN_STRATEGIES:
        raise LensValueError(
            f"Cannot unregister built-in strategy {name!r}; built-ins are "
            f"{sorted(BUILTIN_STRATEGIES)}"
        )
    with _lock:
        if _strategies.pop(name, None) is not None:
            return
    raise LensValueError(f"Export strategy {name!r} is not registered.")


def get_export_strategy(name: str) -> ExportStrategy:
    """Return the strategy registered under `name`.

    Raises:
        ValueError: Nothing is registered under `name`; the message lists what is.
    """
    strategy = _strategies.get(name)
    if strategy is None:
        raise LensValueError(
            f"Unknown export_strategy '{name}'. Registered strategies: {registered_strategies()}."
        )
    return strategy


def registered_strategies() -> list[str]:
    """Return every registered strategy name, built-in and custom, sorted."""
    with _lock:
        return sorted(_strategies)


def _reset_to_builtins() -> None:
    """Forget custom strategies and overrides (used by `nemo.lens.testing`)."""
    with _lock:
        _strategies.clear()
        _strategies.update(_BUILTINS)
