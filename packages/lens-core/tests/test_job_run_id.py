"""One run id per job: every process of a job gets the same `nemo.run.id` without a setting.

Slurm's job id comes first, then torchrun's run id; outside both, the first process to set
up draws one and hands it to every process it starts through the environment.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator

import pytest
from lens_children import child_env, run_python
from lens_fork import in_child

from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.testing import isolated_telemetry

JOB_VARIABLES = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")

# A process that sets up (disabled: the run id is filled in all the same) and prints it.
PRINT_RUN_ID = textwrap.dedent(
    """
    from nemo.lens import NemoLensConfig, setup_telemetry
    config = NemoLensConfig(enabled=False)
    setup_telemetry(config)
    print(config.run_id)
    """
)


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in JOB_VARIABLES:
        clean_environ.delenv(variable, raising=False)
    with isolated_telemetry():
        yield


def run_id_after_setup(**config: object) -> str:
    settings = NemoLensConfig(enabled=False, **config)  # type: ignore[arg-type]
    setup_telemetry(settings).shutdown()
    return settings.run_id


def test_slurm_job_id_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "elastic-7")
    assert run_id_after_setup() == "4242"


def test_torchrun_run_id_outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "elastic-7")
    assert run_id_after_setup() == "elastic-7"


def test_torchruns_placeholder_none_is_not_a_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun without --rdzv-id sets TORCHELASTIC_RUN_ID=none: a drawn id is used."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    run_id = run_id_after_setup()
    assert run_id != "none"
    assert len(run_id) == 12
    int(run_id, 16)


def test_a_configured_run_id_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert run_id_after_setup(run_id="mine") == "mine"


def test_a_drawn_run_id_reaches_started_and_forked_processes() -> None:
    """Outside Slurm and torchrun, the first setup draws the id; a process it starts
    (subprocess, with its environment) and a child it forks that sets up on its own both
    get the same id, and a second process started from nothing draws another."""
    drawn = run_id_after_setup()
    assert run_id_after_setup() == drawn  # this process keeps it, across setups
    started = run_python(
        "-c",
        PRINT_RUN_ID,
        env=child_env({"NEMO_LENS_JOB_RUN_ID": os.environ["NEMO_LENS_JOB_RUN_ID"]}),
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == drawn
    assert in_child(run_id_after_setup) == drawn
    unrelated = run_python("-c", PRINT_RUN_ID)  # child_env() drops lens's variables
    assert unrelated.returncode == 0, unrelated.stderr
    assert unrelated.stdout.strip() not in ("", drawn)


def test_a_spawned_multiprocessing_child_inherits_the_drawn_run_id() -> None:
    """A `spawn` child starts a new interpreter but inherits the environment, so it finds
    the job's run id where setup reads it (the subprocess test above shows setup there)."""
    import multiprocessing

    drawn = run_id_after_setup()
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        # os.getenv runs in the child, by reference: nothing of this test module is
        # imported there. Bounded: a worker that cannot start is respawned forever.
        found = pool.apply_async(os.getenv, ("NEMO_LENS_JOB_RUN_ID",)).get(timeout=60)
    assert found == drawn
