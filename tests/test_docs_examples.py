"""The docs' Python examples run, not only parse (structlog doctests its docs).

Every ```python block of README.md, docs/*.md and the packages' READMEs (the pages
tests/test_docs.py parses) is listed exactly once: in RUNS, the blocks that must run, or in
NEEDS_CONTEXT, with the reason a block cannot run on its own (a Ray cluster, torchrun, a
server, an excerpt of a larger program, a deliberate error). A block is found by a phrase
that occurs in it and in no other block of its page. A new block in neither table, an entry
whose phrase names no block or several, or a block in both, fails
`test_every_python_block_runs_or_says_why_not`, so a page cannot gain an example that is
silently left unrun.

A listed block runs in a fresh child interpreter (`lens_children.run_python`): in the
environment of a new shell (no lens or OpenTelemetry setting, nor one under a prefix the
examples read), in a scratch working directory, killed after CHILD_TIMEOUT_S. It must exit
0 and write nothing on stderr: no traceback, no warning (lens logs its warnings there, in a
process that configured no logging, and a stray DeprecationWarning shows there too), and
its stdout must hold what `prints` lists. A block may run after other blocks of its page
(`after`), and with stand-ins for what the page says the reader already has (`given`: a loop
count, a rank, a handle, a file a command wrote). `given` runs in a namespace of its own and
only the names it assigns without a leading underscore reach the block, so a stand-in never
supplies an import the block forgot. `then` runs after the block, in its namespace (it calls
the test function a testing example defines, as pytest would).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lens_children import child_env, run_python
from lens_markdown import code_blocks

REPOSITORY = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [
        REPOSITORY / "README.md",
        *(REPOSITORY / "docs").glob("*.md"),
        *(REPOSITORY / "packages").glob("*/README.md"),
    ]
)
CHILD_TIMEOUT_S = 120.0
# The prefixes the examples read their settings under, cleared like lens's own.
EXAMPLE_PREFIXES = ("MY_TRAINER_", "NEMO_RL_OTEL_", "TRAINER_OTEL_")
# What lens's console exporter encodes with; not installed where only the SDK is (compat).
CONSOLE = "opentelemetry.exporter.otlp.proto.common"
# A stand-in handle whose exports go to stdout as OTLP/JSON lines.
CONSOLE_HANDLE = """\
from nemo.lens import NemoLensConfig, setup_telemetry
handle = setup_telemetry(NemoLensConfig(enabled=True, exporter="console"))
"""


@dataclass(frozen=True)
class Block:
    """One ```python block: its page, the line its code starts on, its code."""

    page: Path
    line: int
    source: str


def python_blocks(page: Path) -> list[Block]:
    """The ```python blocks of `page`, dedented by their fence's indent."""
    return [
        Block(page, block.line, "\n".join(block.lines) + "\n")
        for block in code_blocks(page)
        if block.language == "python"
    ]


def find(page: str, phrase: str) -> list[Block]:
    """The blocks of `page` (relative to the repository) whose code contains `phrase`."""
    return [block for block in python_blocks(REPOSITORY / page) if phrase in block.source]


@dataclass(frozen=True)
class Run:
    """A block that runs (see the module docstring for each field)."""

    page: str
    phrase: str
    given: str = ""
    after: tuple[str, ...] = ()
    then: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    prints: tuple[str, ...] = ()
    #: Modules the example needs beyond lens-core and the SDK; without one it is skipped.
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class NeedsContext:
    """A block that does not run on its own, and why."""

    page: str
    phrase: str
    reason: str


