"""End to end with a real Prometheus server scraping lens's pull endpoint.

The test starts `/usr/bin/prometheus` (Debian package `prometheus`) on 127.0.0.1 with a
temporary data directory and a one-second scrape of lens's endpoint, then reads back
through Prometheus's HTTP API every series it stored and compares the set, and every
value, with what the test recorded.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lens_children import free_port
from lens_integrations import require_program

from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry as lens_setup
from nemo.lens.testing import isolated_telemetry

WAIT_S = 90.0

pytestmark = pytest.mark.e2e

SPECS = [
    MetricSpec("steps", "e2e.steps", "counter"),
    MetricSpec("loss", "e2e.loss", "gauge"),
    MetricSpec("inflight", "e2e.inflight", "up_down_counter"),
    MetricSpec("latency", "e2e.latency", "histogram", unit="s"),
]


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A Prometheus server scraping 127.0.0.1:<lens port> every second; yields (url, port)."""
    prometheus = require_program("prometheus")
    lens_port = free_port()
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: lens\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 1s\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{lens_port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"prometheus exited early: {(tmp_path / 'prometheus.log').read_text()}")
            try:
                if get(f"{url}/-/ready"):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready")
            time.sleep(0.2)
        yield url, lens_port
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
        log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    body = get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


# The SDK's default histogram boundaries, which lens does not change.
BOUNDARIES = (0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000)
LATENCIES = (0.5, 1.5, 7.0)


def expected_series() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample kind, labels) -> value, computed from what the test records."""
    expected = {
        ("steps_total", (("phase", "train"),)): 1000.0,
        ("steps_total", (("phase", "eval"),)): 4.0,
        ("loss", ()): 0.25,
        ("inflight", ()): 3.0,
        ("latency_count", ()): float(len(LATENCIES)),
        ("latency_sum", ()): float(sum(LATENCIES)),
    }
    for bound in (*BOUNDARIES, float("inf")):
        count = float(sum(1 for latency in LATENCIES if latency <= bound))
        expected[("latency_bucket", (("le", repr(float(bound))),))] = count
    return expected


def sample_kind(name: str) -> str:
    """Strip the exporter's naming (prefix, unit and `_total` suffixes) down to a kind.

    Exporter releases differ in the unit suffix (`e2e_latency_s_*` vs `_seconds_*`) and in
    whether a counter ends in `_total`, so the comparison keys on the family and the kind.
    """
    family, _, rest = name.removeprefix("e2e_").partition("_")
    suffix = rest.rsplit("_", 1)[-1] if rest else ""
    if family == "steps":
        return "steps_total"
    if family == "latency" and suffix in ("count", "sum", "bucket"):
        return f"latency_{suffix}"
    return family


def stored_series(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample kind, labels) -> the last value Prometheus stored, for every e2e_ series.

    A range selector returns every stored sample but never a staleness marker, so a gauge
    that older SDKs report in one collection only is still found.
    """
    found = {}
    for series in query(url, '{job="lens", __name__=~"e2e_.*"}[10m]'):
        labels = dict(series["metric"])
        name = labels.pop("__name__")
        if name.endswith("_created"):
            continue
        kept = {
            key: (repr(float(value)) if key == "le" else value)
            for key, value in labels.items()
            if key not in ("job", "instance") and not key.startswith("otel_scope_")
        }
        found[(sample_kind(name), tuple(sorted(kept.items())))] = float(series["values"][-1][1])
    return found


def test_prometheus_scrapes_every_series_with_its_value(
    prometheus_server: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prometheus stores exactly the recorded series (no more), each with its recorded value."""
    url, lens_port = prometheus_server
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(lens_port))
    handle = lens_setup(
        NemoLensConfig(
            enabled=True, exporter="prometheus", service_name="e2e-prom", run_id="promrun"
        ),
        rank=0,
        world_size=1,
    )
    try:
        register_metric_group("e2e", SPECS)
        for _ in range(1000):
            record_metrics(handle.meter, "e2e", steps=1, attributes={"phase": "train"})
        record_metrics(handle.meter, "e2e", steps=4, attributes={"phase": "eval"})
        record_metrics(handle.meter, "e2e", loss=0.25)
        record_metrics(handle.meter, "e2e", inflight=5)
        record_metrics(handle.meter, "e2e", inflight=-2)
        for latency in LATENCIES:
            record_metrics(handle.meter, "e2e", latency=latency)

        expected = expected_series()
        deadline = time.monotonic() + WAIT_S
        stored = stored_series(url)
        while stored != expected and time.monotonic() < deadline:
            time.sleep(0.5)
            stored = stored_series(url)
        assert stored == expected
        assert query(url, 'up{job="lens"}')[0]["value"][1] == "1"
        info = query(url, 'target_info{job="lens"}[10m]')
        assert len(info) == 1
        assert info[0]["metric"]["nemo_run_id"] == "promrun"
        assert info[0]["metric"]["service_instance_id"] == "promrun-rank0"
    finally:
        handle.shutdown()
