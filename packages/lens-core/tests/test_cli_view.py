"""`lens view` as a command: where it writes, what it prints, bad input, a missing extra,
and `lens demo --view`."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from lens_cli import run_lens
from lens_view_runs import T0, metrics_request, span, spans_request

from nemo.lens.cli._view import default_out


def _gauge_line() -> str:
    metric = {"name": "g", "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asDouble": 1.0}]}}
    return metrics_request([metric])


def _gauge_file(path: Path) -> Path:
    path.write_text(_gauge_line() + "\nnot json\n", encoding="utf-8")
    return path


def test_the_report_goes_beside_the_first_file_by_default(tmp_path: Path) -> None:
    """`lens view run.jsonl` writes run.html, prints its path and the counts."""
    _gauge_file(tmp_path / "run.jsonl")
    result = run_lens("view", "run.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    assert "wrote run.html" in result.stdout
    assert "1 metric points, 0 spans, 0 logs from 1 file (1 malformed lines skipped)" in (
        result.stdout
    )
    assert result.stderr == ""


def test_the_page_fetches_nothing(tmp_path: Path) -> None:
    """Every script and style is inline: no src= or href= leaves the file."""
    _gauge_file(tmp_path / "run.jsonl")
    assert run_lens("view", "run.jsonl", "-o", "out.html", cwd=tmp_path).returncode == 0
    page = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert "<script src" not in page
    assert "<link" not in page
    assert '<script type="application/json" id="lens-report-data">' in page


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("missing.jsonl",), "FILE 'missing.jsonl' does not exist"),
        ((".",), "FILE '.' is a directory"),
        (("run.jsonl", "-o", "nowhere/out.html"), "the directory"),
        (("run.jsonl", "-o", "run.jsonl"), "is one of the files to read"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    tmp_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    """A file that is not there or not a file, or an unusable --out, names the problem."""
    _gauge_file(tmp_path / "run.jsonl")
    result = run_lens("view", *arguments, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_without_the_view_extra_the_command_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Plotly, `lens view` says which extra installs it, and writes nothing."""
    _gauge_file(tmp_path / "run.jsonl")
    monkeypatch.setitem(sys.modules, "plotly", None)  # what an uninstalled package looks like
    result = run_lens("view", "run.jsonl", cwd=tmp_path)
    assert result.returncode == 1
    assert "pip install 'lens-core[view]'" in result.stderr
    assert not (tmp_path / "run.html").exists()


def test_default_out_keeps_the_stem() -> None:
    """run.jsonl -> run.html; a file already named .html gets .html added."""
    assert default_out(Path("a/run.jsonl")) == Path("a/run.html")
    assert default_out(Path("report.html")) == Path("report.html.html")


def test_demo_view_writes_the_report_of_its_run(tmp_path: Path) -> None:
    """`lens demo --view` ends with the report of the file it wrote."""
    result = run_lens("demo", "--steps", "3", "--interval", "0", "--view", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "lens-demo.html").is_file()
    assert "lens view: wrote" in result.stdout


def test_demo_view_refuses_the_otlp_exporter(tmp_path: Path) -> None:
    """--view needs a file to read: with --exporter otlp it is bad input."""
    result = run_lens("demo", "--exporter", "otlp", "--view", cwd=tmp_path)
    assert result.returncode == 2
    assert "--view" in result.stderr


def test_a_pipe_is_read_like_a_file(tmp_path: Path) -> None:
    """`lens view <(zcat run.jsonl.gz)`: a pipe, which cannot seek back for the second
    pass over the spans, still gives a report of everything in it."""
    lines = [spans_request([span("step", "ab" * 16, "cd" * 8)]), _gauge_line()]
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        result = run_lens("view", f"/dev/fd/{read_end}", "-o", "out.html", cwd=tmp_path)
    finally:
        writer.join(10)
        os.close(read_end)
    assert result.returncode == 0, result.stderr
    assert "1 metric points, 1 spans, 0 logs from 1 file" in result.stdout
    assert (tmp_path / "out.html").read_text(encoding="utf-8").startswith("<!doctype html>")
