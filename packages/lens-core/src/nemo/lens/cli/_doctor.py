"""`lens doctor`: versions, the configuration the environment gives, and whether each
signal's exporter is installed and can reach its endpoint."""

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

from nemo.lens import _export_plan, _otel_env
from nemo.lens._export_plan import SignalPlan
from nemo.lens._redaction import REDACTED, is_secret_key, redact_url_credentials
from nemo.lens.cli._common import (
    EXIT_BAD_INPUT,
    bind_problem,
    connect_problem,
    distribution_of,
    import_target,
    load_targets,
    non_negative_float,
    print_report,
)
from nemo.lens.version import __version__

HELP = "show versions and configuration, and check the exporter endpoint"
DESCRIPTION = """\
Print the versions of lens, the OpenTelemetry API and SDK and every installed
OpenTelemetry exporter; the NemoLensConfig that NemoLensConfig.from_env() resolves from
the environment; and, for each signal, whether its exporter (OTEL_<SIGNAL>_EXPORTER, else
PREFIX_EXPORTER) is installed and can reach its endpoint (OTLP: a TCP connection to each
signal's endpoint; Prometheus: whether the port can be bound).

While telemetry is disabled (PREFIX_ENABLED unset or false, or OTEL_SDK_DISABLED=true),
a missing package, an unreachable endpoint or a port in use is a note, not a problem;
--strict makes them problems anyway, as they would be for an enabled job.
"""
EPILOG = """\
examples:
  lens doctor
  NEMO_LENS_EXPORTER=prometheus lens doctor
  lens doctor --prefix NEMO_RL_OTEL --fallback-prefix NEMO_LENS --import nemo_rl.telemetry
  lens doctor --strict      # in CI, before the job that enables telemetry

exit status: 0 all well (or the reader closed the pipe early, as `| head` does); 1 a
problem was found (each is printed with what to do); 2 bad input.
"""

_OTEL_DISTRIBUTIONS: Final = ("opentelemetry-api", "opentelemetry-sdk")

HIDDEN: Final = "<set, value hidden>"
# One `key=value` item of a comma-separated list (OTEL_RESOURCE_ATTRIBUTES, headers).
_LIST_ITEM: Final = re.compile(r"(?P<key>[^,=\s]+)(?P<equals>\s*=\s*)(?P<value>[^,]*)")


def hide_secrets(text: str) -> str:
    """`text` as `lens doctor` prints it: URL passwords and token user names hidden
    (`https://user:***@host:4318`, `https://***@host`), and the value of every
    `key=value` pair whose key is secret by lens's redaction rule, a URL's query
    parameters included (`?token=[REDACTED]`). Every line it prints passes here."""
    return redact_url_credentials(text)


def _hide_list_item(match: re.Match[str]) -> str:
    if is_secret_key(match["key"]):
        return f"{match['key']}{match['equals']}{REDACTED}"
    return match[0]


