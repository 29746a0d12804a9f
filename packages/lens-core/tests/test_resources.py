"""nemo.lens.resources: host, GPU, SLURM and Kubernetes detection, which never raises.

The GPU count tests run a real `nvidia-smi` process: a small script of that name in a
temporary directory put first on PATH (there is no GPU here), which records each call.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_children import python_stdout
from lens_fork import in_child

from nemo.lens import resources

FakeNvidiaSmi = Callable[[str], Path]

NO_K8S_ROOT = "/nonexistent-root-for-lens-tests"


@pytest.fixture(autouse=True)
def _forget_gpu_count() -> Iterator[None]:
    """Each test asks nvidia-smi afresh, and leaves no answer behind."""
    resources._gpu_count_memory.forget()
    yield
    resources._gpu_count_memory.forget()


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    """The file each fake nvidia-smi run appends one line to."""
    return tmp_path / "nvidia-smi-calls"


@pytest.fixture
def fake_nvidia_smi(
    tmp_path: Path, calls_file: Path, monkeypatch: pytest.MonkeyPatch
) -> FakeNvidiaSmi:
    """Install an executable `nvidia-smi` whose shell body is given; it logs each call."""

    def install(body: str) -> Path:
        directory = tmp_path / "bin"
        directory.mkdir(exist_ok=True)
        script = directory / "nvidia-smi"
        script.write_text(f'#!/bin/sh\necho "$@" >> "{calls_file}"\n{body}\n', encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
        return script

    return install


def calls(calls_file: Path) -> list[str]:
    if not calls_file.exists():
        return []
    return calls_file.read_text(encoding="utf-8").splitlines()


# -- detect_local: host and pid ---------------------------------------------------------------


def test_local_keys_are_host_name_and_pid() -> None:
    """host.name and process.pid are this process's; a blank CUDA_VISIBLE_DEVICES is 0 GPUs."""
    assert resources.detect_local(environ={"CUDA_VISIBLE_DEVICES": ""}) == {
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        "host.gpu.count": 0,
    }


# -- detect_local: CUDA_VISIBLE_DEVICES ---------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "count"),
    [
        ("", 0),
        ("   ", 0),
        ("0", 1),
        ("0,1,2,3", 4),
        (" 0 , 1 ", 2),
        ("3,1", 2),
        ("GPU-abc,GPU-def", 2),
        ("GPU-5b3d3c8a-a4f1-4ad0-b0f8-000000000000", 1),
        ("MIG-GPU-abc/1/0,MIG-def", 2),
        ("-1", 0),
        ("NoDevFiles", 0),
        ("NoGPU", 0),
        ("none", 0),
        ("0,2,-1,1", 2),
        ("0,1,", 2),
        ("GPU-", 0),
        ("\u0662", 0),
    ],
)
def test_gpu_count_from_cuda_visible_devices(
    visible: str, count: int, fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path
) -> None:
    """CUDA_VISIBLE_DEVICES counts the entries before the first that names no device
    (index or GPU-/MIG- UUID), as CUDA reads it, and nvidia-smi is not asked."""
    fake_nvidia_smi("echo 8")
    found = resources.detect_local(environ={"CUDA_VISIBLE_DEVICES": visible})
    assert found["host.gpu.count"] == count
    assert calls(calls_file) == []


# -- detect_local: nvidia-smi -----------------------------------------------------------------


def test_gpu_count_read_from_nvidia_smi(fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path) -> None:
    """Without CUDA_VISIBLE_DEVICES, the count is nvidia-smi's (one line per GPU, each the
    total), asked with the documented query."""
    fake_nvidia_smi("printf '4\\n4\\n4\\n4\\n'")
    assert resources.detect_local(environ={})["host.gpu.count"] == 4
    assert calls(calls_file) == ["--query-gpu=count --format=csv,noheader"]


def test_nvidia_smi_is_asked_once_per_process(
    fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path
) -> None:
    """Later calls, detect_resource included, reuse the first answer."""
    fake_nvidia_smi("echo 2")
    for _ in range(3):
        assert resources.detect_local(environ={})["host.gpu.count"] == 2
    assert resources.detect_resource(environ={}, filesystem_root=NO_K8S_ROOT)["host.gpu.count"] == 2
    assert len(calls(calls_file)) == 1


def test_a_failed_answer_is_remembered_too(
    fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path
) -> None:
    """A failing nvidia-smi is not retried on every call."""
    fake_nvidia_smi("exit 3")
    for _ in range(3):
        assert "host.gpu.count" not in resources.detect_local(environ={})
    assert len(calls(calls_file)) == 1


