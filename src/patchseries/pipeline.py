"""The main job, stage by stage: pin and fetch -> base -> apply -> environment -> test -> report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from patchseries import acceptance
from patchseries.acceptance import Installed
from patchseries.changed_lines import ChangedLines, measure_tree
from patchseries.docs import DOCS_REQUIREMENTS, changed_pages, run_docs_gate
from patchseries.environment import ensure_environment
from patchseries.harness import series_test_files, write_harness
from patchseries.hooks import run_hooks
from patchseries.paths import Workspace
from patchseries.pin import Pin, load_pin
from patchseries.progress import Log
from patchseries.series import Patch, read_series
from patchseries.testrun import TestOutcome, changed_source_files, run_tests
from patchseries.trees import BASE_REF, ApplyResult, BaseSource, BaseTree, recording, resolve_source, tool_tree
from patchseries.upstream import Comparison, requirement_args, run_static_gates, run_upstream_tests


@dataclass(frozen=True)
class BaseChoice:
    """Where the base comes from: the sdist (default), ``--checkout PATH`` or ``--git``."""

    checkout: Path | None = None
    use_git: bool = False
    force_base: bool = False


@dataclass(frozen=True)
class Prepared:
    pin: Pin
    patches: list[Patch]
    base: BaseTree
    applied: ApplyResult
    acceptance: Installed = field(default_factory=Installed)

    def test_groups(self) -> dict[str, list[str]]:
        """What runs as the series' tests, by group: the acceptance suite, and the test modules the patches add or
        change (``tests/...`` paths; upstream modules only on a base that has them)."""
        return {
            "acceptance suite": self.acceptance.modules,
            "patches' tests": acceptance.patch_test_modules(self.patches, self.base.path),
        }

    def test_modules(self) -> list[str]:
        return [module for modules in self.test_groups().values() for module in modules]


@dataclass(frozen=True)
class JobResult:
    prepared: Prepared
    torch: str
    outcome: TestOutcome
    upstream: list[Comparison] = field(default_factory=list)
    changed: ChangedLines | None = None  # coverage of the lines the series adds or changes
    changed_report: Path | None = None
    ran: dict[str, int] = field(default_factory=dict)  # test cases that ran, per group of Prepared.test_groups

    @property
    def ok(self) -> bool:
        return self.outcome.ok and not any(c.new for c in self.upstream)

    @property
    def exit_status(self) -> int:
        """0 passed, 1 failed, 5 no test ran (as pytest: the arguments selected none)."""
        if self.outcome.no_tests:
            return 5
        return 0 if self.ok else 1


def load(ws: Workspace) -> tuple[Pin, list[Patch]]:
    """Read the pin and the series, refusing bad input before anything is created."""
    return load_pin(ws.pin_file), read_series(ws.series_file)


def get_source(ws: Workspace, pin: Pin, choice: BaseChoice) -> BaseSource:
    """Where the base comes from, checked before anything is created (a checkout must be clean and pinned)."""
    return resolve_source(ws, pin, choice.checkout, choice.use_git, choice.force_base)


def prepare(ws: Workspace, choice: BaseChoice, log: Log) -> Prepared:
    """Stages 1-3: the tool's tree of the pinned base with the series applied on branch ``series`` (reused, or built
    fresh: see :func:`patchseries.apply.tool_tree`), the acceptance suite copied into its ``tests/``, and the test
    harness if needed. A tree that is not as the tool built it is refused, never rewritten.
    """
    log("stage 1/5: reading the pin and the series")
    pin, patches = load(ws)
    log(f"stage 2/5: getting the base ({pin.name} {pin.version})")
    source = get_source(ws, pin, choice)
    ws.workdir.mkdir(parents=True, exist_ok=True)
    log(f"stage 3/5: applying {len(patches)} patches on {ws.trees / source.tree_name}")
    tree, applied = tool_tree(ws, pin, patches, source, log)
    with recording(tree.path):
        # before the harness: the harness then adds only the package markers the acceptance suite's copy lacks
        installed = acceptance.install(tree.path, ws.acceptance)
        if installed.modules:
            stale = f"; removed {len(installed.removed)} stale copies" if installed.removed else ""
            copied = f"{len(installed.modules)} test modules"
            log(f"copied the acceptance suite ({copied}) from {ws.acceptance} into tests/{stale}")
        written = write_harness(tree.path, patches)
        if written:
            log(f"wrote the minimal test harness ({len(written)} files; the base ships no upstream tests)")
    return Prepared(pin, patches, tree, applied, installed)


def run_main_job(
    ws: Workspace,
    choice: BaseChoice,
    torch: str,
    log: Log,
    installer: str = "auto",
    pytest_args: tuple[str, ...] = (),
) -> JobResult:
    """The whole main job; the caller prints :func:`summary` of the result."""
    prepared = prepare(ws, choice, log)
    tree = prepared.base.path
    with recording(tree):  # installing and testing write into the tree: what they make is the tool's
        upstream_checkout = prepared.base.has_upstream_tests
        log(f"stage 4/5: environment with torch {torch}")
        extra = requirement_args(ws, tree) if upstream_checkout else ()
        if upstream_checkout and changed_pages(tree):
            extra += DOCS_REQUIREMENTS
        env = ensure_environment(ws, tree, torch, log, installer=installer, extra=extra)
        groups = prepared.test_groups()
        tests = prepared.test_modules()
        sources = changed_source_files([c.path for p in prepared.patches for c in p.changes])
        counts = ", ".join(f"{name}: {len(modules)}" for name, modules in groups.items())
        log(f"stage 5/5: running {len(tests)} test modules of the series ({counts})")
        reports = ws.reports / f"torch-{torch}"
        outcome = run_tests(env, tree, tests, sources, reports, pytest_args)
        ran = acceptance.ran_per_group(outcome.junit, groups)
        changed, changed_report = None, None
        if outcome.coverage_xml is not None:
            changed = measure_tree(tree, BASE_REF, "HEAD", outcome.coverage_xml)
            title = f"Lines the series adds or changes under src/, covered by its tests (torch {torch})"
            changed_report = changed.write(reports, title)
        upstream = []
        if upstream_checkout:
            not_upstream = (*prepared.acceptance.modules, *series_test_files(prepared.patches))
            upstream = [run_upstream_tests(ws, env, tree, log, not_upstream), *run_static_gates(ws, env, tree, log)]
            docs = run_docs_gate(ws, env, tree, log)
            upstream += [docs] if docs else []
            upstream += run_hooks(ws, tree, log)
        return JobResult(prepared, torch, outcome, upstream, changed, changed_report, ran)


def summary(result: JobResult) -> str:
    prepared, outcome = result.prepared, result.outcome
    applied = prepared.applied
    modules = "n/a" if outcome.coverage is None else f"{outcome.coverage}%"
    if result.changed is None:
        coverage = ["  coverage:  n/a (no coverage report)"]
    else:
        coverage = [
            f"  coverage:  changed lines: {result.changed.line()} (uncovered listed in {result.changed_report})",
            f"             changed modules: {modules} (xml: {outcome.coverage_xml})",
        ]
    excluded = sum(len(v) for v in applied.excluded.values())
    patches = "already applied, reused" if applied.reused else f"{len(applied.applied)} applied"
    lines = [
        "summary",
        f"  base:      {prepared.pin.name} {prepared.pin.version} ({prepared.base.source}, "
        f"commit {prepared.base.base_commit[:12]})",
        f"  torch:     {result.torch}",
        f"  patches:   {len(prepared.patches)} in series, {patches}"
        + (f", {len(applied.already_present)} already in base" if applied.already_present else "")
        + (f", {excluded} paths excluded" if excluded else ""),
        f"  tests:     {outcome.line()}" + _ran(result),
        *coverage,
        f"  tree:      {prepared.base.path} ({applied.where})",
        *(f"  upstream:  {comparison.line()}" for comparison in result.upstream),
        f"  result:    {_verdict(result)}",
    ]
    return "\n".join(lines)


def _ran(result: JobResult) -> str:
    """`` (acceptance suite: A, patches' tests: B)``: the test cases of each group that ran (passed or failed)."""
    if result.outcome.no_tests or not result.ran:
        return ""
    return " (" + ", ".join(f"{name}: {count}" for name, count in result.ran.items()) + ")"


def _verdict(result: JobResult) -> str:
    if result.outcome.no_tests:
        return "NO TESTS RAN"
    return "OK" if result.ok else "FAILED"
