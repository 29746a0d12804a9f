"""With only opentelemetry-api installed, lens imports and recording is a silent no-op.

Run by the nox `nooptionals` session, which sets LENS_TEST_API_ONLY=1: then an installed
SDK is an error rather than a reason to skip, so the session cannot pass by skipping.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re

import pytest
from lens_children import child_env, python_stdout
from lens_cli import run_lens_process as run_lens

SDK_INSTALLED = importlib.util.find_spec("opentelemetry.sdk") is not None
if SDK_INSTALLED and os.environ.get("LENS_TEST_API_ONLY") == "1":
    raise RuntimeError("LENS_TEST_API_ONLY=1, but opentelemetry-sdk is installed")

pytestmark = pytest.mark.skipif(
    SDK_INSTALLED, reason="opentelemetry-sdk is installed; these tests need the API alone"
)


def test_importing_lens_pulls_in_no_sdk() -> None:
    """A fresh interpreter imports nemo.lens and its metric registry without the SDK."""
    script = (
        "import json, sys\n"
        "import nemo.lens, nemo.lens.instruments\n"
        "print(json.dumps({\n"
        "    'version': nemo.lens.__version__,\n"
        "    'sdk': sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')),\n"
        "}))\n"
    )
    report = json.loads(python_stdout("-W", "error", "-c", script))
    assert report["sdk"] == []
    assert report["version"]


def test_recording_without_an_sdk_is_a_silent_no_op(caplog: pytest.LogCaptureFixture) -> None:
    """record_metrics and record_inference_metrics on the API's meters return quietly:
    no exception, no log record, no warning."""
    from opentelemetry.metrics import NoOpMeterProvider

    from nemo.lens import MetricSpec, get_meter, record_metrics, register_metric_group
    from nemo.lens.instruments import record_inference_metrics

    caplog.set_level(logging.DEBUG)
    register_metric_group(
        "train",
        [
            MetricSpec("loss", "train.loss", "gauge"),
            MetricSpec("tokens", "train.tokens", "counter", unit="{token}"),
            MetricSpec("step_time", "train.step.duration", "histogram", unit="s"),
        ],
    )

    for meter in (get_meter(), NoOpMeterProvider().get_meter("api-only")):
        record_metrics(meter, "train", loss=0.5, tokens=128, step_time=0.2)
        record_metrics(meter, "train", {"loss": 0.4}, attributes={"rank": 0})
        record_inference_metrics(meter, 0.1, model="m", input_tokens=3, output_tokens=5)

    assert caplog.records == []


def test_spans_without_an_sdk_are_non_recording() -> None:
    """The API tracer lens hands out gives non-recording spans that accept attributes."""
    from nemo.lens import get_tracer

    with get_tracer().start_as_current_span("step") as span:
        span.set_attribute("lens.step", 1)

    assert span.is_recording() is False


def test_an_exporting_setup_names_the_sdk_extra_and_a_quiet_rank_still_works() -> None:
    """setup_telemetry on an exporting rank raises ImportError naming lens-core[sdk] and
    leaves no setup behind; a rank that exports nothing needs no SDK; the logging bridge
    attaches nothing and says nothing."""
    import nemo.lens.handle
    from nemo.lens import NemoLensConfig, setup_telemetry
    from nemo.lens.logging_bridge import setup_logging_bridge

    config = NemoLensConfig(enabled=True, export_strategy="single_rank", export_rank=0)
    with pytest.raises(ImportError, match=r"lens-core\[sdk\]"):
        setup_telemetry(config, rank=0, world_size=2)
    assert nemo.lens.handle._INITIALIZED is False
    handle = setup_telemetry(config, rank=1, world_size=2)
    assert handle.is_exporting is False
    handle.shutdown()
    before = list(logging.getLogger().handlers)
    setup_logging_bridge()
    assert logging.getLogger().handlers == before


def test_instrument_aiohttp_client_names_its_extra() -> None:
    """Without the aiohttp instrumentation, instrument_aiohttp_client raises ImportError
    saying to `pip install 'lens-core[aiohttp]'` (NeMo-RL catches it)."""
    from nemo.lens.contrib.aiohttp import instrument_aiohttp_client

    with pytest.raises(ImportError, match=re.escape("pip install 'lens-core[aiohttp]'")):
        instrument_aiohttp_client()


def test_instrument_fastapi_names_its_extra() -> None:
    """Without the FastAPI instrumentation, instrument_fastapi raises ImportError saying to
    `pip install 'lens-core[fastapi]'`, before it looks at the app."""
    from nemo.lens.contrib.fastapi import instrument_fastapi

    with pytest.raises(ImportError, match=re.escape("pip install 'lens-core[fastapi]'")):
        instrument_fastapi(object())  # type: ignore[arg-type]  # no FastAPI in this install


DOCTOR_SECTIONS = (
    "versions",
    "OpenTelemetry environment",
    "configuration: NemoLensConfig.from_env(prefix='NEMO_LENS')",
    "checks",
    "result",
)


def test_doctor_prints_its_whole_report_and_what_to_install() -> None:
    """`lens doctor` on an API-only install prints every section, says once to
    `pip install 'lens-core[sdk]'`, exits 0 while telemetry is disabled, and shows no traceback."""
    result = run_lens("doctor", "--timeout", "1", env=child_env())

    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr == ""
    assert result.returncode == 0, result.stdout
    titles = [line for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert titles == list(DOCTOR_SECTIONS)
    assert "opentelemetry-sdk                        not installed" in result.stdout
    (advice,) = [line for line in result.stdout.splitlines() if "pip install" in line]
    assert advice.startswith("  note  not installed: opentelemetry-sdk, one of ")
    assert "install it with: pip install 'lens-core[sdk]'" in advice
    assert result.stdout.rstrip().endswith("all well")


@pytest.mark.parametrize(
    ("exporter", "missing", "extra"),
    [
        (
            "otlp",
            "opentelemetry-sdk, one of opentelemetry-exporter-otlp-proto-grpc or "
            "opentelemetry-exporter-otlp-proto-http",
            "lens-core[sdk]",
        ),
        (
            "console",
            "opentelemetry-sdk, opentelemetry-exporter-otlp-proto-common",
            "lens-core[sdk]",
        ),
        (
            "prometheus",
            "opentelemetry-sdk, opentelemetry-exporter-prometheus, prometheus-client",
            "lens-core[prometheus]",
        ),
    ],
)
def test_doctor_fails_an_enabled_exporter_naming_each_missing_package_once(
    exporter: str, missing: str, extra: str
) -> None:
    """With telemetry enabled, each exporter's missing packages are one FAIL naming each
    distribution once and the extra to install; still the whole report, no traceback."""
    settings = {"NEMO_LENS_ENABLED": "1", "NEMO_LENS_EXPORTER": exporter}
    result = run_lens("doctor", "--timeout", "1", env=child_env(settings))

    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == 1, result.stdout
    titles = [line for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert titles == list(DOCTOR_SECTIONS)
    expected = f"not installed: {missing}; install it with: pip install '{extra}'"
    assert f"  FAIL  {expected}" in result.stdout.splitlines()
    assert f"  - {expected}" in result.stdout.splitlines()