def test_concurrent_first_callers_ask_once(
    fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path
) -> None:
    """Threads that all ask at once while nvidia-smi runs share one answer."""
    fake_nvidia_smi("sleep 0.3\necho 3")
    barrier = threading.Barrier(8)
    counts: list[object] = []

    def ask() -> None:
        barrier.wait()
        counts.append(resources.detect_local(environ={}).get("host.gpu.count"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert counts == [3] * 8
    assert len(calls(calls_file)) == 1


def test_a_hung_nvidia_smi_is_killed_at_the_timeout(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An nvidia-smi that outlives the timeout is killed before it answers: no key, a
    warning naming the timeout, and the process is gone."""
    directory = tmp_path / "bin"
    directory.mkdir()
    pid_file = tmp_path / "pid"
    script = directory / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, pathlib, time\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(60)\n"
        "print(7)\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(resources, "_NVIDIA_SMI_TIMEOUT_S", 0.5)
    caplog.set_level(logging.WARNING, logger="nemo.lens.resources")

    found = resources.detect_local(environ={})

    assert "host.gpu.count" not in found
    assert "nvidia-smi did not answer within 0.5 s" in caplog.text
    if pid_file.exists():  # the interpreter may not have got that far in 0.5 s
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


def test_missing_nvidia_smi_gives_no_key_and_no_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No nvidia-smi on PATH (a machine without NVIDIA drivers) is normal: no key, no warning."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    caplog.set_level(logging.DEBUG, logger=resources.__name__)
    found = resources.detect_local(environ={})
    assert set(found) == {"host.name", "process.pid"}
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # Found missing on PATH, without starting a process to learn it.
    assert [r.getMessage() for r in caplog.records] == ["nvidia-smi is not on PATH"]


def test_nvidia_smi_is_found_on_path_as_a_process_start_finds_it(
    fake_nvidia_smi: FakeNvidiaSmi,
    calls_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Earlier PATH entries holding a directory or a file without execute permission
    named nvidia-smi are passed over, as `subprocess` passes them over; the executable
    after them answers."""
    fake_nvidia_smi("echo 3")
    shadows = []
    for name, make in (("dir", Path.mkdir), ("file", Path.touch)):
        shadow = tmp_path / name
        shadow.mkdir()
        make(shadow / "nvidia-smi")
        shadows.append(str(shadow))
    monkeypatch.setenv("PATH", os.pathsep.join([*shadows, os.environ["PATH"]]))
    assert resources.detect_local(environ={})["host.gpu.count"] == 3
    assert calls(calls_file) == ["--query-gpu=count --format=csv,noheader"]


@pytest.mark.parametrize(
    "body",
    [
        "echo 'No devices were found'; exit 9",
        "echo 8; exit 1",
        "echo garbage",
        "echo",
        "echo -1",
        "echo 2.5",
        "printf '\\377\\376\\n'",
        "kill -9 $$",
    ],
)
def test_failing_nvidia_smi_gives_no_key(fake_nvidia_smi: FakeNvidiaSmi, body: str) -> None:
    """An nvidia-smi that fails, dies or prints no count leaves the key out; nothing raises."""
    fake_nvidia_smi(body)
    found = resources.detect_local(environ={})
    assert set(found) == {"host.name", "process.pid"}


def test_nvidia_smi_that_cannot_be_executed_gives_no_key(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    """A file named nvidia-smi without execute permission is skipped like a missing one."""
    script = fake_nvidia_smi("echo 8")
    script.chmod(0o644)
    assert "host.gpu.count" not in resources.detect_local(environ={})


@pytest.mark.fork
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
def test_forked_child_keeps_the_count_but_reports_its_own_pid(
    fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path
) -> None:
    """A child forked after the parent asked reuses the answer; its pid is its own."""
    fake_nvidia_smi("echo 2")
    parent = resources.detect_local(environ={})
    child = in_child(lambda: [resources.detect_local(environ={}), os.getpid()])
    found, child_pid = child
    assert parent["process.pid"] == os.getpid()
    assert found["process.pid"] == child_pid != os.getpid()
    assert found["host.gpu.count"] == parent["host.gpu.count"] == 2
    assert len(calls(calls_file)) == 1


@pytest.mark.fork
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
def test_fork_while_nvidia_smi_runs_does_not_deadlock_the_child(
    fake_nvidia_smi: FakeNvidiaSmi, calls_file: Path
) -> None:
    """A fork while another thread waits on nvidia-smi leaves the child able to ask itself."""
    fake_nvidia_smi(f"touch '{calls_file}.started'\nsleep 1\necho 5")
    asking = threading.Thread(target=resources.detect_local, kwargs={"environ": {}})
    asking.start()
    started = Path(f"{calls_file}.started")
    for _ in range(1000):
        if started.exists():
            break
        threading.Event().wait(0.01)
    try:
        child = in_child(lambda: resources.detect_local(environ={}).get("host.gpu.count"))
    finally:
        asking.join(timeout=30)
    assert child == 5
    assert resources.detect_local(environ={})["host.gpu.count"] == 5
    assert len(calls(calls_file)) == 2  # the parent's thread, then the child for itself


# -- detect_slurm ------------------------------------------------------------------------------

SLURM = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NTASKS": "16",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURM_CLUSTER_NAME": "c1",
}


def test_slurm_keys_need_a_job_id() -> None:
    """The seven slurm.* keys appear when SLURM_JOB_ID is set, none otherwise."""
    assert resources.detect_slurm(environ=SLURM) == {
        "slurm.job.id": "42",
        "slurm.job.name": "train",
        "slurm.nodelist": "n[1-2]",
        "slurm.nnodes": "2",
        "slurm.ntasks": "16",
        "slurm.partition": "gpu",
        "slurm.cluster.name": "c1",
    }
    without_job = {k: v for k, v in SLURM.items() if k != "SLURM_JOB_ID"}
    assert resources.detect_slurm(environ=without_job) == {}
    assert resources.detect_slurm(environ={**SLURM, "SLURM_JOB_ID": "  "}) == {}


def test_slurm_older_variable_names_and_blank_values() -> None:
    """SLURM_NODELIST/SLURM_NNODES stand in for the SLURM_JOB_* names; blank values are left out."""
    found = resources.detect_slurm(
        environ={
            "SLURM_JOB_ID": " 7 ",
            "SLURM_JOB_NODELIST": "",
            "SLURM_NODELIST": "n1",
            "SLURM_NNODES": "1",
            "SLURM_JOB_NAME": "   ",
        }
    )
    assert found == {"slurm.job.id": "7", "slurm.nodelist": "n1", "slurm.nnodes": "1"}


def test_slurm_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no environ given, the process's environment is read."""
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    assert resources.detect_slurm()["slurm.job.id"] == "99"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert resources.detect_slurm() == {}


# -- detect_kubernetes ------------------------------------------------------------------------

K8S = {
    "K8S_NAMESPACE_NAME": "ns",
    "K8S_POD_UID": "uid-1",
    "K8S_NODE_NAME": "node",
    "K8S_CONTAINER_NAME": "trainer",
    "K8S_JOB_NAME": "job",
    "HOSTNAME": "pod-1",
}


def test_kubernetes_keys_need_the_service_host_or_the_service_account(tmp_path: Path) -> None:
    """Outside a pod nothing is detected; KUBERNETES_SERVICE_HOST or the service-account
    directory under the root mark a pod; HOSTNAME names a pod with no K8S_POD_NAME."""
    assert resources.detect_kubernetes(environ=K8S, filesystem_root=tmp_path) == {}
    expected = {
        "k8s.namespace.name": "ns",
        "k8s.pod.name": "pod-1",
        "k8s.pod.uid": "uid-1",
        "k8s.node.name": "node",
        "k8s.container.name": "trainer",
        "k8s.job.name": "job",
    }
    by_env = {**K8S, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert resources.detect_kubernetes(environ=by_env, filesystem_root=tmp_path) == expected
    (tmp_path / "var/run/secrets/kubernetes.io").mkdir(parents=True)
    assert resources.detect_kubernetes(environ=K8S, filesystem_root=str(tmp_path)) == expected


def test_kubernetes_pod_name_wins_over_hostname() -> None:
    """K8S_POD_NAME, when given, is the pod name; blank values are left out."""
    found = resources.detect_kubernetes(
        environ={
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "K8S_POD_NAME": "real-pod",
            "HOSTNAME": "host",
            "K8S_NODE_NAME": " ",
        },
        filesystem_root=NO_K8S_ROOT,
    )
    assert found == {"k8s.pod.name": "real-pod"}


def test_kubernetes_with_no_variables_is_empty() -> None:
    """A pod without downward-API variables or HOSTNAME gives no keys."""
    found = resources.detect_kubernetes(
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, filesystem_root=NO_K8S_ROOT
    )
    assert found == {}


@pytest.mark.parametrize("root", ["/" + "a" * 5000, "/nul\0root"])
def test_a_root_that_cannot_be_checked_is_not_a_pod(
    root: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A filesystem root the service-account check cannot stat means no pod, quietly."""
    caplog.set_level(logging.WARNING)
    assert resources.detect_kubernetes(environ=K8S, filesystem_root=root) == {}
    assert caplog.records == []


# -- detect_resource ---------------------------------------------------------------------------


def test_detect_resource_merges_local_then_slurm_then_kubernetes() -> None:
    """The merged dict holds every detector's keys, in local, SLURM, Kubernetes order."""
    environ = {**SLURM, **K8S, "KUBERNETES_SERVICE_HOST": "h", "CUDA_VISIBLE_DEVICES": "0,1"}
    merged = resources.detect_resource(environ=environ, filesystem_root=NO_K8S_ROOT)
    local = resources.detect_local(environ=environ)
    slurm = resources.detect_slurm(environ=environ)
    kubernetes = resources.detect_kubernetes(environ=environ, filesystem_root=NO_K8S_ROOT)
    assert list(merged.items()) == [*local.items(), *slurm.items(), *kubernetes.items()]
    assert merged["host.gpu.count"] == 2


def test_public_functions_take_no_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each function can be called bare and returns a plain dict."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    for detect in (
        resources.detect_resource,
        resources.detect_local,
        resources.detect_slurm,
        resources.detect_kubernetes,
    ):
        assert type(detect()) is dict
    assert resources.detect_local()["host.gpu.count"] == 1


def test_undecodable_environment_values_become_encodable() -> None:
    """Lone surrogates from undecodable environment bytes are replaced by U+FFFD."""
    undecodable = os.fsdecode(b"job-\xff")
    environ = {
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NAME": undecodable,
        "KUBERNETES_SERVICE_HOST": "h",
        "HOSTNAME": undecodable,
    }
    found = resources.detect_resource(environ=environ, filesystem_root=NO_K8S_ROOT)
    assert found["slurm.job.name"] == "job-\ufffd"
    assert found["k8s.pod.name"] == "job-\ufffd"


class BrokenEnvironment(dict[str, str]):
    """A mapping whose every read fails."""

    def get(self, *args: object, **kwargs: object) -> str:
        raise RuntimeError("environment unavailable")


@pytest.mark.parametrize("name", ["detect_local", "detect_slurm", "detect_kubernetes"])
def test_a_failing_environment_gives_an_empty_dict_and_one_warning(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A detector that cannot read its input returns {} and warns once, naming itself."""
    caplog.set_level(logging.WARNING, logger="nemo.lens.resources")
    detect = getattr(resources, name)
    assert detect(environ=BrokenEnvironment()) == {}
    assert detect(environ=BrokenEnvironment()) == {}
    assert [record.getMessage() for record in caplog.records] == [
        f"{name} could not detect resource attributes (RuntimeError: environment "
        "unavailable); they were left out"
    ]


@given(
    environ=st.dictionaries(
        st.sampled_from(
            [
                "CUDA_VISIBLE_DEVICES",
                "SLURM_JOB_ID",
                "SLURM_JOB_NAME",
                "SLURM_NODELIST",
                "KUBERNETES_SERVICE_HOST",
                "K8S_POD_NAME",
                "HOSTNAME",
            ]
        ),
        st.text(),
    )
)
def test_detection_never_raises_and_gives_encodable_values(environ: dict[str, str]) -> None:
    """Any environment gives str values that encode as UTF-8 and a GPU count >= 0."""
    environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # keep nvidia-smi out of the loop
    found = resources.detect_resource(environ=environ, filesystem_root=NO_K8S_ROOT)
    for value in found.values():
        if isinstance(value, str):
            value.encode("utf-8")
    gpu_count = found["host.gpu.count"]
    assert isinstance(gpu_count, int)
    assert gpu_count >= 0


# -- imports -----------------------------------------------------------------------------------

AUDIT_IMPORT = """\
import json, sys
started = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec", "os.system"):
        started.append(event)
sys.addaudithook(hook)
import nemo.lens
root_loaded = "nemo.lens.resources" in sys.modules
import nemo.lens.resources
print(json.dumps({"root_loaded": root_loaded, "started": started}))
"""


def test_import_starts_no_process_and_the_root_does_not_load_it() -> None:
    """Importing the module runs no subprocess, and `import nemo.lens` does not import it."""
    assert json.loads(python_stdout("-c", AUDIT_IMPORT)) == {"root_loaded": False, "started": []}
