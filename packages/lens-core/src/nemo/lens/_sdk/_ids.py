"""Span and trace ids that stay unique across ranks, whatever `random.seed()` was called with.

Training frameworks seed the global `random` module identically on every rank for
reproducibility, and the SDK's default generator draws from that module, so every rank
would mint the same ids. lens draws from a private generator seeded from OS entropy,
which `random.seed()` never touches, and reseeds it in forked children so a child never
replays its parent's sequence.
"""

from __future__ import annotations

import os
import random

from opentelemetry.sdk.trace.id_generator import IdGenerator

from nemo.lens import _fork_hooks

# Seeded from os.urandom when created without a seed.
_rng = random.Random()


def new_span_id() -> int:
    """Return a random non-zero 64-bit span id."""
    span_id = _rng.getrandbits(64)
    while span_id == 0:
        span_id = _rng.getrandbits(64)
    return span_id


def new_trace_id() -> int:
    """Return a random non-zero 128-bit trace id (all bits random)."""
    trace_id = _rng.getrandbits(128)
    while trace_id == 0:
        trace_id = _rng.getrandbits(128)
    return trace_id


class EntropyIdGenerator(IdGenerator):
    """Ids from OS entropy; every trace-id bit is random, so the W3C flag is set."""

    def generate_span_id(self) -> int:
        return new_span_id()

    def generate_trace_id(self) -> int:
        return new_trace_id()

    # Read by SDK releases that support the W3C random-trace-id flag; older ones ignore it.
    def is_trace_id_random(self) -> bool:
        return True


def build_id_generator() -> IdGenerator:
    """Return an SDK `IdGenerator` backed by lens's private entropy-seeded generator."""
    return EntropyIdGenerator()


def _reseed_in_child() -> None:
    _rng.seed(os.urandom(32))


_fork_hooks.register("span ids", after_in_child=_reseed_in_child)
