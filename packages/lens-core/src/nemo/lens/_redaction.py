"""The redaction rule: which attribute keys are secret, so their values never leave the process.

The one owner of the rule. `nemo.lens.helpers` re-exports its public names
(`DEFAULT_REDACT_KEYS`, `redact_value`) and applies it in `safe_set_span_attributes`;
`lens doctor` hides the values of secret-looking settings with it; a lens pipeline
applies it at the export boundary of every signal (`nemo.lens._sdk._redacting`), to
attribute keys and, through `redact_text`, to the `key=value` pairs of exception texts.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from nemo.lens._warn_once import WarnOnce

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens redaction")

DEFAULT_REDACT_KEYS: Final[frozenset[str]] = frozenset(
    {
        # lens v0.2.0's list
        "prompt",
        "input_text",
        "output_text",
        "text",
        "password",
        "token",
        "secret",
        "key",
        # credentials by their other names
        "passwd",
        "passphrase",
        "passwords",
        "secrets",
        "authorization",
        "api_key",
        "apikey",
        "credential",
        "credentials",
        "private_key",
        "cookie",
        "cookies",
    }
)
"""Attribute keys whose values never leave the process. A key matches an entry by words,
not by spelling: `PASSWORD`, `apiKey`, `X-Api-Key`, `aws_secret_access_key` and
`http.request.header.authorization` are all redacted."""
REDACTED: Final = "[REDACTED]"

# The words of a key: runs of letters split at camelCase humps, and runs of digits;
# everything else separates. "X-Api-Key" and "apiKey" both give ("api", "key").
_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Words that make a neighbouring entry a quantity, not a secret: "token_count",
# "num_token", "time_to_first_token", "prompt_len", "prompt_tokens", "gen_ai.token.type",
# "api_key_id".
_MEASURE_BEFORE: Final = frozenset(
    {"avg", "first", "last", "max", "mean", "min", "n", "next", "num", "per", "total"}
)
_MEASURE_AFTER: Final = frozenset(
    {
        "budget",
        "chars",
        "count",
        "counts",
        "fraction",
        "id",
        "ids",
        "idx",
        "index",
        "len",
        "length",
        "limit",
        "limits",
        "num",
        "number",
        "per",
        "rate",
        "ratio",
        "size",
        "sizes",
        "tokens",
        "total",
        "type",
        "types",
        "usage",
    }
)

#: A set of redaction entries, each as its tuple of lower-case words.
Entries = frozenset[tuple[str, ...]]


@functools.lru_cache(maxsize=4096)
def _words(key: str) -> tuple[str, ...]:
    return tuple(word.lower() for word in _WORD.findall(key))


def _entries_of(redact_keys: frozenset[object]) -> Entries:
    return frozenset(
        words for entry in redact_keys if isinstance(entry, str) and (words := _words(entry))
    )


#: `DEFAULT_REDACT_KEYS` as entries: what applies when a caller's keys cannot be read.
DEFAULT_ENTRIES: Final = _entries_of(DEFAULT_REDACT_KEYS)


@functools.lru_cache(maxsize=64)
def _extended_entries(redact_keys: frozenset[object]) -> Entries:
    return DEFAULT_ENTRIES | _entries_of(redact_keys)


def redaction_entries(redact_keys: Iterable[str] | None) -> Entries:
    """The defaults plus the caller's keys, as word tuples.

    Raises:
        Exception: Whatever reading an unusable `redact_keys` raises (an unhashable
            entry, an iterable that fails); the caller falls back to `DEFAULT_ENTRIES`.
    """
    if redact_keys is None or redact_keys is DEFAULT_REDACT_KEYS:
        return DEFAULT_ENTRIES
    if not isinstance(redact_keys, frozenset):
        if isinstance(redact_keys, str):
            redact_keys = (redact_keys,)  # one key, not its letters
        redact_keys = frozenset(redact_keys)
    return _extended_entries(redact_keys)


@functools.lru_cache(maxsize=8192)
def matches(key: str, entries: Entries) -> bool:
    """True when the plain str `key` is secret under `entries` (see `is_secret_key`)."""
    words = _words(key)
    if words in entries:  # a key made of exactly an entry's words is always redacted
        return True
    count = len(words)
    for entry in entries:
        size = len(entry)
        for start in range(count - size + 1):
            if words[start : start + size] != entry:
                continue
            before = words[start - 1] if start else ""
            after = words[start + size] if start + size < count else ""
            if before not in _MEASURE_BEFORE and after not in _MEASURE_AFTER:
                return True
    return False


def is_secret_key(key: object, redact_keys: Iterable[str] | None = None) -> bool:
    """True when the value of attribute `key` must be redacted; never raises.

    The rule: `key` and every entry (`DEFAULT_REDACT_KEYS` plus `redact_keys`, which
    extend the defaults, never replace them) are split into lower-case words, at
    non-alphanumerics and camelCase humps. The key is secret when an entry's words appear
    in it in a row, unless a quantity word stands right next to them (`num_`, `max_`,
    `first_` before; `_count`, `_len`, `_type`, `_id`, `_per`, ... after), so
    `access_token`, `AWS_SECRET_ACCESS_KEY` and `gen_ai.prompt` are secret while
    `token_count`, `num_token` and `time_to_first_token` are not. Entries match whole
    words only: `tokens_per_sec`, `num_tokens` and `tokenizer` never match `token`. A key
    made of exactly an entry's words always matches.
    """
    try:
        if not isinstance(key, str):
            return False
        plain = key if type(key) is str else str.__str__(key)
    except Exception:  # an object lying about its class
        return False
    try:
        entries = redaction_entries(redact_keys)
    except Exception as exc:  # an unusable custom set: the defaults still apply
        _warnings.failure(
            "redaction: reading redact_keys", exc, "only DEFAULT_REDACT_KEYS are redacted"
        )
        entries = DEFAULT_ENTRIES
    return matches(plain, entries)


def redact_value(key: str, value: str, redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS) -> str:
    """Return `"[REDACTED]"` if `key` is a secret key (see `is_secret_key`), else `value`.

    `redact_keys` extends `DEFAULT_REDACT_KEYS`; the default keys are always redacted.
    """
    return REDACTED if is_secret_key(key, redact_keys) else value


#: How many levels of mappings and lists `redacted_mapping(..., nested=True)` searches (a
#: log record's extended attributes); a container deeper than that is hidden whole.
MAX_DEPTH: Final = 8


def redacted_mapping(values: Mapping[str, Any], *, nested: bool = False) -> dict[str, Any] | None:
    """A copy of `values` with the value of every secret key (by `DEFAULT_REDACT_KEYS`)
    replaced by `"[REDACTED]"`, or None when nothing changes.

    With `nested`, the mappings and lists among the values are searched too, `MAX_DEPTH`
    levels deep, and a mapping or list deeper than that is replaced whole. Without it only
    the keys are read (span, metric and resource attributes hold no mappings).
    """
    return _redacted_level(values, 0 if nested else MAX_DEPTH)


def _redacted_level(values: Mapping[Any, Any], depth: int) -> dict[Any, Any] | None:
    changed: dict[Any, Any] | None = None
    for key in values:
        if isinstance(key, str) and matches(key, DEFAULT_ENTRIES):
            value = values[key]
            hidden: Any = REDACTED
            if value == REDACTED:
                continue
        elif depth < MAX_DEPTH:
            value = values[key]
            hidden = _redacted_value(value, depth + 1)
            if hidden is value:
                continue
        else:
            continue
        if changed is None:
            changed = dict(values)
        changed[key] = hidden
    return changed


def _redacted_value(value: Any, depth: int) -> Any:
    """`value` itself, or a copy with the secrets in its mappings hidden; `depth` counts
    the containers around it."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Mapping, list, tuple)):
        return value
    if depth >= MAX_DEPTH:
        return REDACTED
    if isinstance(value, Mapping):
        hidden = _redacted_level(value, depth)
        return value if hidden is None else hidden
    items = [_redacted_value(item, depth + 1) for item in value]
    if all(new is old for new, old in zip(items, value, strict=True)):
        return value
    return tuple(items) if isinstance(value, tuple) else items


