"""A test's environment without the lens and OpenTelemetry settings of the shell it ran from.

A developer's shell, or a CI job, may carry `NEMO_LENS_*` or `OTEL_*` variables that would
change what setup builds or what a command prints. `clean_env` is such an environment for
a child process (`lens_children` starts every child with it); `clear_settings` removes the
same variables from this process for one test, and `monkeypatch` puts them back after it.
lens-core's `clean_environ` fixture (its conftest) is `clear_settings` with nothing more to
strip. A test that reads settings under a prefix of its own (`MY_OTEL_`, ...) names it in
`also_strip`, so that a variable inherited under that prefix cannot leak in either.

Only the standard library is imported here: the API-only session loads this module, and so
does `benchmarks/bench_reliability.py` (through `lens_children`), where pytest is absent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

#: Settings a developer's shell may carry that would change what lens does.
LENS_SETTING_PREFIXES = ("NEMO_LENS_", "OTEL_")


def _is_setting(name: str, also_strip: tuple[str, ...]) -> bool:
    return name.startswith(LENS_SETTING_PREFIXES + also_strip)


def clean_env(
    extra: Mapping[str, str] | None = None, *, also_strip: tuple[str, ...] = ()
) -> dict[str, str]:
    """This process's environment without lens or OpenTelemetry settings (nor any variable
    starting with one of `also_strip`), plus `extra`."""
    env = {key: value for key, value in os.environ.items() if not _is_setting(key, also_strip)}
    env.update(extra or {})
    return env


def clear_settings(
    monkeypatch: pytest.MonkeyPatch, *, also_strip: tuple[str, ...] = ()
) -> pytest.MonkeyPatch:
    """Remove every lens and OpenTelemetry setting (and each variable starting with one of
    `also_strip`) from `os.environ` until `monkeypatch` is undone; return `monkeypatch`."""
    for name in [name for name in os.environ if _is_setting(name, also_strip)]:
        monkeypatch.delenv(name)
    return monkeypatch
