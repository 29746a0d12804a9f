"""Running the `lens` command in a subprocess, free of the caller's lens/OTel settings."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# Settings a developer's shell may carry that would change what a command does.
LENS_SETTING_PREFIXES = ("NEMO_LENS_", "OTEL_")


def clean_env(
    extra: Mapping[str, str] | None = None, *, also_strip: tuple[str, ...] = ()
) -> dict[str, str]:
    """This process's environment without lens or OpenTelemetry settings, plus `extra`."""
    prefixes = LENS_SETTING_PREFIXES + also_strip
    env = {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}
    env.update(extra or {})
    return env


def run_lens(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m nemo.lens.cli ARGS` to completion; `env` as from `clean_env`."""
    return subprocess.run(
        [sys.executable, "-m", "nemo.lens.cli", *args],
        capture_output=True,
        text=True,
        env=clean_env() if env is None else dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
