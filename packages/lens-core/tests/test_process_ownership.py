"""`BuiltHere`: the one answer to "was this built in this process?", across a real fork."""

from __future__ import annotations

import os

import pytest

from nemo.lens._process import BuiltHere


@pytest.mark.fork
def test_built_here_is_true_in_the_builder_and_false_in_a_forked_child() -> None:
    """The child of a real os.fork() sees the parent's object as not built here; an object
    the child builds is its own."""
    built = BuiltHere()
    assert built.here()
    assert built.pid == os.getpid()

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            answer = f"{built.here()} {BuiltHere().here()}"
            os.write(write, answer.encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        _, status = os.waitpid(child, 0)
        answer = os.read(read, 64).decode()
    finally:
        os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert answer == "False True"
    assert built.here()
