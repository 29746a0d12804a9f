"""inject_context / extract_context: W3C trace context and baggage through the global propagator."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from lens_children import child_env, run_python
from lens_spans import one

import nemo.lens
from nemo.lens.propagation import _install_w3c_propagator, extract_context, inject_context
from nemo.lens.testing import InMemorySpans, reset_span_state

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.propagators.composite import CompositePropagator

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _fresh_state_and_propagator() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    saved = propagate.get_global_textmap()
    yield
    propagate.set_global_textmap(saved)
    reset_span_state(clear_registry=True)


def test_root_re_exports() -> None:
    """Both functions are exported from `nemo.lens` as the same objects."""
    assert nemo.lens.inject_context is inject_context
    assert nemo.lens.extract_context is extract_context


def test_inject_writes_the_current_span(spans: InMemorySpans) -> None:
    """Gym shape `inject_context(headers)`: traceparent carries the current span's ids."""
    headers: dict[str, str] = {}
    with spans.tracer.start_as_current_span("client") as span:
        inject_context(headers)
    ctx = span.get_span_context()
    assert (
        headers["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    )
    assert ctx.trace_flags.sampled
    assert "baggage" not in headers


def test_inject_without_a_span_writes_nothing() -> None:
    """With no active span there is no traceparent to write."""
    headers: dict[str, str] = {}
    inject_context(headers)
    assert "traceparent" not in headers


def test_round_trip_parents_the_remote_side(spans: InMemorySpans) -> None:
    """A span started under the extracted context is a child of the injecting span."""
    headers: dict[str, str] = {}
    with spans.tracer.start_as_current_span("client") as client:
        inject_context(headers)
    remote = extract_context(headers)
    server = spans.tracer.start_span("server", context=remote)
    server.end()
    finished = one(spans, "server")
    assert finished.parent.span_id == client.get_span_context().span_id
    assert finished.parent.is_remote
    assert finished.context.trace_id == client.get_span_context().trace_id


def test_baggage_and_tracestate_travel(spans: InMemorySpans) -> None:
    """Baggage and tracestate are written when present and read back on the other side."""
    incoming = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
    token = otel_context.attach(baggage.set_baggage("run", "r1", extract_context(incoming)))
    try:
        with spans.tracer.start_as_current_span("hop"):
            headers: dict[str, str] = {}
            inject_context(headers)
    finally:
        otel_context.detach(token)
    assert headers["tracestate"] == "vendor=abc"
    assert headers["baggage"] == "run=r1"
    assert baggage.get_baggage("run", extract_context(headers)) == "r1"


@pytest.mark.parametrize(
    "carrier",
    [{}, {"traceparent": "garbage"}, {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}],
)
def test_empty_or_invalid_carrier_gives_an_invalid_span(carrier: dict[str, str]) -> None:
    """Nothing usable in the carrier: the context's span is invalid."""
    span = trace.get_current_span(extract_context(carrier))
    assert not span.get_span_context().is_valid


def test_extract_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    """A carrier that is not a mapping gives an empty context and one warning."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.propagation"):
        for _ in range(2):
            ctx = extract_context(None)  # type: ignore[arg-type]
            assert not trace.get_current_span(ctx).get_span_context().is_valid
    assert len(caplog.records) == 1


def test_inject_never_raises(spans: InMemorySpans, caplog: pytest.LogCaptureFixture) -> None:
    """A carrier that cannot be written is left alone, with one warning."""
    with (
        caplog.at_level(logging.WARNING, logger="nemo.lens.propagation"),
        spans.tracer.start_as_current_span("s"),
    ):
        inject_context(())  # type: ignore[arg-type]
    assert "inject_context failed" in caplog.records[0].getMessage()


def test_install_w3c_propagator(clean_environ: pytest.MonkeyPatch, spans: InMemorySpans) -> None:
    """Setup's propagator is tracecontext plus baggage, unless OTEL_PROPAGATORS is set."""
    propagate.set_global_textmap(CompositePropagator([]))
    _install_w3c_propagator()
    assert propagate.get_global_textmap().fields == {"traceparent", "tracestate", "baggage"}
    chosen = CompositePropagator([])
    propagate.set_global_textmap(chosen)
    clean_environ.setenv("OTEL_PROPAGATORS", "b3")
    _install_w3c_propagator()
    assert propagate.get_global_textmap() is chosen


def test_the_environment_propagator_follows_otel_propagators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One rule for OTEL_PROPAGATORS (setup and nemo.lens.testing read it through it): unset
    is W3C trace context plus baggage, `none` is no propagator, a name no entry point
    provides is refused by name."""
    from opentelemetry.propagators.composite import CompositePropagator

    from nemo.lens import _otel_env, propagation

    monkeypatch.setenv("OTEL_PROPAGATORS", " tracecontext , ,baggage ")
    assert _otel_env.configured_propagators() == ["tracecontext", "baggage"]
    named = propagation._environment_propagator()
    assert named.fields == {"traceparent", "tracestate", "baggage"}
    monkeypatch.setenv("OTEL_PROPAGATORS", "none")
    nothing = propagation._environment_propagator()
    assert isinstance(nothing, CompositePropagator)
    assert nothing.fields == set()
    monkeypatch.setenv("OTEL_PROPAGATORS", "carrier-pigeon")
    with pytest.raises(ValueError, match="'carrier-pigeon', which is not installed"):
        propagation._environment_propagator()
    monkeypatch.delenv("OTEL_PROPAGATORS")
    assert _otel_env.configured_propagators() == []
    assert propagation._environment_propagator().fields == {"traceparent", "tracestate", "baggage"}


def _oversized_baggage() -> str:
    """A 12 KB W3C baggage (past the 8192-byte limit) whose first member is a token."""
    members = ["token=secret"] + [f"k{index}={'v' * 64}" for index in range(180)]
    header = ",".join(members)
    assert len(header) > 12 * 1024
    return header


def _problem_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Every WARNING (or worse) captured, whoever logged it."""
    return [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_an_oversized_baggage_warns_once_and_never_shows_the_header(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 12 KB baggage holding `token=secret`, extracted 50 times, gives one warning in
    all, which shows nothing of the header; the trace context is still extracted."""
    carrier = {"traceparent": TRACEPARENT, "baggage": _oversized_baggage()}
    caplog.set_level(logging.DEBUG)

    for _ in range(50):
        context = extract_context(carrier)
        assert trace.get_current_span(context).get_span_context().is_valid
        assert baggage.get_all(context) == {}

    (warning,) = _problem_records(caplog)
    assert "baggage" in warning.getMessage().lower()
    assert all("secret" not in record.getMessage() for record in caplog.records)
    assert all("v" * 64 not in record.getMessage() for record in caplog.records)


def test_malformed_baggage_members_warn_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    """150 malformed members (no `=`, a bad key, non-ASCII), extracted 10 times, give at
    most one warning per kind, none showing a member; the valid member is still read."""
    malformed = [
        *(f"secret-without-equals-{index}" for index in range(50)),
        *(f"bad key {index}=secret" for index in range(50)),
        *(f"clé{index}=secret" for index in range(50)),
    ]
    carrier = {"traceparent": TRACEPARENT, "baggage": ",".join(["run=r1", *malformed])}
    caplog.set_level(logging.DEBUG)

    for _ in range(10):
        assert baggage.get_all(extract_context(carrier)) == {"run": "r1"}

    problems = _problem_records(caplog)
    assert 1 <= len(problems) <= 3
    assert len({record.getMessage() for record in problems}) == len(problems)
    assert all("secret" not in record.getMessage() for record in caplog.records)
    assert all("clé" not in record.getMessage() for record in caplog.records)


# A child process: OpenTelemetry reads OTEL_PROPAGATORS once, when its propagate module is
# first imported, so each value needs a fresh interpreter.
_SETUP_AND_EXTRACT = """
import json, os, sys
import nemo.lens as lens
from opentelemetry import baggage, trace
try:
    handle = lens.setup_telemetry(
        lens.NemoLensConfig(enabled=True, exporter="console", console_path=os.devnull)
    )
except Exception as exc:
    kind = type(exc).__module__ + "." + type(exc).__name__
    print(json.dumps({"raised": kind, "message": str(exc)}))
    raise SystemExit(0)
context = lens.extract_context({"traceparent": sys.argv[1], "baggage": "run=r1"})
from opentelemetry import propagate
print(json.dumps({
    "exporting": handle.is_exporting,
    "valid": trace.get_current_span(context).get_span_context().is_valid,
    "baggage": dict(baggage.get_all(context)),
    "fields": sorted(propagate.get_global_textmap().fields),
}))
handle.shutdown()
"""


def _setup_and_extract(otel_propagators: str) -> dict[str, object]:
    """What `_SETUP_AND_EXTRACT` reports in a child with `OTEL_PROPAGATORS` set so."""
    result = run_python(
        "-c",
        _SETUP_AND_EXTRACT,
        TRACEPARENT,
        env=child_env({"OTEL_PROPAGATORS": otel_propagators}),
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize(
    "value", ["", " ", " , ", "tracecontext,,baggage", "baggage, ,tracecontext"]
)
def test_a_blank_otel_propagators_or_blank_entry_is_read_as_the_spec_says(value: str) -> None:
    """A blank `OTEL_PROPAGATORS` means unset (W3C trace context plus baggage) and a blank
    entry is skipped, as the OpenTelemetry specification says: setup works and
    `extract_context` reads both headers (the API itself raised ValueError on them)."""
    report = _setup_and_extract(value)

    assert report == {
        "exporting": True,
        "valid": True,
        "baggage": {"run": "r1"},
        "fields": ["baggage", "traceparent", "tracestate"],
    }


def test_an_uninstalled_propagator_is_refused_by_setup_by_name() -> None:
    """`OTEL_PROPAGATORS=tracecontext,carrier-pigeon` makes setup raise LensValueError
    naming the variable, the name and the installed propagators (it used to pass setup
    and leave every later extract failing)."""
    report = _setup_and_extract("tracecontext,carrier-pigeon")

    assert report["raised"] == "nemo.lens.errors.LensValueError"
    message = str(report["message"])
    assert "OTEL_PROPAGATORS" in message
    assert "'carrier-pigeon'" in message
    for accepted in ("'tracecontext'", "'baggage'", "'none'"):
        assert accepted in message


def test_the_export_plan_refuses_an_uninstalled_propagator() -> None:
    """The refusal comes from the export plan (so `lens doctor` gives the same verdict);
    a blank value, a blank entry and `none` pass it."""
    from nemo.lens._export_plan import build_export_plan
    from nemo.lens.config import NemoLensConfig
    from nemo.lens.errors import LensValueError

    config = NemoLensConfig(enabled=True, exporter="console")
    with pytest.raises(LensValueError, match=r"OTEL_PROPAGATORS.*'carrier-pigeon'"):
        build_export_plan(config, environ={"OTEL_PROPAGATORS": "carrier-pigeon"})
    for fine in (" ", "tracecontext,,baggage", "none", "none,carrier-pigeon"):
        build_export_plan(config, environ={"OTEL_PROPAGATORS": fine})
