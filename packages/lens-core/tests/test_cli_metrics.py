"""`lens metrics`: listing a consumer's metric groups as a table, Markdown or Weaver YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st
from lens_cli import LensResult
from lens_cli import run_lens as lens

from nemo.lens.cli._metrics import (
    INSTRUMENT_BY_KIND,
    render_weaver_registry,
    yaml_float,
    yaml_quote,
)
from nemo.lens.instruments import MetricSpec

KIND_BY_INSTRUMENT = {instrument: kind for kind, instrument in INSTRUMENT_BY_KIND.items()}

# Every kind, empty and non-empty units, and descriptions that break naive YAML.
TRAINER_SPECS = [
    MetricSpec("loss", "trainer.loss", "gauge", description="Training loss: mean over the batch"),
    MetricSpec("tokens", "trainer.tokens", "counter", unit="{token}", description="yes"),
    MetricSpec(
        "step_time",
        "trainer.step.duration",
        "histogram",
        unit="ms",
        description='Quote " backslash \\ hash # and a\nsecond line\tand a tab',
        buckets=(1e-05, 0.5, 1, 2.5, 1e20),
    ),
    MetricSpec("latency", "trainer.latency", "histogram", unit="s"),
    MetricSpec(
        "queue", "trainer/queue-depth", "up_down_counter", unit="1", description="µs — ✓ 🚀 \x00"
    ),
    MetricSpec("empty", "trainer.empty"),
]
ROLLOUT_SPECS = [
    MetricSpec("reward", "rollout.reward", "gauge", description="pipe | inside"),
]
CONSUMER_SOURCE = f"""
from nemo.lens import MetricSpec, register_metric_group

register_metric_group("trainer: #1", {TRAINER_SPECS!r})


def declare_rollouts():
    register_metric_group("rollouts", {ROLLOUT_SPECS!r})
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory holding consumer modules, as a framework checkout would."""
    (tmp_path / "consumer.py").write_text(CONSUMER_SOURCE, encoding="utf-8")
    (tmp_path / "broken.py").write_text("raise RuntimeError('no GPU\\nfound')\n", encoding="utf-8")
    (tmp_path / "nothing.py").write_text(
        "import sys\n\nVALUE = 1\n\ndef fails():\n    1 / 0\n\ndef quits():\n    sys.exit(0)\n",
        encoding="utf-8",
    )
    (tmp_path / "gpu_only.py").write_text("import sys\nsys.exit('needs a GPU')\n", encoding="utf-8")
    return tmp_path


def specs_from_registry(document: Any) -> dict[str, list[MetricSpec]]:
    """Rebuild group -> specs from a parsed Weaver registry, checking each entry's shape."""
    groups: dict[str, list[MetricSpec]] = {}
    for entry in document["groups"]:
        assert entry["type"] == "metric"
        assert entry["id"] == f"metric.{entry['metric_name']}"
        assert entry["stability"] == "development"
        lens = entry["annotations"]["lens"]
        spec = MetricSpec(
            lens["key"],
            entry["metric_name"],
            KIND_BY_INSTRUMENT[entry["instrument"]],
            unit=entry["unit"],
            description=entry["brief"],
            buckets=lens.get("explicit_bucket_boundaries"),
        )
        groups.setdefault(lens["group"], []).append(spec)
    return groups