RUNS = [
    Run(
        "README.md",
        "for step in range(num_steps):",
        given="num_steps = 3",
        env={"NEMO_RL_OTEL_ENABLED": "true", "NEMO_RL_OTEL_EXPORTER": "console"},
        prints=("rl.reward.mean", "rl.generation.duration"),
        needs=(CONSOLE,),
    ),
    Run(
        "docs/cli.md",
        "def hex_ids_to_base64",
        # The file `lens demo` writes, which the page reads back.
        given=(
            "from nemo.lens.cli import main\n"
            'assert main(["demo", "--steps", "2", "--interval", "0"]) == 0\n'
        ),
        prints=("lens_demo.train",),
        needs=(CONSOLE, "google.protobuf", "opentelemetry.proto"),
    ),
    Run(
        "docs/exporters.md",
        "class Tokenized(Dataset):",
        # Four forked DataLoader workers record; the parent exports (issue 24). Runs where
        # torch is installed: the integrations-torch session.
        prints=('"loader.items"', '"asInt":"64"'),
        needs=("torch", CONSOLE),
    ),
    Run(
        "docs/configuration.md",
        'config.service_name = "my-trainer"',
        given="rank, world_size = 0, 1",
    ),
    Run(
        "docs/exporters.md",
        'open("run.otlp.jsonl")',
        # A run whose spans went to run.otlp.jsonl, as the page's command line has it.
        given=(
            "from nemo.lens import NemoLensConfig, setup_telemetry\n"
            "_handle = setup_telemetry(NemoLensConfig(\n"
            '    enabled=True, exporter="console", console_path="run.otlp.jsonl",\n'
            "    metrics_enabled=False,\n"
            "))\n"
            'with _handle.tracer.start_as_current_span("train.step"):\n'
            "    pass\n"
            "_handle.shutdown()\n"
        ),
        prints=("train.step ",),
        needs=(CONSOLE,),
    ),
    Run("docs/getting-started.md", 'description="Mean reward."'),
    Run(
        "docs/getting-started.md",
        'with managed_span("job", "train"):',
        after=('description="Mean reward."',),
        given=(
            "rank, world_size, num_steps = 0, 1, 3\n"
            "\n"
            "def train_step():\n"
            "    return 0.5, 128, 12.0\n"
        ),
        env={"MY_TRAINER_OTEL_ENABLED": "true", "MY_TRAINER_OTEL_EXPORTER": "console"},
        prints=("rl.reward.mean", "rl.tokens.generated", "rl.generation.duration"),
        needs=(CONSOLE,),
    ),
    Run("docs/integrations.md", "sender.send_bytes(serialize_context())"),
    Run("docs/integrations.md", "aiohttp calls are not traced"),
    Run("docs/integrations.md", "def stage_0_forward"),
    Run(
        "docs/logs.md",
        "setup_logging_bridge()",
        env={"MY_TRAINER_EXPORTER": "console"},
        prints=("loss spiked",),
        needs=(CONSOLE,),
    ),
    Run("docs/metric-registry.md", "RL_METRICS = ["),
    Run("docs/metric-registry.md", '"step_time_s"', after=("RL_METRICS = [",)),
    Run(
        "docs/metric-registry.md",
        'attributes={"role": "policy"}',
        after=("RL_METRICS = [",),
        given=CONSOLE_HANDLE,
        then="handle.shutdown()",
        prints=("rl.reward.mean", "rl.tokens", "rl.generation.duration"),
        needs=(CONSOLE,),
    ),
    Run(
        "docs/migrating-from-record-gym-metrics.md",
        '"server_request_duration_ms"',
        given=(
            CONSOLE_HANDLE + "rollout_ms, verify_ms, passed, verified = 812.0, 40.0, 3, 4\n"
            'servers = ["math-verifier"]\n'
        ),
        then="handle.shutdown()",
        prints=("gym.verify.success_rate", "gym.servers.active"),
        needs=(CONSOLE,),
    ),
    Run(
        "docs/migrating-from-record-gym-metrics.md",
        '"math-verifier"',
        given=CONSOLE_HANDLE,
        then="handle.shutdown()",
        prints=("nemo_gym.server.requests",),
        needs=(CONSOLE,),
    ),
    Run(
        "docs/migrating-from-record-rl-metrics.md",
        '"rl.response_length.mean"',
        given=CONSOLE_HANDLE + 'stats = {"reward_mean": 0.82, "kl": 0.01}\ngeneration_ms = 412.0\n',
        then="handle.shutdown()",
        prints=("rl.kl_divergence", "rl.generation.duration_ms"),
        needs=(CONSOLE,),
    ),
    Run(
        "docs/migrating-from-record-rl-metrics.md",
        '"rl.role": "policy"',
        given=CONSOLE_HANDLE,
        then="handle.shutdown()",
        prints=("nemo_rl.tokens.generated",),
        needs=(CONSOLE,),
    ),
    Run(
        "docs/spans.md",
        '@trace_fn("optimizer", "optimizer.step")',
        given="iterations, batch = 2, [1, 2]\n\ndef forward_backward(batch):\n    return 0.0\n",
    ),
    Run(
        "docs/exporters.md",
        "def on_sigterm(signum, frame):",
        env={"TRAINER_OTEL_ENABLED": "true", "TRAINER_OTEL_EXPORTER": "console"},
        # The signal the handler is for: it shuts down and exits 0 (1 if it did not exit).
        then="import os\nos.kill(os.getpid(), signal.SIGTERM)\nraise SystemExit(1)",
        needs=(CONSOLE,),
    ),
    Run("docs/spans.md", 'SpanRegistry.resolve("per_stp, rollout")'),
    Run("docs/spans.md", "from my_framework._lens_fallbacks import"),
    Run("docs/testing.md", "def _fresh_telemetry"),
    Run("docs/testing.md", "def test_records_the_loss", then="test_records_the_loss()"),
    Run("docs/testing.md", "def test_step_span", then="test_step_span()"),
    Run("docs/testing.md", "def test_setup_exports", then="test_setup_exports()"),
    Run("packages/lens-core/README.md", "record_metrics(get_meter()"),
]

