"""The `lens` command frame: entry points, --help on every command, bad-input exits."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from lens_children import child_env, free_port, python_stdout, run_python
from lens_cli import run_lens as lens

from nemo.lens.cli import main

COMMANDS = ("demo", "doctor", "metrics")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    """`lens COMMAND --help` prints that command's usage and exits 0."""
    result = lens(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: lens {command}")
    assert "exit status:" in result.stdout


def test_top_level_help_lists_every_command() -> None:
    """`lens --help` names the three commands."""
    result = lens("--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert command in result.stdout


def test_version_matches_the_distribution() -> None:
    """`lens --version` prints the installed lens-core version."""
    result = lens("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"lens {metadata.version('lens-core')}"


def test_no_command_is_bad_input() -> None:
    """`lens` alone exits 2 with one line naming the commands it expected."""
    result = lens()
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "expected a command: demo, doctor, metrics or view" in result.stderr


def test_unknown_command_is_bad_input() -> None:
    """An unknown command exits 2 with one line listing the valid choices."""
    result = lens("train")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "'train'" in result.stderr
    assert "demo" in result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_option_is_reported_by_the_command_it_was_given_to(command: str) -> None:
    """An option the command lacks exits 2 with one line from that command's parser,
    pointing at that command's --help."""
    required = ["--import", "json"] if command == "metrics" else []
    result = lens(command, *required, "--colour", "red")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"lens {command}: error: unrecognized arguments: --colour red "
        f"(see 'lens {command} --help')\n"
    )


def test_an_unknown_option_without_a_command_names_the_option() -> None:
    """`lens --colour` says the option is unknown, rather than only asking for a command."""
    result = lens("--colour")
    assert result.returncode == 2
    assert result.stderr == "lens: error: unrecognized arguments: --colour (see 'lens --help')\n"


def test_main_returns_the_status_instead_of_exiting(capsys: pytest.CaptureFixture[str]) -> None:
    """`main()` returns argparse's status for --help and for bad input."""
    assert main(["--help"]) == 0
    assert main(["metrics", "--format", "xml", "--import", "json"]) == 2
    captured = capsys.readouterr()
    assert "invalid choice: 'xml'" in captured.err


def test_console_script_points_at_run() -> None:
    """lens-core declares the `lens` console script as `nemo.lens.cli:run`."""
    scripts = metadata.entry_points(group="console_scripts")
    (entry,) = [entry for entry in scripts if entry.name == "lens"]
    assert entry.value == "nemo.lens.cli:run"
    assert entry.dist is not None
    assert entry.dist.name == "lens-core"


def test_run_exits_with_the_status_of_main() -> None:
    """The console-script function exits with main()'s status (2 for bad input)."""
    code = "import sys; sys.argv = ['lens', 'metrics']; from nemo.lens.cli import run; run()"
    result = run_python("-c", code)
    assert result.returncode == 2
    assert "the following arguments are required: --import" in result.stderr


def test_importing_nemo_lens_does_not_import_the_cli() -> None:
    """`import nemo.lens` loads no module of the CLI package."""
    code = (
        "import sys, nemo.lens; "
        "print(sorted(m for m in sys.modules if m.startswith('nemo.lens.cli')))"
    )
    assert python_stdout("-c", code).strip() == "[]"


def test_a_reader_that_leaves_early_is_not_a_traceback(tmp_path: Path) -> None:
    """`lens metrics ... | head -1`: the command stops quietly when its reader has left."""
    (tmp_path / "few_metrics.py").write_text(
        "from nemo.lens import MetricSpec, register_metric_group\n"
        "register_metric_group('few', [MetricSpec('k', 'few.k')])\n"
    )
    command = [sys.executable, "-c", "from nemo.lens.cli import run; run()"]
    command += ["metrics", "--import", "few_metrics"]
    with subprocess.Popen(
        command, cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        process.stdout.close()  # the reader is gone before the command writes a byte
        _, stderr = process.communicate(timeout=60)
    assert b"Traceback" not in stderr
    assert process.returncode == 1


def test_main_in_process_leaves_the_environment_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lens demo` points its exporters at their destination through OTEL_* variables; called
    in-process, main() puts each one back: a set one restored, an unset one removed."""
    monkeypatch.delenv("OTEL_METRIC_EXPORT_INTERVAL", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "9999")
    before = dict(os.environ)

    port = str(free_port())  # a port nothing listens on now

    status = main(["demo", "--steps", "1", "--interval", "0", "--out", str(tmp_path / "d.jsonl")])
    prometheus = main(["demo", "--steps", "1", "--interval", "0", "--exporter", "prometheus",
                       "--port", port, "--out", str(tmp_path / "p.jsonl")])  # fmt: skip

    assert (status, prometheus) == (0, 0)
    assert dict(os.environ) == before