def test_yaml_round_trips_every_spec(project: Path) -> None:
    """The YAML parses and rebuilds every spec of every group, in declaration order."""
    result = lens(
        "metrics", "--import", "consumer", "--import", "consumer:declare_rollouts",
        "--format", "yaml", cwd=project,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii()
    document = yaml.safe_load(result.stdout)
    assert specs_from_registry(document) == {
        "trainer: #1": TRAINER_SPECS,
        "rollouts": ROLLOUT_SPECS,
    }


def test_yaml_uses_weaver_instrument_names(project: Path) -> None:
    """Kinds map to Weaver's synchronous instrument names (up_down_counter -> updowncounter)."""
    result = lens("metrics", "--import", "consumer", "--format", "yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    instruments = {entry["metric_name"]: entry["instrument"] for entry in document["groups"]}
    assert instruments == {
        "trainer.loss": "gauge",
        "trainer.tokens": "counter",
        "trainer.step.duration": "histogram",
        "trainer.latency": "histogram",
        "trainer/queue-depth": "updowncounter",
        "trainer.empty": "gauge",
    }


def test_table_lists_every_spec(project: Path) -> None:
    """The default table has a header and one row per spec with each column's value."""
    result = lens("metrics", "--import", "consumer", cwd=project)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["GROUP", "KEY", "NAME", "KIND", "UNIT", "BUCKETS", "DESCRIPTION"]
    assert len(rows) == len(TRAINER_SPECS)
    for row, spec in zip(rows, TRAINER_SPECS, strict=True):
        assert row.startswith("trainer: #1")
        for cell in (spec.key, spec.name, spec.kind, spec.unit):
            assert cell in row
    assert "second line and a tab" in rows[2]
    assert "1e-05, 0.5, 1, 2.5, 1e+20" in rows[2]


def test_yaml_carries_buckets_only_for_histograms_that_declare_them(project: Path) -> None:
    """annotations.lens.explicit_bucket_boundaries lists a histogram's buckets as floats."""
    result = lens("metrics", "--import", "consumer", "--format", "yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    boundaries = {
        entry["metric_name"]: entry["annotations"]["lens"].get("explicit_bucket_boundaries")
        for entry in document["groups"]
    }
    assert boundaries["trainer.step.duration"] == [1e-05, 0.5, 1.0, 2.5, 1e20]
    assert all(type(bound) is float for bound in boundaries["trainer.step.duration"])
    assert boundaries["trainer.latency"] is None
    assert boundaries["trainer.loss"] is None


@pytest.mark.parametrize("bound", [1e20, 1e-05, 3.0, -2.0, 0.1, 1.7976931348623157e308])
def test_yaml_float_reads_back_as_the_same_float(bound: float) -> None:
    """yaml_float gives a scalar YAML 1.1 reads as that exact float (`1e+20` would be text)."""
    assert yaml.safe_load(f"value: {yaml_float(bound)}") == {"value": bound}


def test_markdown_is_one_table_with_escaped_pipes(project: Path) -> None:
    """Markdown is a header, a divider and one row per spec; a `|` in a cell is escaped."""
    result = lens(
        "metrics", "--import", "consumer:declare_rollouts", "--format", "markdown", cwd=project
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "| Group | Key | Name | Kind | Unit | Buckets | Description |"
    assert lines[1] == "|---|---|---|---|---|---|---|"
    # Importing the module registers its "trainer: #1" group first; the callable adds one.
    assert len(lines) == 2 + len(TRAINER_SPECS) + len(ROLLOUT_SPECS)
    assert lines[2].startswith("| `trainer: #1` | `loss` | `trainer.loss` | `gauge` |  |  |")
    assert "| `histogram` | `ms` | 1e-05, 0.5, 1, 2.5, 1e+20 |" in lines[4]
    assert (
        lines[-1]
        == "| `rollouts` | `reward` | `rollout.reward` | `gauge` |  |  | pipe \\| inside |"
    )


def one_line_error(result: LensResult) -> str:
    """Assert the run failed with exit 2 and one stderr line; return that line."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    return result.stderr


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("not_a_module", "cannot import module 'not_a_module' (ModuleNotFoundError"),
        ("broken", "cannot import module 'broken' (RuntimeError: no GPU found)"),
        ("nothing:missing", "module 'nothing' has no attribute 'missing'"),
        ("nothing:VALUE", "nothing:VALUE is a int, not callable"),
        ("nothing:fails", "nothing:fails() raised ZeroDivisionError: division by zero"),
        ("gpu_only", "cannot import module 'gpu_only' (SystemExit: needs a GPU)"),
        ("nothing:quits", "nothing:quits() raised SystemExit: 0"),
    ],
)
def test_a_target_that_cannot_be_loaded_exits_2(project: Path, target: str, expected: str) -> None:
    """An unimportable module, a missing or uncallable attribute, or a failing call
    (sys.exit() included) exits 2."""
    line = one_line_error(lens("metrics", "--import", target, cwd=project))
    assert line.startswith("lens metrics: error: ")
    assert expected in line


@pytest.mark.parametrize("target", ["consumer:", "two words", "pkg:fn:extra", "1module"])
def test_a_malformed_target_exits_2(project: Path, target: str) -> None:
    """A target that is not MODULE[:CALLABLE] is refused before anything is imported."""
    line = one_line_error(lens("metrics", "--import", target, cwd=project))
    assert "expected MODULE[:CALLABLE]" in line


def test_an_unknown_format_exits_2(project: Path) -> None:
    """`--format` outside table/markdown/yaml exits 2 naming the choices."""
    line = one_line_error(lens("metrics", "--import", "consumer", "--format", "json", cwd=project))
    assert "invalid choice: 'json'" in line
    # Python releases differ on quoting the choices, so look for each name.
    choices = line.split("choose from", 1)[1]
    assert all(name in choices for name in ("table", "markdown", "yaml"))


def test_import_is_required(project: Path) -> None:
    """`lens metrics` without --import exits 2 saying --import is required."""
    line = one_line_error(lens("metrics", cwd=project))
    assert "the following arguments are required: --import" in line


def test_nothing_registered_exits_1(project: Path) -> None:
    """A module that registers no group prints nothing on stdout and exits 1."""
    result = lens("metrics", "--import", "nothing", cwd=project)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "no metric group is registered after importing nothing" in result.stderr


def test_the_demo_declaration_can_be_listed(tmp_path: Path) -> None:
    """The demo's own `rl` group lists through its declaring function."""
    result = lens(
        "metrics", "--import", "nemo.lens.cli._demo:declare_demo_metrics", "--format", "yaml",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = {entry["metric_name"] for entry in yaml.safe_load(result.stdout)["groups"]}
    expected = {"lens_demo.reward.mean", "lens_demo.kl_divergence", "lens_demo.generation.duration"}
    assert expected <= names


def test_an_empty_registry_renders_as_an_empty_list() -> None:
    """With no groups, the YAML still parses, as `groups: []`."""
    assert yaml.safe_load(render_weaver_registry({})) == {"groups": []}


@given(st.text())
def test_yaml_quote_reads_back_unchanged(text: str) -> None:
    """Any string without surrogates survives yaml_quote and a YAML parser unchanged."""
    quoted = yaml_quote(text)
    assert quoted.isascii()
    assert yaml.safe_load(f"value: {quoted}") == {"value": text}


_units = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=63)
_bucket_lists = st.lists(
    st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=6, unique=True
).map(sorted)


@st.composite
def _specs(draw: st.DrawFn) -> MetricSpec:
    kind = draw(st.sampled_from(sorted(INSTRUMENT_BY_KIND)))
    buckets = draw(st.none() | _bucket_lists) if kind == "histogram" else None
    return MetricSpec(
        draw(
            st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True).filter(
                lambda key: key != "attributes"
            )
        ),
        draw(st.from_regex(r"[A-Za-z][A-Za-z0-9_.\-/]{0,20}", fullmatch=True)),
        kind,
        unit=draw(_units),
        description=draw(st.text()),
        buckets=buckets,
    )


@given(st.dictionaries(st.text(min_size=1), st.lists(_specs(), min_size=1, max_size=4), max_size=3))
def test_registry_yaml_round_trips_any_declaration(groups: dict[str, list[MetricSpec]]) -> None:
    """Whatever the specs hold, the registry YAML rebuilds them exactly."""
    document = yaml.safe_load(render_weaver_registry(groups))
    if not groups:
        assert document == {"groups": []}
    else:
        assert specs_from_registry(document) == groups


def test_help_describes_the_formats() -> None:
    """`lens metrics --help` names the three formats and the Weaver registry."""
    result = lens("metrics", "--help", cwd=Path.cwd())
    assert result.returncode == 0
    assert "{table,markdown,yaml}" in result.stdout
    assert "Weaver" in result.stdout
