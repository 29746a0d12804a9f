"""`NemoLensConfig`: what a process asks lens to do, from code or from the environment.

The configuration is a plain mutable dataclass because consumers build it with
`from_env` and then assign fields. Only the sample rate is checked at construction;
`setup_telemetry` checks the rest, after any such assignment.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from nemo.lens import _otel_env
from nemo.lens.errors import LensTypeError, LensValueError

__all__ = ["NemoLensConfig"]

_T = TypeVar("_T")

_TRUE_SPELLINGS: Final = frozenset({"1", "true", "yes", "on"})
_FALSE_SPELLINGS: Final = frozenset({"0", "false", "no", "off"})
_BOOL_FORM: Final = "one of 1/true/yes/on or 0/false/no/off (any case)"


class _DefaultServiceName(str):
    """lens's default service name, told apart from the same name set in code.

    It equals `"nemo"` in every way, but setup sees that nobody chose it and lets
    `OTEL_SERVICE_NAME` or `service.name` in `OTEL_RESOURCE_ATTRIBUTES` replace it, as
    OpenTelemetry orders them; any `str` assigned in code wins over both.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (_DefaultServiceName, (str(self),))


#: The `service_name` default: `"nemo"`, unless OpenTelemetry's variables name one.
_DEFAULT_SERVICE_NAME: Final = _DefaultServiceName(_otel_env._DEFAULT_SERVICE_NAME)


def _is_default_service_name(name: object) -> bool:
    """True when `name` is the untouched default (nobody set a service name)."""
    return type(name) is _DefaultServiceName