def shown_variable(name: str, value: str) -> str:
    """How `lens doctor` prints environment variable `name`: never a credential in clear.

    Headers (API keys, bearer tokens) and variables whose name is secret-looking (by lens's
    redaction rule) are shown as set but hidden; elsewhere, URL passwords are hidden and a
    `key=value` list item whose key is secret-looking has its value redacted.
    """
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
    # one, may carry a password in its URL or a token in its query.

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
    parser.add_argument(
        "--strict",
        action="store_true",
        help="while telemetry is off (PREFIX_ENABLED or OTEL_SDK_DISABLED), still fail on "
        "a missing package, an unreachable endpoint or a port in use, as an enabled job would",
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


def _check_config(
    report: Report, config: Any, prefix: str, environ: Mapping[str, str], strict: bool
) -> str | None:
    """Check the configuration; return why nothing will export, or None when it will.

    The reason softens a missing package or an unreachable endpoint into a note; with
    `strict`, None is returned all the same, so they stay problems.
    """
    report.section("checks")
    idle: str | None = None
    if config.enabled:
        report.ok("telemetry is enabled")
    else:
        enable = _variable(config, prefix, "enabled")
        report.note(f"telemetry is disabled; set {enable}=1 to export")
        idle = "telemetry is disabled"
    disabled, odd_value = _otel_env.sdk_disabled(environ)
    if disabled:
        report.note(
            "OTEL_SDK_DISABLED is true: setup_telemetry builds no pipeline because of it "
            "(no exporter, no port bound, handle.is_exporting is False); unset it to export"
        )
        idle = "OTEL_SDK_DISABLED is true"
    elif odd_value is not None:
        report.note(odd_value)
    if config.exporter not in _otel_env.EXPORTERS:
        report.fail(
            f"{_variable(config, prefix, 'exporter')}={config.exporter!r} is not an exporter; "
            f"expected one of "
            f"{list(_otel_env.EXPORTERS)}"
        )
    from nemo.lens.strategies import registered_strategies

    strategies = registered_strategies()
    if config.export_strategy in strategies:
        report.ok(f"export strategy {config.export_strategy!r} is registered")
    else:
        report.fail(
            f"{_variable(config, prefix, 'export_strategy')}={config.export_strategy!r} is not "
            "registered; expected "
            f"one of {strategies} (or --import the module that registers it)"
        )
    try:
        groups = config.resolved_span_groups
    except ValueError as exc:
        report.fail(f"{_variable(config, prefix, 'span_groups')}={config.span_groups!r}: {exc}")
    else:
        report.ok(f"span groups {config.span_groups!r} enable {sorted(groups)}")
    return None if strict else idle


def _variable(config: Any, prefix: str, field_name: str) -> str:
    """The variable field `field_name` was read from (a fallback one included), else the
    prefixed one that would set it."""
    source = config._env_source(field_name)
    return str(source[0]) if source is not None else f"{prefix}_{field_name.upper()}"


def _would_fail(report: Report, text: str, idle: str | None) -> None:
    """A problem for a job that exports; a note while nothing exports (`idle` says why)."""
    if idle is None:
        report.fail(text)
    else:
        report.note(f"{text} (no problem while {idle}; --strict fails on it)")


def _plan_signals(
    report: Report, config: Any, prefix: str, environ: Mapping[str, str]
) -> dict[str, SignalPlan]:
    """Each exporting signal's plan, built as setup builds it (`nemo.lens._export_plan`);
    every setting it refuses is a problem, every warning it gives a note."""
    from nemo.lens.strategies import _exports_once_per_node

    if config.exporter not in _otel_env.EXPORTERS:
        return {}  # the configuration check has failed already
    unresolved = False
    warnings: list[str] = []
    notes: list[str] = []
    plans: dict[str, SignalPlan] = {}
    for signal in _export_plan.SIGNALS:
        try:
            # Signal by signal (setup stops at the first), so every bad one is reported.
            exporter = _export_plan.signal_exporter(signal, config, environ)
            plan = _export_plan.plan_signal(
                signal,
                exporter,
                config,
                environ=environ,
                one_exporter_per_node=_exports_once_per_node(config.export_strategy),
                warnings=warnings,
                notes=notes,
            )
        except ValueError as exc:
            if str(exc) not in report.problems:  # a setting all signals share: once
                report.fail(str(exc))
            unresolved = True
            continue
        variable = f"OTEL_{signal.upper()}_EXPORTER"
        if exporter == "none" and getattr(config, f"{signal}_enabled"):
            report.note(f"{variable}=none turns {signal} off")
        if plan is None:
            continue
        plans[signal] = plan
        if exporter != config.exporter:
            report.ok(
                f"{variable}={exporter!r} sends {signal} to {exporter}, not to "
                f"{_variable(config, prefix, 'exporter')}'s {config.exporter!r}"
            )
        if plan.exporter != exporter:
            report.ok(f"{signal} go to {plan.destination()}: {exporter} serves metrics only")
    for text in (*dict.fromkeys(warnings), *notes):
        report.note(text)
    if not plans and not unresolved:
        report.note("no signal is exported, so no exporter package or endpoint is checked")
    return plans


def _missing_distributions(exporter: str) -> list[str]:
    """The distributions `exporter` needs that are not installed, each named once."""
    modules, _extra = _otel_env.EXPORTER_REQUIREMENTS[exporter]
    sdk = "opentelemetry.sdk"
    exporter_modules = [name for name in dict.fromkeys(modules) if name != sdk]
    missing_exporters = [
        distribution_of(name) for name in exporter_modules if not _otel_env.is_importable(name)
    ]
    missing = [] if _otel_env.is_importable(sdk) else [distribution_of(sdk)]
    if exporter != "otlp":
        missing += missing_exporters
    elif len(missing_exporters) == len(exporter_modules):
        # Setup falls back to the other OTLP transport, so one of the two is enough.
        missing.append(f"one of {' or '.join(missing_exporters)}")
    return missing


def _check_packages(report: Report, exporters: list[str], idle: str | None) -> None:
    """Check the SDK and the exporters' packages import; name each missing one once."""
    if not exporters:
        return
    missing: dict[str, None] = {}
    extras: dict[str, None] = {}
    for exporter in exporters:
        found = _missing_distributions(exporter)
        if found:
            missing.update(dict.fromkeys(found))
            extras[_otel_env.EXPORTER_REQUIREMENTS[exporter][1]] = None
    if not missing:
        names = " and ".join(exporters)
        report.ok(
            f"the SDK and the {names} exporter{'s' if len(exporters) > 1 else ''} are installed"
        )
        return
    hints = "; ".join(_otel_env.install_hint(extra) for extra in extras)
    _would_fail(report, f"not installed: {', '.join(missing)}; {hints}", idle)


def _check_endpoints(
    report: Report, plans: Mapping[str, SignalPlan], timeout: float, idle: str | None
) -> None:
    """Probe exactly the destinations the plans name."""
    console = [signal for signal, plan in plans.items() if plan.exporter == "console"]
    if console:
        path = plans[console[0]].console_path
        where = repr(path) if path else "stdout"
        report.ok(
            f"the console exporter writes OTLP/JSON lines to {where} "
            f"({', '.join(console)}); no endpoint to reach"
        )
    for plan in plans.values():
        if plan.prometheus_address is not None:
            _check_prometheus(report, plan.prometheus_address, idle)
    otlp: dict[tuple[str, str, int], list[SignalPlan]] = {}
    for plan in plans.values():
        if plan.otlp is not None:
            key = (plan.otlp.transport, plan.otlp.host, plan.otlp.port)
            otlp.setdefault(key, []).append(plan)
    for sharing in otlp.values():
        _check_otlp(report, sharing, timeout, idle)


def _check_prometheus(report: Report, address: tuple[str, int], idle: str | None) -> None:
    host, port = address
    problem = bind_problem(host, port)
    if problem is None:
        report.ok(f"prometheus can serve http://{host}:{port}/metrics (the port is free)")
    else:
        _would_fail(
            report,
            f"prometheus cannot serve on {host}:{port}: {problem}; set "
            "OTEL_EXPORTER_PROMETHEUS_PORT to a free port or stop what holds it",
            idle,
        )


def _check_otlp(report: Report, plans: list[SignalPlan], timeout: float, idle: str | None) -> None:
    """One OTLP destination the `plans` share (same transport, host and port)."""
    target = plans[0].otlp
    assert target is not None  # the caller groups OTLP plans only
    signals = ", ".join(plan.signal for plan in plans)
    what = f"OTLP {target.protocol} endpoint {target.endpoint} ({signals})"
    if not target.protocol.startswith(target.transport):
        what += f", sent over {target.transport}: the other transport is not installed"
    problem = connect_problem(target.host, target.port, timeout)
    if problem is None:
        report.ok(f"{what} accepts TCP connections")
    else:
        _would_fail(
            report,
            f"{what} is not reachable: {problem}; start a collector there or set "
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            idle,
        )


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 when nothing failed, else 1 (0 too when the reader left early)."""
    if not load_targets(args.imports, "lens doctor"):
        return EXIT_BAD_INPUT
    report = Report()
    _versions(report)
    _otel_environment(report, os.environ)
    config = _load_config(report, args)
    if config is not None:
        idle = _check_config(report, config, args.prefix, os.environ, args.strict)
        plans = _plan_signals(report, config, args.prefix, os.environ)
        exporters = [plan.exporter for plan in plans.values()]
        _check_packages(report, list(dict.fromkeys(exporters)), idle)
        _check_endpoints(report, plans, args.timeout, idle)
    report.section("result")
    if report.problems:
        count = len(report.problems)
        report.lines.append(f"  {count} problem{'s' if count > 1 else ''} found:")
        report.lines += [f"  - {problem}" for problem in report.problems]
    else:
        report.lines.append("  all well")
    if not print_report("\n".join(report.lines)):
        return 0
    return 1 if report.problems else 0
