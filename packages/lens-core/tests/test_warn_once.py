"""The warn-once memory: one line per distinct problem, and one shape for a step that failed."""

from __future__ import annotations

import logging

import pytest

from nemo.lens._warn_once import WarnOnce, clear_all, describe

LOGGER = "nemo.lens.tests.warn_once"


@pytest.fixture
def memory() -> WarnOnce:
    """A memory of its own, capped at 3 keys, on a logger no lens module uses."""
    return WarnOnce(logging.getLogger(LOGGER), "the test's owner", cap=3)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_failure_logs_the_step_the_exception_and_the_consequence(
    memory: WarnOnce, caplog: pytest.LogCaptureFixture
) -> None:
    """One WARNING line names the step, the exception's type and message, and what follows."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        memory.failure("inject_context", ValueError("bad carrier"), "the carrier is ignored")
    assert messages(caplog) == [
        "inject_context failed (ValueError: bad carrier); the carrier is ignored. "
        "Further ValueError errors here are not logged."
    ]
    assert caplog.records[0].levelno == logging.WARNING


def test_failure_logs_once_per_step_and_exception_type(
    memory: WarnOnce, caplog: pytest.LogCaptureFixture
) -> None:
    """The same step failing the same way again is not logged; another type or step is."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            memory.failure("a: starting the span", ValueError("one"), "it carries on")
        memory.failure("a: starting the span", ValueError("other text"), "it carries on")
        memory.failure("a: starting the span", KeyError("k"), "it carries on")
        memory.failure("a: ending the span", ValueError("one"), "it carries on")
    assert len(messages(caplog)) == 3


def test_failure_names_an_exception_whose_text_cannot_be_read(
    memory: WarnOnce, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception whose `str()` raises is named by its type; failure() itself never raises."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        memory.failure("decoding", Unprintable(), "the value is dropped")
    assert messages(caplog) == [
        "decoding failed (Unprintable (its message cannot be shown)); the value is dropped. "
        "Further Unprintable errors here are not logged."
    ]
    assert describe(KeyError("k")) == "KeyError: 'k'"


def test_failure_counts_towards_the_cap_and_clear_all_forgets_it(
    memory: WarnOnce, caplog: pytest.LogCaptureFixture
) -> None:
    """Failures share the owner's cap (one last line says the rest are muted); clear_all()
    lets a failure be logged again."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for index in range(5):
            memory.failure(f"step {index}", ValueError("x"), "it carries on")
    logged = messages(caplog)
    assert len(logged) == 4
    assert logged[-1] == (
        "the test's owner reached 3 distinct warnings; further warnings are suppressed"
    )
    clear_all()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        memory.failure("step 0", ValueError("x"), "it carries on")
    assert len(messages(caplog)) == 1
