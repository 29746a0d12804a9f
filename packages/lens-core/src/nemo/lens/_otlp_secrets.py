"""The two OTLP settings that carry credentials, endpoints and headers: parsed and checked,
never shown.

`_otel_env` applies these rules to `OTEL_EXPORTER_OTLP_[<SIGNAL>_]ENDPOINT` and `..._HEADERS`
(and re-exports `endpoint_host_and_port`); a message quotes an endpoint only with its
credentials hidden (`_redaction.redact_url_credentials`), and a header's value never.
"""

from __future__ import annotations

import string
from typing import Final
from urllib.parse import SplitResult, urlsplit

from nemo.lens._redaction import redact_url_credentials
from nemo.lens.errors import LensValueError


def split_endpoint(endpoint: str) -> SplitResult:
    """`endpoint` split as a URL; a scheme-less one (`collector:4317`, as gRPC endpoints
    are often written) as if it were `http://` it."""
    return urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")


def endpoint_host_and_port(endpoint: str) -> tuple[str, int]:
    """The host and TCP port of an OTLP endpoint URL (a scheme-less `host:port` too).

    Raises:
        ValueError: The endpoint has no host or an invalid port; the message shows it with
            its credentials hidden.
    """
    parsed = split_endpoint(endpoint)
    host = parsed.hostname
    shown = redact_url_credentials(repr(endpoint))
    if not host:
        raise LensValueError(
            f"endpoint {shown} has no host; expected a URL such as http://collector:4317"
        )
    try:
        port = parsed.port
    except ValueError as exc:
        raise LensValueError(f"endpoint {shown} has an invalid port ({exc})") from exc
    if port is None:
        port = 443 if parsed.scheme == "https" else 80
    return host, port


def check_grpc_endpoint(variable: str, endpoint: str) -> None:
    """Refuse user information in a gRPC endpoint, without showing any of it.

    The OTLP gRPC exporter cannot send it: it dials a host named `user:password@host`,
    which never resolves, and logs that name, password included, on every failed export.

    Raises:
        ValueError: `endpoint` holds `user@` or `user:password@`; the message names
            `variable` and where a credential goes instead.
    """
    if "@" in split_endpoint(endpoint).netloc:
        raise LensValueError(
            f"Invalid value for {variable}: the endpoint holds user information "
            "(user:password@ or token@; not shown, it is a credential), which the OTLP gRPC "
            "exporter cannot send: it would dial a host of that name and log it on every "
            "export; write the endpoint as http(s)://host:port and put the credential in "
            "OTEL_EXPORTER_OTLP_HEADERS (e.g. authorization=Basic%20...)"
        )


#: Header names are HTTP tokens; values are printable ASCII but for the four characters the
#: W3C baggage format (which the variable follows) reserves: write those as %XX.
_HEADER_NAME_CHARS: Final = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_HEADER_VALUE_CHARS: Final = frozenset(map(chr, range(0x20, 0x7F))) - frozenset('",;\\')
_HEADERS_FORM: Final = (
    "expected comma-separated name=value pairs (e.g. api-key=...,x-team=ml), names made of "
    "letters, digits and !#$%&'*+-.^_`|~, values of printable ASCII with \" , ; \\ written "
    "as %XX"
)


def check_headers(variable: str, raw: str) -> None:
    """Raise unless every entry of `raw` is `name=value`; never quote a value.

    Raises:
        ValueError: An entry is not `name=value` with a valid name, or a value holds a
            character the form does not allow; the message names `variable`.
    """
    for number, entry in enumerate(raw.split(","), start=1):
        if not entry.strip(" \t"):
            continue
        name, equals, value = entry.partition("=")
        name = name.strip(" \t")
        if not equals or not name or not set(name) <= _HEADER_NAME_CHARS:
            raise LensValueError(
                f"Invalid value for {variable}: entry {number} is not name=value with a valid "
                f"name (not shown: headers carry credentials); {_HEADERS_FORM}"
            )
        if not set(value.strip(" \t")) <= _HEADER_VALUE_CHARS:
            raise LensValueError(
                f"Invalid value for {variable}: the value of header {name.lower()!r} holds a "
                f"character that is not allowed (not shown: headers carry credentials); "
                f"{_HEADERS_FORM}"
            )
