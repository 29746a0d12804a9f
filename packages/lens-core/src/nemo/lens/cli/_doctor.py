"""`lens doctor`: versions, the configuration the environment gives, and whether the
configured exporter can reach its endpoint."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Final

from nemo.lens import _otel_env
from nemo.lens.cli._common import (
    EXIT_BAD_INPUT,
    bind_problem,
    connect_problem,
    import_target,
    load_targets,
    non_negative_float,
)
from nemo.lens.version import __version__

HELP = "show versions and configuration, and check the exporter endpoint"
DESCRIPTION = """\
Print the versions of lens, the OpenTelemetry API and SDK and every installed
OpenTelemetry exporter; the NemoLensConfig that NemoLensConfig.from_env() resolves from
the environment; and whether the configured exporter can reach its endpoint (OTLP: a TCP
connection to each signal's endpoint; Prometheus: whether the port can be bound).
"""
EPILOG = """\
examples:
  lens doctor
  NEMO_LENS_EXPORTER=prometheus lens doctor
  lens doctor --prefix NEMO_RL_OTEL --fallback-prefix NEMO_LENS --import nemo_rl.telemetry

exit status: 0 all well; 1 a problem was found (each is printed with what to do);
2 bad input.
"""

_OTEL_DISTRIBUTIONS: Final = ("opentelemetry-api", "opentelemetry-sdk")

HIDDEN: Final = "<set, value hidden>"
# The user-information part of a URL (`scheme://user:password@`); the last `@` before the
# path ends it, as urllib reads it, so a password holding a raw `@` is hidden whole.
_URL_USERINFO: Final = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@"
)
# One `key=value` item of a comma-separated list (OTEL_RESOURCE_ATTRIBUTES, headers).
_LIST_ITEM: Final = re.compile(r"(?P<key>[^,=\s]+)(?P<equals>\s*=\s*)(?P<value>[^,]*)")


def _hide_password(match: re.Match[str]) -> str:
    user, colon, _password = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:***@" if colon else match[0]


def hide_secrets(text: str) -> str:
    """`text` with every URL password replaced by `***` (`https://user:***@host:4318`)."""
    return _URL_USERINFO.sub(_hide_password, text) if "@" in text else text


def _hide_list_item(match: re.Match[str]) -> str:
    from nemo.lens.helpers import REDACTED, is_secret_key

    if is_secret_key(match["key"]):
        return f"{match['key']}{match['equals']}{REDACTED}"
    return match[0]


def shown_variable(name: str, value: str) -> str:
    """How `lens doctor` prints environment variable `name`: never a credential in clear.

    Headers (API keys, bearer tokens) and variables whose name is secret-looking (by lens's
    redaction rule) are shown as set but hidden; elsewhere, URL passwords are hidden and a
    `key=value` list item whose key is secret-looking has its value redacted.
    """
    from nemo.lens.helpers import is_secret_key

    if "HEADERS" in name.upper() or is_secret_key(name):
        return HIDDEN
    shown = hide_secrets(value)
    if "=" in shown:
        shown = _LIST_ITEM.sub(_hide_list_item, shown)
    return repr(shown)


@dataclass
class Report:
    """What `lens doctor` found: lines to print and the problems among them."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def section(self, title: str) -> None:
        """Start a titled block of lines."""
        if self.lines:
            self.lines.append("")
        self.lines.append(title)

    # Every line goes through hide_secrets: an endpoint, or an error message quoting
    # one, may carry a password in its URL.

    def info(self, label: str, value: object) -> None:
        """Add one `label: value` line."""
        self.lines.append(hide_secrets(f"  {label:<40} {value}"))

    def ok(self, text: str) -> None:
        """Add a check that passed."""
        self.lines.append(hide_secrets(f"  ok    {text}"))

    def note(self, text: str) -> None:
        """Add an observation that does not fail the run."""
        self.lines.append(hide_secrets(f"  note  {text}"))

    def fail(self, text: str) -> None:
        """Add a problem; any problem makes the exit status 1."""
        text = hide_secrets(text)
        self.lines.append(f"  FAIL  {text}")
        self.problems.append(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `lens doctor`."""
    parser.add_argument(
        "--prefix",
        default="NEMO_LENS",
        help="environment prefix passed to NemoLensConfig.from_env (default: %(default)s)",
    )
    parser.add_argument(
        "--fallback-prefix",
        default=None,
        metavar="PREFIX",
        help="prefix read when a PREFIX_KEY variable is unset, as consumers pass it",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        type=import_target,
        metavar="MODULE[:CALLABLE]",
        help="import a module first (and call CALLABLE), so the span groups and export "
        "strategies it registers are known; repeatable",
    )
    parser.add_argument(
        "--timeout",
        type=non_negative_float,
        default=2.0,
        metavar="SECONDS",
        help="how long to wait for each TCP connection (default: %(default)s)",
    )


def _installed_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _exporter_distributions() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for distribution in metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()
        if name.startswith("opentelemetry-exporter-") or name == "prometheus-client":
            found[name] = distribution.version
    return sorted(found.items())


def _versions(report: Report) -> None:
    import nemo.lens

    report.section("versions")
    report.info("python", f"{platform.python_version()} ({sys.executable})")
    location = os.path.dirname(nemo.lens.__file__ or "")
    report.info(
        "lens-core", f"{_installed_version('lens-core')} (nemo.lens {__version__} in {location})"
    )
    for distribution in _OTEL_DISTRIBUTIONS:
        report.info(distribution, _installed_version(distribution))
    exporters = _exporter_distributions()
    if not exporters:
        report.info("exporters", "none installed")
    for name, version in exporters:
        report.info(name, version)


def _otel_environment(report: Report, environ: Mapping[str, str]) -> None:
    report.section("OpenTelemetry environment")
    names = sorted(name for name in environ if name.startswith("OTEL_"))
    if not names:
        report.lines.append("  (no OTEL_* variable is set)")
    for name in names:
        report.info(name, shown_variable(name, environ[name]))


def _load_config(report: Report, args: argparse.Namespace) -> Any | None:
    from nemo.lens.config import NemoLensConfig

    prefixes = repr(args.prefix)
    if args.fallback_prefix:
        prefixes += f", fallback_prefix={args.fallback_prefix!r}"
    report.section(f"configuration: NemoLensConfig.from_env(prefix={prefixes})")
    try:
        config = NemoLensConfig.from_env(prefix=args.prefix, fallback_prefix=args.fallback_prefix)
    except ValueError as exc:
        report.fail(f"the environment does not give a valid configuration: {exc}")
        return None
    for config_field in dataclasses.fields(config):
        if not config_field.name.startswith("_"):
            report.info(config_field.name, repr(getattr(config, config_field.name)))
    return config


def _check_config(report: Report, config: Any, prefix: str) -> None:
    report.section("checks")
    if config.enabled:
        report.ok("telemetry is enabled")
    else:
        report.note(f"telemetry is disabled; set {prefix}_ENABLED=1 to export")
    if config.exporter not in _otel_env.EXPORTERS:
        report.fail(
            f"{prefix}_EXPORTER={config.exporter!r} is not an exporter; expected one of "
            f"{list(_otel_env.EXPORTERS)}"
        )
    from nemo.lens.strategies import registered_strategies

    strategies = registered_strategies()
    if config.export_strategy in strategies:
        report.ok(f"export strategy {config.export_strategy!r} is registered")
    else:
        report.fail(
            f"{prefix}_EXPORT_STRATEGY={config.export_strategy!r} is not registered; expected "
            f"one of {strategies} (or --import the module that registers it)"
        )
    try:
        groups = config.resolved_span_groups
    except ValueError as exc:
        report.fail(f"{prefix}_SPAN_GROUPS={config.span_groups!r}: {exc}")
    else:
        report.ok(f"span groups {config.span_groups!r} enable {sorted(groups)}")


def _check_packages(report: Report, config: Any) -> bool:
    """Check the SDK and the exporter's packages import; False when one is missing."""
    if config.exporter not in _otel_env.EXPORTER_REQUIREMENTS:
        return False
    modules, extra = _otel_env.EXPORTER_REQUIREMENTS[config.exporter]
    needed = ("opentelemetry.sdk", *modules)
    missing = [name for name in needed if not _otel_env.is_importable(name)]
    if config.exporter == "otlp" and len(missing) == 1 and missing[0] != "opentelemetry.sdk":
        # Setup falls back to the other OTLP transport, so one of the two is enough.
        missing = []
    if not missing:
        report.ok(f"the SDK and the {config.exporter} exporter are installed")
        return True
    text = f"{', '.join(missing)} not installed; {_otel_env.install_hint(extra)}"
    if config.enabled:
        report.fail(text)
    else:
        report.note(text)
    return False


def _check_endpoint(
    report: Report, config: Any, environ: Mapping[str, str], timeout: float
) -> None:
    if config.exporter == "console":
        report.ok("the console exporter writes JSON lines to stdout; no endpoint to reach")
        return
    if config.exporter == "prometheus":
        try:
            host, port = _otel_env.prometheus_address(environ)
        except ValueError as exc:
            report.fail(str(exc))
            return
        problem = bind_problem(host, port)
        if problem is None:
            report.ok(f"prometheus can serve http://{host}:{port}/metrics (the port is free)")
        else:
            report.fail(
                f"prometheus cannot serve on {host}:{port}: {problem}; set "
                "OTEL_EXPORTER_PROMETHEUS_PORT to a free port or stop what holds it"
            )
        return
    signals = [
        name
        for name, wanted in (
            ("traces", config.traces_enabled),
            ("metrics", config.metrics_enabled),
            ("logs", config.logs_enabled),
        )
        if wanted
    ]
    if not signals:
        report.note("no signal is enabled, so no OTLP endpoint is used")
        return
    try:
        # The transport setup would really use: the protocol's, or the other one when only
        # that one is installed (setup falls back to it), whose default port differs.
        transports = {
            signal: transport
            for signal in signals
            if (transport := _otel_env.otlp_transport_in_use(signal, environ)) is not None
        }
        targets = _otel_env.otlp_targets(signals, environ, transports=transports)
    except ValueError as exc:
        report.fail(str(exc))
        return
    for target in targets:
        what = f"OTLP {target.protocol} endpoint {target.endpoint} ({', '.join(target.signals)})"
        if target.transport != _otel_env.otlp_transports(target.signals[0], environ)[0]:
            what += f", sent over {target.transport}: the other transport is not installed"
        problem = connect_problem(target.host, target.port, timeout)
        if problem is None:
            report.ok(f"{what} accepts TCP connections")
        else:
            report.fail(
                f"{what} is not reachable: {problem}; start a collector there or set "
                "OTEL_EXPORTER_OTLP_ENDPOINT"
            )


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 when nothing failed, else 1."""
    if not load_targets(args.imports, "lens doctor"):
        return EXIT_BAD_INPUT
    report = Report()
    _versions(report)
    _otel_environment(report, os.environ)
    config = _load_config(report, args)
    if config is not None:
        _check_config(report, config, args.prefix)
        if _check_packages(report, config):
            _check_endpoint(report, config, os.environ, args.timeout)
    report.section("result")
    if report.problems:
        count = len(report.problems)
        report.lines.append(f"  {count} problem{'s' if count > 1 else ''} found:")
        report.lines += [f"  - {problem}" for problem in report.problems]
    else:
        report.lines.append("  all well")
    print("\n".join(report.lines))
    return 1 if report.problems else 0