NEEDS_CONTEXT = [
    NeedsContext(
        "docs/integrations.md",
        "ray.init()",
        "a Ray job that starts a local cluster (tests/test_contrib_ray.py and the "
        "integrations session run the decorators against a real Ray)",
    ),
    NeedsContext(
        "docs/integrations.md",
        "inject_ray_context()",
        "continues the Ray example above: `rollout` is that job's actor",
    ),
    NeedsContext(
        "docs/integrations.md",
        "# rl_client.py",
        "a client of gym_server.py below: it needs that server listening on 127.0.0.1:8000",
    ),
    NeedsContext(
        "docs/integrations.md",
        "# gym_server.py",
        "a server: uvicorn.run serves until it is stopped",
    ),
    NeedsContext(
        "docs/integrations.md",
        "torchrun --nproc-per-node 2",
        "runs under torchrun, two ranks on gloo (tests/test_distributed_torch.py runs that)",
    ),
    NeedsContext(
        "docs/metric-registry.md",
        "TRAINER_OTEL_METRIC_CARDINALITY_LIMIT=2000",
        "an excerpt: NemoLensConfig and setup_telemetry are imported on other pages and "
        "`sample_id` is the caller's",
    ),
    NeedsContext(
        "docs/migrating-from-record-gym-metrics.md",
        "from nemo.lens.instruments.gym import record_gym_metrics",
        "the deprecated call the page migrates away from; its DeprecationWarning is the "
        "point (tests/test_shim_deprecation.py)",
    ),
    NeedsContext(
        "docs/migrating-from-record-rl-metrics.md",
        "from nemo.lens.instruments.rl import record_rl_metrics",
        "the deprecated call the page migrates away from; its DeprecationWarning is the "
        "point (tests/test_shim_deprecation.py)",
    ),
    NeedsContext(
        "docs/spans.md",
        "class TrainerSpanGroup(SpanGroup):",
        'shows the ValueError a typo raises: its resolve("per_stp") raises by design',
    ),
    NeedsContext(
        "docs/spans.md",
        "pending_span_groups",
        "uses TrainerSpanGroup from the block above, whose demonstration raises",
    ),
    NeedsContext(
        "docs/spans.md",
        "engine.generate(prompts)",
        "an excerpt: managed_span and safe_set_span_attributes are imported above, "
        "`engine` and `prompts` are the caller's",
    ),
    NeedsContext(
        "docs/spans.md",
        "monkeypatch.setattr(",
        "lines of a pytest test: `monkeypatch` and `my_tracer` come from that test",
    ),
    NeedsContext(
        "docs/spans.md",
        "inject_context(headers)",
        "two excerpts, a client's and a server's: `requests`, `url`, `request` and "
        "`tracer` are theirs",
    ),
    NeedsContext(
        "docs/spans.md",
        "import my_framework._lens_fallbacks as mine",
        "checks the reader's own copy of the fallbacks, my_framework._lens_fallbacks",
    ),
    NeedsContext(
        "packages/lens-compat-gym/README.md",
        "record_gym_metrics(",
        "the deprecated call: it needs lens-compat-gym, and `handle` is the caller's",
    ),
    NeedsContext(
        "packages/lens-compat-rl/README.md",
        "record_rl_metrics(",
        "the deprecated call: it needs lens-compat-rl, and `handle` is the caller's",
    ),
    NeedsContext(
        "packages/nemo-lens/README.md",
        'importlib.metadata.version("nemo-lens")',
        "states a fact as an expression; it needs the nemo-lens alias installed "
        "(tests/test_versions.py checks it)",
    ),
]

