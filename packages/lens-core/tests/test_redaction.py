"""Redaction: which span attribute keys are secret, on every span helper's path.

The rule (see `nemo.lens._redaction.is_secret_key`): keys and entries are compared as
lower-case words, so spelling and case do not matter; a custom set extends the defaults;
quantity names around an entry (`token_count`, `num_tokens`, `tokens_per_sec`) are not
secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_spans import one

from nemo.lens import (
    DEFAULT_REDACT_KEYS,
    managed_span,
    redact_value,
    safe_set_span_attributes,
    set_enabled_span_groups,
    span_cm,
)
from nemo.lens._redaction import REDACTED, is_secret_key
from nemo.lens.testing import InMemorySpans, reset_span_state

pytest.importorskip("opentelemetry.sdk.trace")

# Each went out in clear before (issue 10, item 8), and any spelling of them must not.
SECRET_KEYS = [
    "api_key",
    "Authorization",
    "PASSWORD",
    "aws_secret_access_key",
    "access_token",
    "AWS_SECRET_ACCESS_KEY",
    "apiKey",
    "APIKey",
    "X-Api-Key",
    "OPENAI_API_KEY",
    "http.request.header.authorization",
    "HTTPAuthorization",
    "hf_token",
    "HF_TOKEN",
    "refreshToken",
    "db.password",
    "passwd",
    "client_secret",
    "private_key",
    "privateKey",
    "gcp.credentials",
    "credential",
    "Cookie",
    "set-cookie",
    "secret",
    "gen_ai.prompt",
    "Prompt",
    "input-text",
    "password2",
]
# Names of quantities and other plain values: redacting them would hide what a training
# job is measured by.
PLAIN_KEYS = [
    "tokens_per_sec",
    "num_tokens",
    "throughput_tokens_per_sec",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "max_tokens",
    "token_count",
    "output_token_count",
    "num_token",
    "time_to_first_token",
    "gen_ai.token.type",
    "tokenizer",
    "tokenizer_name",
    "prompt_len",
    "text_length",
    "key_count",
    "num_keys",
    "api_key_id",
    "password_length",
    "monkey",
    "secretary_name",
    "context",
    "model",
    "dl.iteration",
    "rl.backend",
    "megatron.iteration",
]


@pytest.fixture(autouse=True)
def _fresh_span_state() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    yield
    reset_span_state(clear_registry=True)


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys_are_redacted_whatever_their_spelling(key: str) -> None:
    """Keys naming a credential are redacted whatever their case or separators."""
    assert is_secret_key(key)
    assert redact_value(key, "sk-live-123") == REDACTED


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_quantities_and_plain_names_are_not_redacted(key: str) -> None:
    """Counts and rates of tokens, and names merely containing an entry's letters, pass."""
    assert not is_secret_key(key)
    assert redact_value(key, "1024") == "1024"


def test_a_custom_set_extends_the_defaults() -> None:
    """Custom keys are added to the defaults, match by words too, and never replace them."""
    custom = frozenset({"ssn", "run-name"})
    assert redact_value("user.ssn", "123", custom) == REDACTED
    assert redact_value("RunName", "exp", custom) == REDACTED
    assert redact_value("api_key", "k", custom) == REDACTED
    assert redact_value("password", "p", frozenset()) == REDACTED
    assert redact_value("ssn", "123") == "123"
    assert is_secret_key("ssn", {"ssn"})  # a plain set works too
    assert is_secret_key("ssn", ["ssn"])


def test_an_exact_custom_entry_matches_even_a_quantity_name() -> None:
    """A key spelled exactly as an entry is redacted, whatever words it contains."""
    assert redact_value("num_tokens", "5", frozenset({"num_tokens"})) == REDACTED


def test_an_unusable_custom_set_still_redacts_the_defaults(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A redact_keys that cannot be read falls back to the defaults, with one warning."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.helpers"):
        assert is_secret_key("password", 42)  # type: ignore[arg-type]
        assert not is_secret_key("model", 42)  # type: ignore[arg-type]
    assert len(caplog.records) == 1


def test_non_str_keys_are_never_secret() -> None:
    """is_secret_key answers False for a key that cannot name an attribute."""
    assert not is_secret_key(None)
    assert not is_secret_key(b"password")


def test_the_defaults_name_the_credentials_the_issue_lists() -> None:
    """DEFAULT_REDACT_KEYS lists the credential names and keeps v0.2.0's entries."""
    for name in ("passwd", "authorization", "api_key", "apikey", "credential", "private_key"):
        assert name in DEFAULT_REDACT_KEYS


SECRET_ATTRIBUTES: dict[str, Any] = {
    "api_key": "sk-1",
    "Authorization": "Bearer abc",
    "PASSWORD": "hunter2",
    "aws_secret_access_key": "AKIA/xyz",
    "access_token": ["t1", "t2"],
    "tokens_per_sec": 1234.5,
    "num_tokens": 77,
}
EXPECTED = {
    "api_key": REDACTED,
    "Authorization": REDACTED,
    "PASSWORD": REDACTED,
    "aws_secret_access_key": REDACTED,
    "access_token": REDACTED,
    "tokens_per_sec": 1234.5,
    "num_tokens": 77,
}


def test_every_span_path_redacts(spans: InMemorySpans) -> None:
    """managed_span kwargs, span_cm kwargs and safe_set_span_attributes apply the same rule."""
    set_enabled_span_groups(frozenset({"step"}))
    with managed_span("step", "managed", tracer=spans.tracer, **SECRET_ATTRIBUTES):
        pass
    with span_cm("cm", tracer=spans.tracer, **SECRET_ATTRIBUTES):
        pass
    with spans.tracer.start_as_current_span("safe_set") as span:
        safe_set_span_attributes(span, SECRET_ATTRIBUTES)
    for name in ("managed", "cm", "safe_set"):
        assert dict(one(spans, name).attributes) == EXPECTED, name


def test_custom_keys_apply_through_safe_set_span_attributes(spans: InMemorySpans) -> None:
    """safe_set_span_attributes(span, attrs, keys) redacts the defaults and the extra keys."""
    with spans.tracer.start_as_current_span("s") as span:
        safe_set_span_attributes(
            span, {"user.email": "a@b", "token": "t", "step": 3}, frozenset({"email"})
        )
    assert dict(one(spans, "s").attributes) == {
        "user.email": REDACTED,
        "token": REDACTED,
        "step": 3,
    }


def test_a_secret_value_is_never_logged(
    spans: InMemorySpans, caplog: pytest.LogCaptureFixture
) -> None:
    """When setting attributes fails, the warning carries neither a secret value nor its text."""

    class LoudSpan:
        """A span whose set_attributes fails quoting what it was given."""

        def is_recording(self) -> bool:
            return True

        def set_attributes(self, attributes: dict[str, Any]) -> None:
            raise ValueError(f"cannot set {attributes!r}")

    with caplog.at_level(logging.DEBUG):
        safe_set_span_attributes(
            LoudSpan(),  # type: ignore[arg-type]
            {"Authorization": "Bearer sk-live-123", "api_key": "sk-live-456"},
        )
    assert caplog.records
    assert "sk-live" not in caplog.text


@given(st.text(max_size=30))
def test_the_rule_never_raises(key: str) -> None:
    """Any text key gets an answer: True or False, never an exception."""
    assert is_secret_key(key) in (True, False)
    assert redact_value(key, "v") in ("v", REDACTED)