# --- the text rule ----------------------------------------------------------------------------


@functools.cache
def _pattern(source: str) -> re.Pattern[str]:
    """`source` compiled once per process, on first use: compiled at import, the text
    rule's patterns cost every process about 0.9 ms, and most never redact free text."""
    return re.compile(source)


# Entries that name content, not credentials: in free text they label prose
# ("prompt: expected 3", `text = tokenizer.decode(ids)`), and hiding the one word after
# them would hide nothing of the content anyway. The text rule looks for the others.
_CONTENT_KEYS: Final = frozenset({"prompt", "input_text", "output_text", "text"})
#: The entries `redact_text` looks for: `DEFAULT_REDACT_KEYS` without the content names.
TEXT_ENTRIES: Final = _entries_of(DEFAULT_REDACT_KEYS - _CONTENT_KEYS)

# The key and separator of a `key=value` or `key: value` pair in free text (an exception
# message, a traceback): a key, optionally quoted, that starts a word.
_PAIR_KEY: Final = r"""(?<![\w.\-])(?P<quote>["']?)(?P<key>[A-Za-z_][\w.\-]*)(?P=quote)\s*[=:]\s*"""
# The value after it: quoted, an HTTP authorization scheme and its credential, or the run
# up to the next whitespace or the `&name=` / `,name=` / `;name=` of the next pair.
_PAIR_VALUE: Final = (
    r""""[^"]*"|'[^']*'|(?i:bearer|basic|digest|token)[ \t]+(?:(?![&,;][A-Za-z_][\w.\-]*=)\S)+"""
    r"""|(?:(?![&,;][A-Za-z_][\w.\-]*=)\S)+"""
)
# An exception class name, which ends a traceback (`KeyError: 'input_ids'`) and is no key.
_EXCEPTION_CLASS: Final = r"[A-Za-z_]\w*(?:Error|Exception|Warning|Exit|Interrupt)"
# A traceback's frame line; the indented lines after it are source code, not pairs.
_FRAME_LINE: Final = r'[ \t]*File ".*", line \d+'
# Punctuation that ends a sentence or a list around a value rather than belonging to it.
_CLOSERS: Final = {")": "(", "]": "[", "}": "{", ">": "<"}