# The child's side: read the spec, run the stand-ins apart, then each block in one namespace.
RUNNER = """\
import contextlib, io, json, sys

with open(sys.argv[1], encoding="utf-8") as file:
    spec = json.load(file)
given = {"__name__": "__given__"}
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    exec(compile(spec["given"], "<given>", "exec"), given)
namespace = {"__name__": "__main__"}
namespace.update((name, given[name]) for name in spec["stand_ins"])
for filename, source in spec["blocks"]:
    exec(compile(source, filename, "exec"), namespace)
"""


def stand_ins(given: str) -> list[str]:
    """The names `given` assigns at its top level, leaving out imports and `_private` ones."""
    names: list[str] = []
    for statement in ast.parse(given).body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(statement.name)
        elif isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names += [node.id for target in targets for node in ast.walk(target)
                      if isinstance(node, ast.Name)]  # fmt: skip
    return [name for name in names if not name.startswith("_")]


def only_block(page: str, phrase: str) -> Block:
    (block,) = find(page, phrase)
    return block


def as_compiled(block: Block) -> tuple[str, str]:
    """(file name, source) of `block`, its lines numbered as on the page, so that a
    traceback names the page and shows the line."""
    return str(block.page), "\n" * (block.line - 1) + block.source


def test_every_python_block_runs_or_says_why_not() -> None:
    """Each ```python block of the pages is in RUNS or NEEDS_CONTEXT, exactly once, and
    each entry's phrase (and each `after` phrase) names exactly one block of its page."""
    listed: dict[Block, list[str]] = {}
    problems = []
    entries = [(entry.page, entry.phrase, "RUNS") for entry in RUNS]
    entries += [(entry.page, phrase, "after") for entry in RUNS for phrase in entry.after]
    entries += [(entry.page, entry.phrase, "NEEDS_CONTEXT") for entry in NEEDS_CONTEXT]
    for page, phrase, table in entries:
        found = find(page, phrase)
        if len(found) != 1:
            problems.append(f"{table}: {page}: {phrase!r} is in {len(found)} blocks")
        elif table != "after":
            listed.setdefault(found[0], []).append(table)
    for path in PAGES:
        for block in python_blocks(path):
            tables = listed.get(block, [])
            where = f"{path.relative_to(REPOSITORY)}, line {block.line}"
            if not tables:
                problems.append(f"{where}: in neither RUNS nor NEEDS_CONTEXT")
            elif len(tables) > 1:
                problems.append(f"{where}: listed {len(tables)} times ({', '.join(tables)})")
    assert problems == []
    assert all(entry.reason for entry in NEEDS_CONTEXT)


@pytest.mark.parametrize("run", RUNS, ids=lambda run: f"{run.page}: {run.phrase}")
def test_the_example_runs(run: Run, tmp_path: Path) -> None:
    """The block (after its `after` blocks, with its stand-ins) runs in a fresh interpreter
    and a new shell's environment: exit 0, nothing on stderr, its `prints` on stdout."""
    for module in run.needs:
        pytest.importorskip(module, reason=f"the example needs {module}")
    blocks = [as_compiled(only_block(run.page, phrase)) for phrase in run.after]
    blocks.append(as_compiled(only_block(run.page, run.phrase)))
    if run.then:
        blocks.append(("<then>", run.then))
    spec = {"given": run.given, "stand_ins": stand_ins(run.given), "blocks": blocks}
    (tmp_path / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    result = run_python(
        # Old instrumentation releases (0.44b0, the floor cell) warn that pkg_resources is
        # deprecated when they load; that is theirs, not the example's.
        "-W",
        "ignore:pkg_resources is deprecated:UserWarning",
        "-c",
        RUNNER,
        str(tmp_path / "spec.json"),
        env=child_env(run.env, also_strip=EXAMPLE_PREFIXES),
        cwd=tmp_path,
        timeout_s=CHILD_TIMEOUT_S,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert [text for text in run.prints if text not in result.stdout] == []
