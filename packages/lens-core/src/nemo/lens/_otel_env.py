"""The OpenTelemetry environment rules lens follows, and the exporter facts behind them.

Setup builds its exporters from these, and every `lens` command reads the same ones, so
`lens doctor` checks exactly the address and transport a job would use. Nothing here
imports the SDK: an API-only install can still ask what is configured and what is missing.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple
from urllib.parse import unquote

from nemo.lens._otlp_secrets import check_grpc_endpoint, check_headers, endpoint_host_and_port
from nemo.lens.errors import LensValueError

#: Exporter names `NemoLensConfig.exporter` accepts.
EXPORTERS: Final = ("otlp", "console", "prometheus")

SDK_EXTRA: Final = "lens-core[sdk]"
PROMETHEUS_EXTRA: Final = "lens-core[prometheus]"
AIOHTTP_EXTRA: Final = "lens-core[aiohttp]"
FASTAPI_EXTRA: Final = "lens-core[fastapi]"
#: `lens view` draws with Plotly, which this extra installs.
VIEW_EXTRA: Final = "lens-core[view]"

#: What each exporter needs importable, and the lens-core extra that installs it. OTLP is
#: satisfied by either transport (setup falls back to the one that is installed).
EXPORTER_REQUIREMENTS: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    "otlp": (
        ("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry.exporter.otlp.proto.http"),
        SDK_EXTRA,
    ),
    # The SDK, and the OTLP encoders that write its OTLP/JSON (with the OTLP exporters).
    "console": (("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.common"), SDK_EXTRA),
    "prometheus": (
        ("opentelemetry.exporter.prometheus", "prometheus_client"),
        PROMETHEUS_EXTRA,
    ),
}

#: The largest duration (milliseconds) and count any setting takes: 2**31 - 1, about 24.8
#: days. The SDK waits on its reader and batch threads with the standard library's
#: timeouts, which overflow past `threading.TIMEOUT_MAX` (about 9.2e12 ms on Linux, 4.3e9
#: ms on Windows) and kill the thread; a queue size must fit a C `ssize_t`. This bound
#: lies below both on every platform, and above any setting a job means.
MAX_DURATION_MS: Final = 2**31 - 1
#: `MAX_DURATION_MS` in seconds, for the settings read in seconds.
MAX_DURATION_S: Final = MAX_DURATION_MS // 1000
#: The largest queue or batch size: the same bound.
MAX_COUNT: Final = MAX_DURATION_MS
#: The largest `OTEL_EXPORTER_OTLP_[<SIGNAL>_]TIMEOUT`, in seconds (past ~9.2e9 s every
#: export fails).
MAX_OTLP_TIMEOUT_S: Final = MAX_DURATION_S

DEFAULT_METRIC_EXPORT_INTERVAL_MS: Final = 10000
DEFAULT_METRIC_EXPORT_TIMEOUT_MS: Final = 30000
DEFAULT_PROMETHEUS_HOST: Final = "127.0.0.1"
DEFAULT_PROMETHEUS_PORT: Final = 9464

#: OTLP transports and their default endpoints: gRPC on 4317, HTTP on 4318.
OTLP_TRANSPORTS: Final = ("grpc", "http")
#: `OTEL_EXPORTER_OTLP_[<SIGNAL>_]PROTOCOL` values (the OTLP exporter specification's); both
#: `http/*` use the HTTP exporter, which sends protobuf in every SDK release.
OTLP_PROTOCOLS: Final = ("grpc", "http/protobuf", "http/json")
#: What each transport's exporter accepts in `OTEL_EXPORTER_OTLP_[<SIGNAL>_]COMPRESSION`
#: (OpenTelemetry 1.23 to 1.45): the gRPC exporter rejects even "none".
OTLP_COMPRESSIONS: Final = {"grpc": ("gzip",), "http": ("gzip", "deflate", "none")}
#: The OTLP exporters' own timeout when `OTEL_EXPORTER_OTLP_[<SIGNAL>_]TIMEOUT` is unset;
#: the Python exporters read the variable in seconds, not the specification's milliseconds.
DEFAULT_OTLP_TIMEOUT_S: Final = 10
DEFAULT_OTLP_ENDPOINTS: Final = {"grpc": "http://localhost:4317", "http": "http://localhost:4318"}
#: (signal, transport) -> the module holding that OTLP exporter, and its class per signal.
OTLP_EXPORTER_MODULES: Final = {
    ("traces", "grpc"): "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    ("traces", "http"): "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ("metrics", "grpc"): "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    ("metrics", "http"): "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    ("logs", "grpc"): "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
    ("logs", "http"): "opentelemetry.exporter.otlp.proto.http._log_exporter",
}
OTLP_EXPORTER_CLASSES: Final = {
    "traces": "OTLPSpanExporter",
    "metrics": "OTLPMetricExporter",
    "logs": "OTLPLogExporter",
}


def install_hint(extra: str) -> str:
    """The sentence that tells a user how to get a missing package."""
    return f"install it with: pip install '{extra}'"


def is_importable(module: str) -> bool:
    """True when `module` can be imported; never raises (a missing parent is just False)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _read(environ: Mapping[str, str] | None, name: str) -> str:
    env = os.environ if environ is None else environ
    return env.get(name, "").strip()