@dataclass
class NemoLensConfig:
    """Settings for `setup_telemetry`; every field has a default and an environment key.

    [Configuration](configuration.md#fields-and-their-variables) lists each field's
    environment variable, default and accepted values.

    Raises:
        ValueError: `export_sample_rate` lies outside [0.0, 1.0] or is NaN.
        TypeError: `export_sample_rate` is not a number.
    """

    enabled: bool = False
    service_name: str = _DEFAULT_SERVICE_NAME
    export_strategy: str = "single_rank"
    export_rank: int = -1
    export_sample_rate: float = 1.0
    sampler_enabled: bool = False
    traces_enabled: bool = True
    metrics_enabled: bool = True
    logs_enabled: bool = False
    span_groups: str = "default"
    exporter: str = "otlp"
    run_id: str = ""
    user: str = ""
    wandb_entity: str = ""
    wandb_project: str = ""
    console_path: str = ""
    metric_cardinality_limit: int = 0
    _span_group_cls: type | None = field(default=None, repr=False)
    # Field -> (variable, value) for each field `from_env` read from the environment, so
    # setup's errors name the real variable (`MY_OTEL_EXPORTER`), not a placeholder.
    _env_sources: dict[str, tuple[str, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _check_sample_rate(self.export_sample_rate, "NemoLensConfig.export_sample_rate")

    def _env_source(self, name: str) -> tuple[str, Any] | None:
        """`(variable, value)` `from_env` read field `name` from, while the field still
        holds that value; None for a field it did not read or code assigned since."""
        source = self._env_sources.get(name)
        if source is not None and getattr(self, name) == source[1]:
            return source
        return None

    def _label(self, name: str) -> str:
        """How a message names field `name`: `NemoLensConfig.exporter`, followed by
        `read from MY_OTEL_EXPORTER` while the field holds what `from_env` read there."""
        source = self._env_source(name)
        if source is not None:
            return f"NemoLensConfig.{name} read from {source[0]}"
        return f"NemoLensConfig.{name}"

    @property
    def resolved_span_groups(self) -> frozenset[str]:
        """The span groups `span_groups` selects, by the rule setup uses.

        A configured span-group class resolves strictly; else, when `SpanRegistry` has a
        namespace, the registry resolves leniently and this returns its enabled set; else
        `SpanGroup` resolves strictly.

        Raises:
            ValueError: A strict resolver does not know a part of `span_groups`; the message
                names the variable `from_env` read it from, while the field holds that value.
        """
        from nemo.lens.groups import SpanRegistry, _resolve_configured, _strict_resolver_for

        strict = _strict_resolver_for(self._span_group_cls)
        if strict is None:
            return SpanRegistry.resolve(self.span_groups)[0]
        return _resolve_configured(strict, self.span_groups, self._env_source("span_groups"))

    @classmethod
    def from_env(
        cls,
        prefix: str = "NEMO_LENS",
        fallback_prefix: str | None = None,
        span_group_cls: type | None = None,
    ) -> NemoLensConfig:
        """Build a configuration from environment variables.

        Each field's key is read from `{prefix}_{KEY}`, then `{fallback_prefix}_{KEY}`,
        then the default; a blank value counts as unset. Bools take 1/true/yes/on or
        0/false/no/off in any case; ints and floats are parsed with `int()`/`float()`;
        strings are stripped and keep their case. `service_name` comes from
        `{prefix}_SERVICE_NAME`, else `OTEL_SERVICE_NAME`, else `service.name` in
        `OTEL_RESOURCE_ATTRIBUTES`, else the default (`"nemo"`, which setup still lets
        those variables replace); `wandb_entity` and `wandb_project` from
        `WANDB_ENTITY` and `WANDB_PROJECT`, unprefixed and unstripped.

        Args:
            prefix: The primary prefix, e.g. `"MEGATRON_OTEL"`.
            fallback_prefix: A second prefix read when the primary key is unset.
            span_group_cls: A `SpanGroup` subclass that resolves `span_groups` strictly.

        Raises:
            ValueError: A bool, int or float does not parse, or the sample rate is out of
                range. The message names the variable and the accepted form.
        """
        reader = _EnvReader(os.environ, prefix, fallback_prefix)
        config = cls(
            enabled=reader.read("ENABLED", _parse_bool, _BOOL_FORM, False),
            service_name=(
                reader.read("SERVICE_NAME", str, "a string", "")
                or _otel_env.environment_service_name()
                or _DEFAULT_SERVICE_NAME
            ),
            export_strategy=reader.read("EXPORT_STRATEGY", str, "a string", "single_rank"),
            export_rank=reader.read("EXPORT_RANK", int, "an integer, e.g. 0 or -1", -1),
            export_sample_rate=reader.read(
                "EXPORT_SAMPLE_RATE", _parse_rate, "a number in [0.0, 1.0]", 1.0
            ),
            sampler_enabled=reader.read("SAMPLER_ENABLED", _parse_bool, _BOOL_FORM, False),
            traces_enabled=reader.read("TRACES_ENABLED", _parse_bool, _BOOL_FORM, True),
            metrics_enabled=reader.read("METRICS_ENABLED", _parse_bool, _BOOL_FORM, True),
            logs_enabled=reader.read("LOGS_ENABLED", _parse_bool, _BOOL_FORM, False),
            span_groups=reader.read("SPAN_GROUPS", str, "a string", "default"),
            exporter=reader.read("EXPORTER", str, "a string", "otlp"),
            run_id=reader.read("RUN_ID", str, "a string", ""),
            user=reader.read("USER_ID", str, "a string", ""),
            wandb_entity=os.environ.get("WANDB_ENTITY", ""),
            wandb_project=os.environ.get("WANDB_PROJECT", ""),
            console_path=reader.read("CONSOLE_PATH", str, "a file path", ""),
            metric_cardinality_limit=reader.read(
                "METRIC_CARDINALITY_LIMIT",
                _parse_cardinality_limit,
                "an integer >= 0 (0: no limit)",
                0,
            ),
            _span_group_cls=span_group_cls,
        )
        config._env_sources = {
            _ENV_KEY_FIELDS.get(key, key.lower()): source for key, source in reader.sources.items()
        }
        return config


#: The `from_env` keys that are not their field's name in capitals.
_ENV_KEY_FIELDS: Final = {"USER_ID": "user"}


class _EnvReader:
    """Reads `{prefix}_{KEY}`, then `{fallback_prefix}_{KEY}`, parsing and naming errors."""

    def __init__(
        self, environ: Mapping[str, str], prefix: str, fallback_prefix: str | None
    ) -> None:
        self._environ = environ
        self._prefix = prefix
        self._fallback_prefix = fallback_prefix
        #: Key -> (variable, parsed value) of every key read from a variable.
        self.sources: dict[str, tuple[str, Any]] = {}

    def read(self, key: str, parse: Callable[[str], _T], accepted: str, default: _T) -> _T:
        primary = f"{self._prefix}_{key}"
        source = primary
        raw = self._environ.get(primary, "").strip()
        if not raw and self._fallback_prefix is not None:
            source = f"{self._fallback_prefix}_{key}"
            raw = self._environ.get(source, "").strip()
        if not raw:
            return default
        try:
            value = parse(raw)
        except ValueError as exc:
            where = "" if source == primary else f" (read from {source})"
            raise LensValueError(
                f"Invalid value for {primary}{where}: {raw!r}; expected {accepted}"
            ) from exc
        self.sources[key] = (source, value)
        return value


def _parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE_SPELLINGS:
        return True
    if lowered in _FALSE_SPELLINGS:
        return False
    raise ValueError(f"not a boolean spelling: {raw!r}")


def _parse_rate(raw: str) -> float:
    rate = float(raw)
    _check_sample_rate(rate, "export_sample_rate")
    return rate


def _parse_cardinality_limit(raw: str) -> int:
    limit = int(raw)
    if limit < 0:
        raise ValueError(f"negative: {limit}")
    return limit


def _check_cardinality_limit(
    limit: object, label: str = "NemoLensConfig.metric_cardinality_limit"
) -> int:
    """`limit` if it is an int >= 0 (a bool is refused); setup calls it.

    Raises:
        ValueError: Anything else; the message names the field (`label`) and what it
            accepts.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise LensValueError(f"{label} must be an integer >= 0, 0 meaning no limit; got {limit!r}")
    return limit


def _check_console_path(path: object, label: str = "NemoLensConfig.console_path") -> str:
    """`path` if it is a str (empty: standard output); setup calls it.

    Raises:
        TypeError: Anything else; the message names the field (`label`).
    """
    if not isinstance(path, str):
        raise LensTypeError(
            f"{label} must be a str, the file the console exporters append to ('' for "
            f"standard output); got {type(path).__name__}"
        )
    return path


def _check_sample_rate(rate: Any, name: str) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise LensTypeError(
            f"{name} must be a number in [0.0, 1.0], got {type(rate).__name__} ({rate!r})"
        )
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise LensValueError(f"{name} must lie in [0.0, 1.0], got {rate!r}")
