"""The console path is opened without waiting, and its file holds only complete lines.

Setup with `<PREFIX>_CONSOLE_PATH` runs in a child interpreter (bounded by a timeout, so
a setup that blocks shows as a kill, not a hung test run). The full disk is real: a 64 KiB
tmpfs mounted in a private mount namespace (`unshare`), skipped where that cannot run, and
a file-size limit (`RLIMIT_FSIZE`), where the kernel itself cuts a write short and then
refuses the next one, on any Linux.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import lens_otlp_json
import pytest
from lens_children import child_env, run_child

from nemo.lens._sdk._console import JsonLinesFile

#: A setup that opens its console path without waiting ends long before this.
SETUP_CHILD_TIMEOUT_S = 45.0

_SETUP_CHILD = """
import json
from nemo.lens import NemoLensConfig, setup_telemetry
outcome = {"error": None}
try:
    config = NemoLensConfig.from_env("TRAINER_OTEL")
    config.enabled = True
    handle = setup_telemetry(config)
except Exception as exc:
    outcome["error"] = [type(exc).__name__, str(exc)]
else:
    with handle.tracer.start_as_current_span("child-span"):
        pass
    handle.shutdown(timeout_ms=5000)
print(json.dumps(outcome))
"""


def set_up_with_console_path(path: str) -> tuple[dict[str, Any], str]:
    """An enabled console setup writing to `path`, in a child: its outcome and stdout."""
    environ = {
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
        "TRAINER_OTEL_EXPORTER": "console",
        "TRAINER_OTEL_CONSOLE_PATH": path,
    }
    run = run_child(_SETUP_CHILD, environ, SETUP_CHILD_TIMEOUT_S)
    assert not run.timed_out, f"setup blocked on {path!r}; killed after {SETUP_CHILD_TIMEOUT_S} s"
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    outcome: dict[str, Any] = json.loads(lines[-1])
    return outcome, "\n".join(lines[:-1])


def test_a_fifo_without_a_reader_fails_setup_at_once_naming_the_variable(
    tmp_path: Path,
) -> None:
    """A FIFO no process reads, as the console path, makes setup raise LensValueError
    naming the variable and the FIFO, instead of blocking in open()."""
    fifo = tmp_path / "telemetry.fifo"
    os.mkfifo(fifo)
    outcome, _ = set_up_with_console_path(str(fifo))
    kind, message = outcome["error"]
    assert kind == "LensValueError"
    assert "TRAINER_OTEL_CONSOLE_PATH" in message
    assert str(fifo) in message
    assert "FIFO" in message
    assert "no process has it open for reading" in message


def test_a_fifo_with_a_reader_receives_the_lines(tmp_path: Path) -> None:
    """A FIFO that a process reads is a valid console path: setup succeeds, lines arrive."""
    fifo = tmp_path / "telemetry.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader, ready before setup
    try:
        outcome, _ = set_up_with_console_path(str(fifo))
        chunks = []
        while True:
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(reader)
    assert outcome["error"] is None
    received = b"".join(chunks).decode()
    assert received.endswith("\n")
    assert lens_otlp_json.span_names(received) == ["child-span"]


def test_dev_stdout_on_a_pipe_is_a_valid_console_path() -> None:
    """console_path=/dev/stdout works when stdout is a pipe (its target has no path name)."""
    outcome, stdout = set_up_with_console_path("/dev/stdout")
    assert outcome["error"] is None
    assert lens_otlp_json.span_names(stdout) == ["child-span"]


def test_a_character_device_is_a_valid_console_path() -> None:
    """console_path=/dev/null (a character device) is opened and written without error."""
    outcome, _ = set_up_with_console_path(os.devnull)
    assert outcome["error"] is None


def test_dev_full_fails_each_write_and_leaves_the_sink_usable() -> None:
    """On /dev/full (no space at every write) each write raises OSError; none blocks."""
    sink = JsonLinesFile(Path("/dev/full"), append=True)
    try:
        for number in range(3):
            with pytest.raises(OSError, match="No space left"):
                sink.write(json.dumps({"record": number}) + "\n", what="spans", count=1)
        assert sink.records_written == {}
        assert sink.lines_written == 0
    finally:
        sink.close()


# Fills the file until the kernel refuses a write, makes room, writes one more record, and
# prints how each write ended and what the file holds. argv: path, then "tmpfs" (a 64 KiB
# tmpfs with a filler file to delete) or "fsize" (a file-size limit to raise).
_FULL_DISK_CHILD = """
import json, os, resource, sys
from pathlib import Path
from nemo.lens._sdk._console import JsonLinesFile
path, room = Path(sys.argv[1]), sys.argv[2]
if room == "fsize":
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, hard))
else:
    filler = path.parent / "filler"
    filler.write_bytes(b"f" * 24_576)
sink = JsonLinesFile(path, append=True)
outcomes = []
def record(number):
    line = json.dumps({"record": number, "padding": "x" * 5_000}) + "\\n"
    try:
        sink.write(line, what="records", count=1)
    except OSError as exc:
        outcomes.append([number, exc.strerror])
        return False
    outcomes.append([number, "written"])
    return True
number = 0
while record(number) and number < 100:
    number += 1
if room == "fsize":
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
else:
    filler.unlink()
record(number + 1)
sink.close()
text = path.read_text(encoding="utf-8")
print(json.dumps({"outcomes": outcomes, "records": sink.records_written, "text": text}))
"""


def fill_the_disk(path: Path, room: str) -> dict[str, Any]:
    """Run the full-disk child on `path` (inside a private tmpfs for "tmpfs")."""
    program = [sys.executable, "-c", _FULL_DISK_CHILD, str(path), room]
    if room == "tmpfs":
        unshare = shutil.which("unshare")
        if unshare is None:
            pytest.skip("no unshare program: cannot mount a private tmpfs")
        mount = f"mount -t tmpfs -o size=64k lens-test {path.parent}"
        program = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                   f'{mount} && exec "$@"', "sh", *program]  # fmt: skip
    run = subprocess.run(
        program,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=SETUP_CHILD_TIMEOUT_S,
        check=False,
    )
    if room == "tmpfs" and run.returncode != 0 and "mount" in run.stderr.split("\n", 1)[0]:
        pytest.skip(f"cannot mount a private tmpfs here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    result: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("room", ["tmpfs", "fsize"])
def test_a_full_disk_mid_line_leaves_only_complete_lines(tmp_path: Path, room: str) -> None:
    """A write the disk cuts short leaves no partial line: once there is room again the
    next record is a line of its own, and every line in the file parses."""
    disk = tmp_path / "disk"
    disk.mkdir()
    result = fill_the_disk(disk / "run.jsonl", room)
    outcomes = result["outcomes"]
    refused = [number for number, outcome in outcomes[:-1] if outcome != "written"]
    assert len(refused) == 1, outcomes  # the disk filled up mid-record, once
    last_number, last_outcome = outcomes[-1]
    assert last_outcome == "written", outcomes  # and took the next record after room was made
    text = result["text"]  # as the child read it: a private tmpfs ends with its child
    assert text.endswith("\n")
    numbers = [json.loads(line)["record"] for line in text.splitlines()]
    written = [number for number, outcome in outcomes if outcome == "written"]
    assert numbers == written
    assert numbers[-1] == last_number
    assert result["records"] == {"records": len(written)}