def _read_int(
    environ: Mapping[str, str] | None,
    name: str,
    default: int,
    *,
    minimum: int,
    maximum: int,
    what: str,
    note: str = "",
) -> tuple[int, bool]:
    """`name` as an int in [`minimum`, `maximum`] and True, or `default` and False when it
    is unset or blank. Every integer setting lens reads passes here, so each has a range
    and one message (`docs/configuration.md`, "Numeric ranges").

    Raises:
        ValueError: Anything else; the message names the variable, the value and the
            range: "expected `what` in [minimum, maximum]`note`".
    """
    raw = _read(environ, name)
    if not raw:
        return default, False
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not minimum <= value <= maximum:
        raise LensValueError(
            f"Invalid value for {name}: {raw!r}; expected {what} in [{minimum}, {maximum}]{note}"
        )
    return value, True


def _otlp_variables(signal: str, setting: str) -> tuple[str, str]:
    """The two variables an OTLP exporter reads `setting` from, the signal's own first:
    `OTEL_EXPORTER_OTLP_<SIGNAL>_<SETTING>`, then `OTEL_EXPORTER_OTLP_<SETTING>`."""
    return f"OTEL_EXPORTER_OTLP_{signal.upper()}_{setting}", f"OTEL_EXPORTER_OTLP_{setting}"


