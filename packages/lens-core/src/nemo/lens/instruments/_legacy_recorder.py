"""What every deprecation shim's legacy record call does, written once.

A shim's legacy function (`record_rl_metrics`, `record_gym_metrics`) collects the keyword
values it was given and hands them to its `LegacyRecorder`, which:

- registers the shim's legacy group only when no group of that name exists, so a
  consumer's own definition always wins (and one dropped by a registry reset comes back);
- records through `record_metrics`, so validation, caching, fork safety and the
  once-per-key warnings are the registry's;
- never raises: anything unexpected is logged once per exception type on the shim's logger;
- issues one `DeprecationWarning` per process, after recording, at the line that called the
  shim's function.

Whether the group exists is asked of the registry's table on every call: one dict look-up
without the lock, the same look-up `record_metrics` makes next. (`registered_metric_groups()`
would copy every group under the registry lock on every step.)
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from nemo.lens._warn_once import WarnOnce
from nemo.lens.instruments._record import record_metrics

# The registry's table itself, mutated in place and never rebound, so a membership test
# always sees the current groups.
from nemo.lens.instruments._registry import GROUPS, register_metric_group
from nemo.lens.instruments._spec import MetricSpec

# The frames between warnings.warn and the consumer's call: record(), the shim's function.
_CALLER_OF_THE_SHIM: Final = 3


class LegacyRecorder:
    """Records one shim's legacy keyword values into its registry group.

    Args:
        function: The legacy function's name, as log lines name it.
        group: The registry group the values go to, e.g. "gym".
        specs: The legacy definition, registered as `group` when no such group exists.
        deprecation: The `DeprecationWarning` text: the replacement and the removal release.
        logger: The shim's logger, for unexpected failures and `warn_once`.
    """

    #: The warn-once key of the deprecation (tests mark it as issued, or forget it).
    DEPRECATION_KEY: Final = "deprecation"

    __slots__ = ("_deprecation", "_logger", "function", "group", "once", "specs")

    def __init__(
        self,
        function: str,
        group: str,
        specs: Sequence[MetricSpec],
        deprecation: str,
        logger: logging.Logger,
    ) -> None:
        self.function = function
        self.group = group
        self.specs = tuple(specs)
        self._deprecation = deprecation
        self._logger = logger
        # lens-core's warn-once memory: exactly one deprecation per process, even when
        # several threads call first together, and one log line per failure kind.
        # nemo.lens.testing.reset_all() forgets it.
        self.once = WarnOnce(logger, function)

    def record(self, meter: Any, values: Mapping[str, object]) -> None:
        """Record `values` (key -> value) into the group; never raises.

        `values` holds only the keywords the caller gave: the shim leaves out each None
        itself (with plain `if`s, the cheapest way), since every None passed on would
        cost `record_metrics` a slow look-up of its own, and legacy callers usually pass
        a few keywords of many.

        Called directly by the shim's legacy function: the deprecation warning names the
        line that called that function.
        """
        try:
            if self.group not in GROUPS:
                self._register_legacy_group()
            record_metrics(meter, self.group, values)
        except Exception as exc:  # never break the training step
            if self.once.first(("failure", type(exc).__name__)):
                self._logger.warning(
                    "%s: unexpected %s (%s); the call was skipped",
                    self.function,
                    type(exc).__name__,
                    exc,
                    exc_info=exc,
                )
        if self.once.first(self.DEPRECATION_KEY):
            warnings.warn(self._deprecation, DeprecationWarning, stacklevel=_CALLER_OF_THE_SHIM)

    def warn_once(self, key: Hashable, message: str, *args: object) -> None:
        """Log `message % args` on the shim's logger the first time `key` is seen; never
        raises (it runs on the recording path)."""
        try:
            self.once.warn(("note", key), message, *args)
        except Exception:  # a broken logging handler must not break the training step
            return

    def _register_legacy_group(self) -> None:
        try:
            register_metric_group(self.group, self.specs)
        except ValueError:
            # Another thread, or the consumer, registered it since we looked: use theirs.
            # Anything else (the shim's own specs refused) is record()'s to log.
            if self.group not in GROUPS:
                raise
