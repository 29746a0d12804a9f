"""Packaging: the namespace, the public names and the version."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pathlib
import pkgutil

import pytest
from lens_children import child_env, python_stdout

import nemo
import nemo.lens


def test_nemo_is_a_namespace_package() -> None:
    """`nemo` has no __init__.py, so other distributions can share it."""
    assert getattr(nemo, "__file__", None) is None
    assert not any((pathlib.Path(entry) / "__init__.py").exists() for entry in nemo.__path__)


def test_version_matches_distribution_metadata() -> None:
    """nemo.lens.__version__ is the installed lens-core version."""
    assert nemo.lens.__version__ == importlib.metadata.version("lens-core")


def test_py_typed_is_shipped() -> None:
    """The package carries the PEP 561 marker."""
    assert (pathlib.Path(nemo.lens.__file__).parent / "py.typed").is_file()


def test_every_public_name_imports_from_every_public_module() -> None:
    """Each name in each public module's __all__ exists, and each __all__ is sorted."""
    checked = 0
    for module_info in pkgutil.walk_packages(nemo.lens.__path__, "nemo.lens."):
        if any(part.startswith("_") for part in module_info.name.split(".")):
            continue
        module = importlib.import_module(module_info.name)
        names = getattr(module, "__all__", None)
        if names is None:
            continue
        assert list(names) == sorted(names), module_info.name
        for name in names:
            assert hasattr(module, name), f"{module_info.name}.{name}"
        checked += 1
    root_names = nemo.lens.__all__
    assert list(root_names) == sorted(root_names)
    assert all(hasattr(nemo.lens, name) for name in root_names)
    assert checked >= 2


def test_root_all_is_the_specified_list() -> None:
    """The root exports exactly the names of the spec's section 1, phase 2 included."""
    assert nemo.lens.__all__ == [
        "DEFAULT_REDACT_KEYS",
        "ExportStrategy",
        "MetricSpec",
        "NemoLensConfig",
        "SpanGroup",
        "SpanRegistry",
        "TelemetryHandle",
        "__version__",
        "broadcast_trace_context",
        "create_linked_span",
        "enabled_span_groups",
        "extract_context",
        "get_meter",
        "get_tracer",
        "inject_context",
        "is_span_group_enabled",
        "managed_span",
        "pending_span_groups",
        "record_metrics",
        "redact_value",
        "register_export_strategy",
        "register_metric_group",
        "registered_metric_groups",
        "registered_strategies",
        "safe_set_span_attributes",
        "set_enabled_span_groups",
        "setup_telemetry",
        "span_cm",
        "trace_fn",
        "unregister_export_strategy",
        "unregister_metric_group",
    ]


def test_root_names_resolve_lazily_to_the_defining_objects() -> None:
    """Every root name is the very object its module defines, loaded on first access."""
    lazy = nemo.lens._LAZY_EXPORTS
    assert set(nemo.lens.__all__) == {*lazy, "__version__", "get_meter", "get_tracer"}
    for name, module_name in lazy.items():
        assert getattr(nemo.lens, name) is getattr(importlib.import_module(module_name), name)
    assert set(nemo.lens.__all__) <= set(dir(nemo.lens))


def test_unknown_root_attribute_is_an_attribute_error() -> None:
    """A name lens does not export raises AttributeError, as for any module."""
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'record_rl_metrics'"):
        _ = nemo.lens.record_rl_metrics


def test_bare_import_loads_no_submodule_but_version() -> None:
    """`import nemo.lens` alone loads only the package, its version module and the finder
    of the shims' legacy modules (which must be in place before any submodule import)."""
    code = (
        "import sys, nemo.lens; print(sorted(m for m in sys.modules if m.startswith('nemo.lens')))"
    )
    assert python_stdout("-c", code).strip() == (
        "['nemo.lens', 'nemo.lens._legacy_modules', 'nemo.lens.version']"
    )


def test_bare_import_loads_no_sdk_integration_or_runtime() -> None:
    """`import nemo.lens` loads no SDK, exporter, instrumentation, Ray or torch, and none of
    lens's optional modules (distributed, contrib, resources, testing, ...)."""
    code = "import sys, nemo.lens; print('\\n'.join(sorted(sys.modules)))"
    loaded = python_stdout("-c", code).split()
    forbidden = (
        "opentelemetry.sdk",
        "opentelemetry.exporter",
        "opentelemetry.instrumentation",
        "prometheus_client",
        "ray",
        "torch",
        "nemo.lens.distributed",
        "nemo.lens.contrib",
        "nemo.lens.resources",
        "nemo.lens.testing",
        "nemo.lens.semconv",
        "nemo.lens.logging_bridge",
        "nemo.lens.cli",
    )
    offenders = [
        name
        for name in loaded
        for prefix in forbidden
        if name == prefix or name.startswith((prefix + ".", prefix + "_"))
    ]
    assert offenders == []
    assert "nemo.lens" in loaded


def test_a_setup_without_logs_loads_only_the_modules_it_uses() -> None:
    """A setup exporting traces and metrics to injected exporters, and its shutdown, load
    neither the logs signal's modules (the SDK's, the API's, lens's) nor the console
    exporter, nor `importlib.metadata` (for OTEL_PROPAGATORS), `hashlib` (the rank hash)
    or, with OTEL_PROPAGATORS unset, `opentelemetry.propagate` (the API's default)."""
    script = (
        "import json, sys\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import (\n"
        "    InMemorySpanExporter)\n"
        "from nemo.lens import NemoLensConfig, setup_telemetry\n"
        "before = set(sys.modules)\n"
        "handle = setup_telemetry(NemoLensConfig(enabled=True),\n"
        "    metric_reader=InMemoryMetricReader(), span_exporter=InMemorySpanExporter())\n"
        "handle.shutdown()\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before if '_logs' in m\n"
        "    or m.startswith(('nemo.lens._sdk._logging', 'nemo.lens._sdk._console',\n"
        "        'importlib.metadata', 'hashlib', 'opentelemetry.propagate')))))\n"
    )
    assert "OTEL_PROPAGATORS" not in child_env()
    assert json.loads(python_stdout("-c", script)) == []


@pytest.mark.parametrize(
    ("module", "third_party"),
    [
        ("nemo.lens.contrib.aiohttp", ("aiohttp",)),
        ("nemo.lens.contrib.fastapi", ("fastapi", "starlette")),
    ],
)
def test_importing_an_integration_loads_none_of_its_packages(
    module: str, third_party: tuple[str, ...]
) -> None:
    """Importing a contrib integration in a fresh interpreter imports neither the framework
    it instruments nor any OpenTelemetry instrumentation package: only calling it does."""
    script = (
        "import json, sys\n"
        f"import {module}\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        f"    if m.split('.')[0] in {third_party!r}\n"
        "    or m.startswith('opentelemetry.instrumentation'))))\n"
    )
    assert json.loads(python_stdout("-W", "error", "-c", script)) == []