def otlp_protocol(signal: str, environ: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol for `signal`, as the SDK spells it (lower-cased).

    `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL` wins over `OTEL_EXPORTER_OTLP_PROTOCOL`; the
    default is `grpc`.

    Raises:
        ValueError: The variable that decides holds a value outside `OTLP_PROTOCOLS`
            (`http`, say, which would otherwise quietly mean gRPC); the message names it.
    """
    for variable in _otlp_variables(signal, "PROTOCOL"):
        raw = _read(environ, variable)
        value = raw.lower()
        if value in OTLP_PROTOCOLS:
            return value
        if value:
            raise LensValueError(
                f"Invalid value for {variable}: {raw!r}; expected one of "
                f"{', '.join(map(repr, OTLP_PROTOCOLS))} (default 'grpc')"
            )
    return "grpc"


def otlp_transports(signal: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The transport `signal`'s protocol asks for, then the one setup falls back to.

    Raises:
        ValueError: The protocol is unknown (see `otlp_protocol`).
    """
    if otlp_protocol(signal, environ).startswith("http/"):
        return ("http", "grpc")
    return ("grpc", "http")


def otlp_transport_in_use(signal: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The transport setup would export `signal` over, given what is installed; None if neither.

    Raises:
        ValueError: The protocol is unknown (see `otlp_protocol`).
    """
    for transport in otlp_transports(signal, environ):
        if is_importable(OTLP_EXPORTER_MODULES[(signal, transport)]):
            return transport
    return None


class OtlpTarget(NamedTuple):
    """Where one or more signals go over OTLP, as the exporter would resolve it."""

    signals: tuple[str, ...]
    protocol: str
    transport: str
    endpoint: str
    host: str
    port: int


def otlp_endpoint_variable(signal: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable that sets `signal`'s OTLP endpoint, or None when neither is set.

    `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` wins over `OTEL_EXPORTER_OTLP_ENDPOINT`; a blank
    value counts as unset.
    """
    for variable in _otlp_variables(signal, "ENDPOINT"):
        if _read(environ, variable):
            return variable
    return None


def otlp_targets(
    signals: Iterable[str],
    environ: Mapping[str, str] | None = None,
    *,
    transports: Mapping[str, str] | None = None,
) -> list[OtlpTarget]:
    """Resolve the OTLP destination of each signal (`traces`, `metrics`, `logs`).

    The endpoint is `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`,
    else the default of the transport in use: `transports[signal]` when given (what is
    installed decides it, see `otlp_transport_in_use`), else the protocol's own. Signals
    that resolve to the same protocol and address share one target. Each signal's other
    exporter settings are checked too (`check_otlp_settings`), so `lens doctor` reports
    what setup would refuse.

    Raises:
        ValueError: An unknown protocol, an endpoint with no host or an invalid port, a
            gRPC endpoint with user information (not shown), or a setting
            `check_otlp_settings` refuses; the message names the variable.
    """
    merged: dict[tuple[str, str, int], OtlpTarget] = {}
    for signal in signals:
        protocol = otlp_protocol(signal, environ)
        transport = (transports or {}).get(signal) or otlp_transports(signal, environ)[0]
        check_otlp_settings(signal, transport, environ)
        variable = otlp_endpoint_variable(signal, environ)
        endpoint = _read(environ, variable) if variable else DEFAULT_OTLP_ENDPOINTS[transport]
        if variable is not None and transport == "grpc":
            check_grpc_endpoint(variable, endpoint)
        host, port = endpoint_host_and_port(endpoint)
        key = (transport, host, port)
        previous = merged.get(key)
        shared = previous.signals if previous is not None else ()
        merged[key] = OtlpTarget((*shared, signal), protocol, transport, endpoint, host, port)
    return list(merged.values())


def _lookup(environ: Mapping[str, str] | None, signal: str, setting: str) -> tuple[str, str] | None:
    """The variable an OTLP exporter reads `setting` from for `signal`, and its raw value.

    `OTEL_EXPORTER_OTLP_<SIGNAL>_<SETTING>` wins over `OTEL_EXPORTER_OTLP_<SETTING>`. A
    variable that is present counts even when blank: the exporters parse it as given.
    """
    env = os.environ if environ is None else environ
    for variable in _otlp_variables(signal, setting):
        raw = env.get(variable)
        if raw is not None:
            return variable, raw
    return None


def _lookup_set(
    environ: Mapping[str, str] | None, signal: str, setting: str
) -> tuple[str, str] | None:
    """Like `_lookup`, for a setting the exporters read as unset when it is blank."""
    env = os.environ if environ is None else environ
    for variable in _otlp_variables(signal, setting):
        raw = env.get(variable, "")
        if raw.strip():
            return variable, raw
    return None


_FILE_SETTINGS: Final = {
    "CERTIFICATE": "the CA certificate that verifies the collector",
    "CLIENT_KEY": "the client's private key, for mutual TLS",
    "CLIENT_CERTIFICATE": "the client's certificate chain, for mutual TLS",
}


def check_otlp_settings(
    signal: str, transport: str, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Check the `OTEL_EXPORTER_OTLP_*` settings `signal`'s exporter over `transport` reads.

    lens passes the OTLP exporters no arguments, so they read these variables themselves;
    for each one the signal's own variable wins over the general one, as in the exporters.
    A value an exporter would fail on with an error that does not name the variable (or
    read differently from one OpenTelemetry release to another, or, for headers, drop while
    logging it, credential included) raises here, before anything is built.

    Returns:
        Warnings to log: values the exporter reads without complaint, but as something the
        user may not mean (an `INSECURE` that is neither true nor false reads as false).

    Raises:
        ValueError: A timeout that is not a whole number of seconds in [1,
            `MAX_OTLP_TIMEOUT_S`], a compression
            the transport's exporter does not accept, a certificate or key variable that
            names no readable file, or a headers entry that is not `name=value`. The
            message names the variable and what is accepted, and never a header's value.
    """
    found = _lookup(environ, signal, "TIMEOUT")
    if found is not None:
        variable, raw = found
        try:
            timeout = int(raw)
        except ValueError:
            timeout = 0
        if not 1 <= timeout <= MAX_OTLP_TIMEOUT_S:
            # Past ~9.2e9 s every export fails: the deadline overflows.
            raise LensValueError(
                f"Invalid value for {variable}: {raw!r}; expected a positive whole number of "
                f"seconds in [1, {MAX_OTLP_TIMEOUT_S}], as the OpenTelemetry Python exporters "
                f"read it (default {DEFAULT_OTLP_TIMEOUT_S})"
            )
    found = _lookup(environ, signal, "COMPRESSION")
    if found is not None:
        variable, raw = found
        accepted = OTLP_COMPRESSIONS[transport]
        if raw.strip().lower() not in accepted:
            label = "gRPC" if transport == "grpc" else "HTTP"
            raise LensValueError(
                f"Invalid value for {variable}: {raw!r}; the OTLP {label} exporter accepts "
                f"{', '.join(map(repr, accepted))} (unset, it compresses nothing)"
            )
    for setting, what in _FILE_SETTINGS.items():
        found = _lookup_set(environ, signal, setting)
        if found is not None:
            variable, path = found
            if not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise LensValueError(
                    f"Invalid value for {variable}: {path!r} is not a readable file; expected "
                    f"the path of a PEM file holding {what}, or the variable unset"
                )
    found = _lookup_set(environ, signal, "HEADERS")
    if found is not None:
        check_headers(*found)
    warnings: list[str] = []
    found = _lookup_set(environ, signal, "INSECURE") if transport == "grpc" else None
    if found is not None and found[1].strip().lower() not in ("true", "false"):
        warnings.append(
            f"{found[0]}={found[1]!r} is neither 'true' nor 'false'; the OTLP gRPC exporter "
            "reads it as false and connects with TLS, even to an http:// endpoint"
        )
    return warnings


def metric_export_interval_ms(environ: Mapping[str, str] | None = None) -> int:
    """`OTEL_METRIC_EXPORT_INTERVAL` in milliseconds (default 10000).

    Raises:
        ValueError: The value is not an integer in [1, `MAX_DURATION_MS`] (a larger one
            would kill the SDK's reader thread at its first wait).
    """
    interval, _ = _read_int(
        environ,
        "OTEL_METRIC_EXPORT_INTERVAL",
        DEFAULT_METRIC_EXPORT_INTERVAL_MS,
        minimum=1,
        maximum=MAX_DURATION_MS,
        what="a positive integer number of milliseconds",
        note=f", e.g. {DEFAULT_METRIC_EXPORT_INTERVAL_MS}",
    )
    return interval


def metric_export_timeout_ms(environ: Mapping[str, str] | None = None) -> tuple[float, str | None]:
    """`OTEL_METRIC_EXPORT_TIMEOUT` in milliseconds (default 30000), and a warning or None.

    The SDK itself falls back to its default for a value that is not a number (with a
    warning that does not name the variable) and takes zero or a negative value as given;
    lens passes the reader this value instead, so any value that is not a positive number
    gives the default and a warning naming the variable; a value beyond
    `MAX_DURATION_MS` gives that bound and a warning.
    """
    raw = _read(environ, "OTEL_METRIC_EXPORT_TIMEOUT")
    if not raw:
        return DEFAULT_METRIC_EXPORT_TIMEOUT_MS, None
    try:
        timeout = float(raw)
    except ValueError:
        timeout = 0.0
    if 0 < timeout <= MAX_DURATION_MS:
        return timeout, None
    if MAX_DURATION_MS < timeout < math.inf:  # a wait that long overflows
        return MAX_DURATION_MS, (
            f"Invalid value for OTEL_METRIC_EXPORT_TIMEOUT: {raw!r}; expected a positive "
            f"number of milliseconds in (0, {MAX_DURATION_MS}]; using {MAX_DURATION_MS}"
        )
    return DEFAULT_METRIC_EXPORT_TIMEOUT_MS, (
        f"Invalid value for OTEL_METRIC_EXPORT_TIMEOUT: {raw!r}; expected a positive number "
        f"of milliseconds; using {DEFAULT_METRIC_EXPORT_TIMEOUT_MS}"
    )


def prometheus_address(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """The Prometheus endpoint's host and port, from `OTEL_EXPORTER_PROMETHEUS_HOST/PORT`.

    Raises:
        ValueError: The port is not an integer in [0, 65535], or the host is not ASCII
            without spaces (the resolver would raise an error naming no variable).
    """
    host = _read(environ, "OTEL_EXPORTER_PROMETHEUS_HOST") or DEFAULT_PROMETHEUS_HOST
    if not (host.isascii() and host.isprintable()) or any(char.isspace() for char in host):
        raise LensValueError(
            f"Invalid value for OTEL_EXPORTER_PROMETHEUS_HOST: {host!r}; expected an ASCII "
            "host name or IP address without spaces (an internationalized name in its "
            f"xn-- form), e.g. {DEFAULT_PROMETHEUS_HOST}, 0.0.0.0 or :: (default "
            f"{DEFAULT_PROMETHEUS_HOST})"
        )
    port, _ = _read_int(
        environ,
        "OTEL_EXPORTER_PROMETHEUS_PORT",
        DEFAULT_PROMETHEUS_PORT,
        minimum=0,
        maximum=65535,
        what="an integer port",
        note=f" (default {DEFAULT_PROMETHEUS_PORT})",
    )
    return host, port


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """`LOCAL_RANK`, the process's rank on its node; 0 when unset or blank.

    Raises:
        ValueError: The value is not an integer in [0, `MAX_COUNT`].
    """
    value, _ = _read_int(
        environ,
        "LOCAL_RANK",
        0,
        minimum=0,
        maximum=MAX_COUNT,
        what="an integer",
        note=" (the process's rank on its node, as torchrun and SLURM set it)",
    )
    return value


def prometheus_serving_address(
    *, one_exporter_per_node: bool, environ: Mapping[str, str] | None = None
) -> tuple[str, int]:
    """The address this process's Prometheus endpoint binds.

    A strategy that lets one process per node export at most (`single_rank`,
    `first_rank_per_node`) serves on `OTEL_EXPORTER_PROMETHEUS_PORT` itself; any other
    lets several ranks of a node export, and the rank with `LOCAL_RANK=k` serves on that
    port + k, so eight ranks on a node bind eight ports. Port 0 (any free port) stays 0.

    Raises:
        ValueError: The port or `LOCAL_RANK` is malformed, or port + `LOCAL_RANK` lies
            beyond 65535; the message names both variables.
    """
    host, base = prometheus_address(environ)
    if one_exporter_per_node or base == 0:
        return host, base
    offset = local_rank(environ)
    port = base + offset
    if port > 65535:
        raise LensValueError(
            f"Invalid value for OTEL_EXPORTER_PROMETHEUS_PORT: {base} + LOCAL_RANK {offset} "
            f"= {port} lies beyond 65535; with several exporting ranks per node each serves "
            "on the base port + LOCAL_RANK, so choose a base port <= "
            f"{65535 - offset}"
        )
    return host, port


#: The `OTEL_<SIGNAL>_EXPORTER` values lens accepts, per signal (one exporter a signal).
SIGNAL_EXPORTERS: Final = {
    "traces": ("none", "otlp", "console"),
    "metrics": ("none", "otlp", "console", "prometheus"),
    "logs": ("none", "otlp", "console"),
}


def signal_exporter(
    signal: str,
    configured: str,
    environ: Mapping[str, str] | None = None,
    label: str = "NemoLensConfig.exporter",
) -> str:
    """The exporter `signal` uses: `OTEL_<SIGNAL>_EXPORTER` when set, else `configured`.

    `configured` is `NemoLensConfig.exporter` (which messages call `label`); the standard
    per-signal variable, when set, decides that signal alone, and `none` turns it off.
    Blank counts as unset. lens builds one exporter per signal, so a list is refused.

    Raises:
        ValueError: The variable holds anything but one of `SIGNAL_EXPORTERS[signal]`
            (any case); the message names the variable and the accepted values.
    """
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    raw = _read(environ, variable)
    if not raw:
        return configured
    value = raw.lower()
    accepted = SIGNAL_EXPORTERS[signal]
    if value not in accepted:
        extra = ""
        if value == "prometheus":
            extra = "; Prometheus serves metrics only"
        elif "," in value:
            extra = "; lens builds one exporter per signal, so name one"
        raise LensValueError(
            f"Invalid value for {variable}: {raw!r}; expected one of "
            f"{', '.join(map(repr, accepted))} (unset: {label} decides){extra}"
        )
    return value


def configured_propagators(environ: Mapping[str, str] | None = None) -> list[str]:
    """The propagator names `OTEL_PROPAGATORS` lists (stripped, empty ones dropped); an
    empty list when it is unset or blank (the spec: blank is unset), meaning W3C trace context
    plus baggage. `propagation._propagate` has the API read these names when it loads."""
    raw = _read(environ, "OTEL_PROPAGATORS")
    return [name for name in (part.strip() for part in raw.split(",")) if name]


def sdk_disabled(environ: Mapping[str, str] | None = None) -> tuple[bool, str | None]:
    """Whether `OTEL_SDK_DISABLED` disables the SDK, and a warning for an odd value.

    As the OpenTelemetry specification says, only `true` (any case) disables it; unset,
    blank and `false` do not, and any other value does not either but earns a warning.
    """
    raw = _read(environ, "OTEL_SDK_DISABLED")
    value = raw.lower()
    if value == "true":
        return True, None
    if value in ("", "false"):
        return False, None
    return False, (
        f"OTEL_SDK_DISABLED={raw!r} is neither 'true' nor 'false'; read as false, as the "
        "OpenTelemetry specification says (the SDK stays enabled)"
    )


#: lens's service name when neither code nor the environment names one.
_DEFAULT_SERVICE_NAME: Final = "nemo"


def resource_attributes_service_name(environ: Mapping[str, str] | None = None) -> str | None:
    """`service.name` as `OTEL_RESOURCE_ATTRIBUTES` gives it (percent-decoded), or None.

    The variable is `key=value` pairs separated by commas; the last `service.name` wins,
    as in the SDK's detector, and a blank value counts as unset.
    """
    found: str | None = None
    for entry in _read(environ, "OTEL_RESOURCE_ATTRIBUTES").split(","):
        key, equals, value = entry.partition("=")
        if equals and key.strip() == "service.name":
            found = unquote(value.strip()) or None
    return found


#: What the SDK's `Resource.create` reads from the environment (its default detectors'
#: inputs, and the variable that names other detectors).
_RESOURCE_VARIABLES: Final = ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME")
_RESOURCE_DETECTORS: Final = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"


def resource_inputs() -> tuple[str, ...] | None:
    """The environment the SDK's resource detection reads, as raw values; None when
    `OTEL_EXPERIMENTAL_RESOURCE_DETECTORS` names detectors, whose results may change
    from one detection to the next."""
    if _read(None, _RESOURCE_DETECTORS):
        return None
    return tuple(os.environ.get(name, "") for name in _RESOURCE_VARIABLES)


def environment_service_name(environ: Mapping[str, str] | None = None) -> str | None:
    """The service name OpenTelemetry's variables give, or None when neither names one.

    `OTEL_SERVICE_NAME` wins over `service.name` in `OTEL_RESOURCE_ATTRIBUTES`; a name
    set in code or by the prefixed `SERVICE_NAME` variable wins over both (`NemoLensConfig`).
    """
    return _read(environ, "OTEL_SERVICE_NAME") or resource_attributes_service_name(environ)


def check_exporter_name(name: object, label: str = "NemoLensConfig.exporter") -> str:
    """Return `name` if it is one of `EXPORTERS`.

    Raises:
        ValueError: Any other value; the message names the field (`label`) and lists the
            valid ones.
    """
    if name not in EXPORTERS:
        raise LensValueError(
            f"Unknown exporter {name!r} ({label}). Valid exporters: {list(EXPORTERS)}"
        )
    return str(name)


# --- the batch span and log record processors (OTEL_BSP_*, OTEL_BLRP_*) ----------------

#: lens's batch span processor defaults, sized for training-loop bursts (the SDK's own are
#: a 2,048-span queue and 512-span batches, which eight threads ending spans overflow).
DEFAULT_BSP_MAX_QUEUE_SIZE: Final = 65536
DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE: Final = 2048
DEFAULT_BSP_SCHEDULE_DELAY_MS: Final = 5000
DEFAULT_BSP_EXPORT_TIMEOUT_MS: Final = 30000


class BatchSpanSettings(NamedTuple):
    """How lens sizes a batch processor (the SDK's four constructor arguments); the batch
    log record processor's too (`batch_log_settings`)."""

    max_queue_size: int
    max_export_batch_size: int
    schedule_delay_ms: int
    export_timeout_ms: int


DEFAULT_BSP: Final = BatchSpanSettings(
    DEFAULT_BSP_MAX_QUEUE_SIZE,
    DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_BSP_SCHEDULE_DELAY_MS,
    DEFAULT_BSP_EXPORT_TIMEOUT_MS,
)
#: The batch log record processor's defaults: the SDK's own.
DEFAULT_BLRP: Final = BatchSpanSettings(2048, 512, 1000, 30000)


def _bsp_integer(
    environ: Mapping[str, str] | None, name: str, default: int, *, minimum: int
) -> tuple[int, bool]:
    """`name` as an integer in [`minimum`, `MAX_COUNT`] (the sizes are counts, the delay
    and timeout milliseconds: one bound), and whether it was set; else `default`."""
    return _read_int(
        environ,
        name,
        default,
        minimum=minimum,
        maximum=MAX_COUNT,
        what="a positive integer" if minimum == 1 else "an integer",
        note=f" (lens's default is {default})",
    )


def batch_span_settings(environ: Mapping[str, str] | None = None) -> BatchSpanSettings:
    """The batch span processor's sizes: `OTEL_BSP_*` where set, else lens's defaults.

    `OTEL_BSP_MAX_QUEUE_SIZE` (spans; default 65536), `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`
    (spans; default 2048, and never more than the queue holds when only the queue is
    set), `OTEL_BSP_SCHEDULE_DELAY` (ms; default 5000) and `OTEL_BSP_EXPORT_TIMEOUT` (ms;
    default 30000). A batch size given without a queue size raises the queue to it.

    Raises:
        ValueError: A value is not a positive integer (the export timeout may be 0), or
            both sizes are set and the batch is larger than the queue; the message names
            the variable and what it accepts.
    """
    return _batch_settings(environ, "OTEL_BSP", DEFAULT_BSP)


def batch_log_settings(environ: Mapping[str, str] | None = None) -> BatchSpanSettings:
    """`OTEL_BLRP_*` by `batch_span_settings`'s rules, over the SDK's defaults (queue
    2048, batch 512, delay 1000 ms, timeout 30000 ms). Raises as it does."""
    return _batch_settings(environ, "OTEL_BLRP", DEFAULT_BLRP)


def _batch_settings(
    environ: Mapping[str, str] | None, prefix: str, defaults: BatchSpanSettings
) -> BatchSpanSettings:
    queue, queue_set = _bsp_integer(
        environ, f"{prefix}_MAX_QUEUE_SIZE", defaults.max_queue_size, minimum=1
    )
    batch, batch_set = _bsp_integer(
        environ, f"{prefix}_MAX_EXPORT_BATCH_SIZE", defaults.max_export_batch_size, minimum=1
    )
    delay, _ = _bsp_integer(
        environ, f"{prefix}_SCHEDULE_DELAY", defaults.schedule_delay_ms, minimum=1
    )
    timeout, _ = _bsp_integer(
        environ, f"{prefix}_EXPORT_TIMEOUT", defaults.export_timeout_ms, minimum=0
    )
    if batch > queue:
        if queue_set and batch_set:
            raise LensValueError(
                f"Invalid value for {prefix}_MAX_EXPORT_BATCH_SIZE: {batch}; expected a "
                f"positive integer no larger than {prefix}_MAX_QUEUE_SIZE ({queue})"
            )
        if queue_set:
            batch = queue
        else:
            queue = batch
    return BatchSpanSettings(queue, batch, delay, timeout)


#: The `OTEL_TRACES_SAMPLER` values lens accepts: the SDK's built-in samplers.
TRACES_SAMPLERS: Final = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
#: The SDK's sampler when `OTEL_TRACES_SAMPLER` is unset.
DEFAULT_TRACES_SAMPLER: Final = "parentbased_always_on"
#: The samplers that read a ratio from `OTEL_TRACES_SAMPLER_ARG` (1.0 when it is unset).
RATIO_TRACES_SAMPLERS: Final = frozenset({"traceidratio", "parentbased_traceidratio"})


def traces_sampler(environ: Mapping[str, str] | None = None) -> tuple[str, float]:
    """The sampler `OTEL_TRACES_SAMPLER` names and the ratio `OTEL_TRACES_SAMPLER_ARG` gives.

    The name is read stripped and in any case; unset or blank means
    `parentbased_always_on`. The ratio is 1.0 unless a ratio sampler is named and the
    argument is set; the other samplers ignore the argument. lens reads these only for
    `sampler_enabled`; otherwise the SDK reads them itself.

    Raises:
        ValueError: The name is none of `TRACES_SAMPLERS`, or a ratio sampler's argument
            is not a number in [0.0, 1.0]. (The SDK would warn and fall back instead.)
    """
    raw_name = _read(environ, "OTEL_TRACES_SAMPLER")
    name = raw_name.lower() or DEFAULT_TRACES_SAMPLER
    if name not in TRACES_SAMPLERS:
        raise LensValueError(
            f"Invalid value for OTEL_TRACES_SAMPLER: {raw_name!r}; expected one of "
            f"{', '.join(TRACES_SAMPLERS)} (default {DEFAULT_TRACES_SAMPLER}). lens reads it "
            "because NemoLensConfig.sampler_enabled is set"
        )
    raw_ratio = _read(environ, "OTEL_TRACES_SAMPLER_ARG")
    if name not in RATIO_TRACES_SAMPLERS or not raw_ratio:
        return name, 1.0
    try:
        ratio = float(raw_ratio)
    except ValueError:
        ratio = math.nan
    if math.isnan(ratio) or not 0.0 <= ratio <= 1.0:
        raise LensValueError(
            f"Invalid value for OTEL_TRACES_SAMPLER_ARG: {raw_ratio!r}; expected a number in "
            f"[0.0, 1.0] (the ratio of OTEL_TRACES_SAMPLER={name}; 1.0 when unset)"
        )
    return name, ratio
