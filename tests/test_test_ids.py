"""Every collection of the suite yields the same test ids.

pytest-xdist has each worker collect the tests itself and refuses the run when two workers
disagree, so an id built from a memory address or a hash order breaks `-n 2`. The conftests
refuse an id with an address at once (lens_ids); this test also catches what that rule
cannot name, by collecting twice in fresh interpreters with other hash seeds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lens_children import child_env, run_python

ROOT = Path(__file__).resolve().parents[1]
COLLECT_TIMEOUT_S = 300


def collected_ids(paths: list[str], hash_seed: str) -> list[str]:
    """The node ids one `pytest --collect-only` of `paths` finds."""
    result = run_python(
        *[
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            "--collect-only",
            "-q",
            # pytest-randomly, where installed, would shuffle the order; the set is what counts.
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *paths,
        ],
        cwd=ROOT,
        env=child_env({"PYTHONHASHSEED": hash_seed}),
        timeout_s=COLLECT_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_two_collections_give_the_same_ids(request: pytest.FixtureRequest) -> None:
    """Two collections of this run's test paths under different hash seeds list the same
    test ids, in the same order."""
    config = request.config
    invoked_in = config.invocation_params.dir
    paths = [str(invoked_in / arg.split("::")[0]) for arg in config.args]
    first = collected_ids(paths, "1")
    second = collected_ids(paths, "2")
    assert request.node.nodeid in first
    assert first == second
