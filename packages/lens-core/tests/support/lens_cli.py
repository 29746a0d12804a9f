"""Running the `lens` command, free of the caller's lens/OTel settings.

`run_lens` calls `nemo.lens.cli.main(argv)` in the test's own process, as a fresh process
would see it: only the environment it is given, its own working directory, empty lens
state (registry, strategies, warn-once memory, OpenTelemetry globals) before and after,
and lens's warnings on its stderr as Python's last-resort handler prints them. It costs
milliseconds where a subprocess costs a second of interpreter start and imports.

`run_lens_process` runs `python -m nemo.lens.cli` for what only a process shows: exit
codes through `sys.exit`, a closed pipe, the console script, an API-only install.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from lens_children import child_env, run_python
from lens_env import clean_env


@dataclass(frozen=True)
class LensResult:
    """What one `lens` command did: the fields of `subprocess.CompletedProcess` tests read."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _as_a_fresh_process(env: Mapping[str, str], cwd: Path | None) -> Iterator[None]:
    """Give the block exactly `env` and `cwd`; afterwards restore both, `sys.path`, and
    forget the modules the block imported from `cwd` (a project's `--import` target)."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_path = list(sys.path)
    known_modules = set(sys.modules)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        if cwd is not None:
            project = Path(cwd).resolve()
            for name in set(sys.modules) - known_modules:
                origin = getattr(sys.modules[name], "__file__", None)
                if origin is not None and Path(origin).resolve().is_relative_to(project):
                    del sys.modules[name]


@contextlib.contextmanager
def _last_resort_logging_to(stream: io.StringIO) -> Iterator[None]:
    """Print WARNING and above as bare messages on `stream`, as a process without logging
    configuration does (pytest's capture handler would otherwise take them silently)."""
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def run_lens(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> LensResult:
    """Run `lens ARGS` in this process (see the module docstring); `env` as from
    `lens_env.clean_env`, which is also the default."""
    from nemo.lens.cli import main
    from nemo.lens.testing import isolated_telemetry

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        _as_a_fresh_process(clean_env() if env is None else env, cwd),
        isolated_telemetry(),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        _last_resort_logging_to(stderr),
    ):
        status = main(list(args))
    return LensResult(args, status, stdout.getvalue(), stderr.getvalue())


def run_lens_process(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m nemo.lens.cli ARGS` to completion; `env` as from
    `lens_children.child_env`, which is also the default."""
    return run_python(
        "-m", "nemo.lens.cli", *args, env=child_env() if env is None else env, cwd=cwd,
        timeout_s=timeout,
    )  # fmt: skip