def _value_end(text: str, start: int, end: int) -> int:
    """Where the unquoted value `text[start:end]` ends: without a trailing `,` or `;`, or
    a closing bracket or quote it did not open (`{token: abc}`, `'...,token=abc'`)."""
    while end > start:
        last = text[end - 1]
        opener = _CLOSERS.get(last)
        if (
            last in ",;"
            or (last in "'\"" and text.count(last, start, end) % 2)
            or (
                opener is not None and text.count(opener, start, end) < text.count(last, start, end)
            )
        ):
            end -= 1
        else:
            break
    return end


def _redact_pairs(text: str) -> str:
    pieces: list[str] = []
    done = 0
    for pair in _pattern(_PAIR_KEY).finditer(text):
        key = pair["key"]
        if (
            pair.start() < done
            or _pattern(_EXCEPTION_CLASS).fullmatch(key.rpartition(".")[2])
            or not matches(key, TEXT_ENTRIES)
        ):
            continue
        value = _pattern(_PAIR_VALUE).match(text, pair.end())
        if value is not None:
            end = value.end()
            if text[value.start()] not in "\"'":
                end = _value_end(text, value.start(), end)
            pieces += (text[done : pair.end()], REDACTED)
            done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def _redact_traceback(text: str) -> str:
    """`_redact_pairs` on each line of `text` but a traceback's source lines."""
    lines = text.splitlines(keepends=True)
    in_source = False
    for index, line in enumerate(lines):
        if _pattern(_FRAME_LINE).match(line):
            in_source = True
        elif in_source and line[:1] in (" ", "\t"):
            continue
        else:
            in_source = False
        lines[index] = _redact_pairs(line)
    return "".join(lines)


def redact_text(text: str) -> str:
    """`text` with the value of every `key=value` / `key: value` pair whose key names a
    credential replaced by `"[REDACTED]"`; never raises.

    A key is secret by `DEFAULT_REDACT_KEYS` without the content names (`prompt`, `text`,
    `input_text`, `output_text`), and may be quoted (`{'api_key': 'sk-1'}`); an exception
    class name (`KeyError: 'input_ids'`) is never a key, and the source lines of a
    traceback (the indented lines after `File "...", line N`) are left alone. A value is
    a quoted string, an HTTP authorization scheme with its credential
    (`Authorization: Bearer abc`), or the run up to the next whitespace (`secret=a,b`
    whole), less a trailing `,`, `;` or unopened bracket or quote, and up to the
    `&name=`, `,name=` or `;name=` of a next pair (a URL query, `OTEL_RESOURCE_ATTRIBUTES`).
    A secret written without a secret key in front of it (`failed for sk-123`) is not
    found.
    """
    try:
        if "=" not in text and ":" not in text:
            return text
        if 'File "' in text:
            return _redact_traceback(text)
        return _redact_pairs(text)
    except Exception:  # a str subclass that misbehaves: hide it all rather than leak it
        return REDACTED


# The user-information part of a URL (`scheme://user:password@`); the last `@` before the
# path ends it, as urllib reads it, so a password holding a raw `@` is hidden whole. A
# scheme-less endpoint (`user:password@collector:4317`) counts when it holds a colon and
# starts a word, so an e-mail address in a list is left alone.
_URL_USERINFO: Final = (
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@"
    r"|(?:^|(?<=[\s,=\'\"]))(?P<bare>[^\s/?#:@,=\'\"]+:[^\s/?#,\'\"]*)@(?=[^\s@/])"
)


def _hide_userinfo(match: re.Match[str]) -> str:
    if match["bare"] is not None:
        return f"{match['bare'].partition(':')[0]}:***@"
    user, colon, _password = match["userinfo"].partition(":")
    if not colon:
        # A lone user name before `@` is often a token (`https://<token>@host`).
        return f"{match['scheme']}***@"
    return f"{match['scheme']}{user}:***@"


def redact_url_credentials(text: str) -> str:
    """`text` with the credentials of every URL in it hidden; never raises.

    A URL password becomes `***` (`https://user:***@host:4318`, a scheme-less
    `user:***@host:4317` too); a user part without a password is hidden whole
    (`https://***@host`): it is often a token. A query value whose name is secret by
    `DEFAULT_REDACT_KEYS` (`?token=...`, `&api_key=...`) is redacted by `redact_text`.
    """
    try:
        if "@" in text:
            text = _pattern(_URL_USERINFO).sub(_hide_userinfo, text)
        return redact_text(text)
    except Exception:  # a str subclass that misbehaves: hide it all rather than leak it
        return REDACTED
