"""The main job (pin -> base -> apply -> environment -> test -> report), and the tool's files in the tree's tests/."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from patchseries import gates, trees
from patchseries.changed_lines import ChangedLines, added_lines, measure
from patchseries.errors import SeriesError
from patchseries.gitcmd import add_excludes, git, git_path, has_path
from patchseries.interrupts import write_file
from patchseries.paths import ACCEPTANCE_DIR, Workspace
from patchseries.pin import Pin, load_pin
from patchseries.progress import Log
from patchseries.runner import TestOutcome, ensure_environment, junit_cases, run_tests
from patchseries.series import Patch, snapshot_series

RUNIF = '''\
"""RunIf for {suite}, written by patchseries because this Lightning base ships no tests/."""
import pytest
from {package}.utilities.testing import _runif_reasons


def RunIf(**kwargs):  # noqa: N802 - Lightning's own helper's name
    reasons, marker_kwargs = _runif_reasons(**kwargs)
    return pytest.mark.skipif(len(reasons) > 0, reason=f"Requires: [{{' + '.join(reasons)}}]", **marker_kwargs)
'''
_SUITES = {"tests_pytorch": "lightning.pytorch", "tests_fabric": "lightning.fabric"}
_MARKER = b'"""Package marker written by patchseries."""\n'


@dataclass(frozen=True)
class BaseChoice:  # where the base comes from: the sdist (default), --checkout PATH or --git
    checkout: Path | None = None
    use_git: bool = False
    force_base: bool = False


@dataclass(frozen=True)
class Prepared:
    pin: Pin
    patches: list[Patch]
    base: trees.BaseTree
    applied: trees.ApplyResult
    acceptance: list[str]  # the acceptance suite's test modules in the tree

    def test_groups(self) -> dict[str, list[str]]:
        # the patches' tests: the test modules they add or change that the tree has (the sdist lacks upstream's)
        changed = dict.fromkeys(c.path for p in self.patches for c in p.changes if c.kind != "deleted")
        ours = [p for p in changed if p.startswith("tests/") and is_test_module(p) and (self.base.path / p).is_file()]
        return {"acceptance suite": self.acceptance, "patches' tests": ours}

    def test_modules(self) -> list[str]:
        return [module for modules in self.test_groups().values() for module in modules]

    def sources(self) -> list[str]:  # the Python files the series changes under src/: what coverage reports on
        return sorted({c.path for p in self.patches for c in p.changes if re.fullmatch(r"src/.*\.py", c.path)})


@dataclass(frozen=True)
class JobResult:
    prepared: Prepared
    torch: str
    outcome: TestOutcome
    upstream: list[gates.Comparison] = field(default_factory=list)
    changed: ChangedLines | None = None  # coverage of the lines the series adds or changes
    changed_report: Path | None = None

    @property
    def exit_status(self) -> int:  # 0 passed, 1 failed, 5 no test ran (as pytest: the arguments selected none)
        return 5 if self.outcome.no_tests else 1 if not self.outcome.ok or any(c.new for c in self.upstream) else 0


def get_source(ws: Workspace, pin: Pin, choice: BaseChoice) -> trees.BaseSource:  # checked before anything is created
    return trees.resolve_source(ws, pin, choice.checkout, choice.use_git, choice.force_base)


def prepare(ws: Workspace, choice: BaseChoice, log: Log) -> Prepared:
    """Stages 1-3: the tool's tree with the series applied, the acceptance suite and the harness in its ``tests/``."""
    log("stage 1/5: reading the pin and the series")
    pin, patches = load_pin(ws.pin_file), snapshot_series(ws.patches, ws.scratch / "series")
    log(f"stage 2/5: getting the base ({pin.name} {pin.version})")
    source = get_source(ws, pin, choice)
    log(f"stage 3/5: applying {len(patches)} patches on {ws.trees / source.tree_name}")
    tree, applied = trees.tool_tree(ws, pin, patches, source, log)
    with trees.recording(tree.path, copies=True):
        if installed := install_acceptance(tree.path, ws.acceptance):  # first: the harness adds only what it lacks
            log(f"copied the acceptance suite ({len(installed)} test modules) into tests/")
        if written := write_harness(tree.path, patches):
            log(f"wrote the minimal test harness ({len(written)} files; the base ships no upstream tests)")
    return Prepared(pin, patches, tree, applied, installed)


def run_main_job(
    ws: Workspace, choice: BaseChoice, torch: str, log: Log, installer: str = "auto", pytest_args: tuple[str, ...] = ()
) -> JobResult:  # the whole main job; the caller prints summary(result)
    prepared = prepare(ws, choice, log)
    tree = prepared.base.path
    with trees.recording(tree):  # installing and testing write into the tree: what they make is the tool's
        upstream_checkout = has_path(tree, "tests", trees.BASE_REF)  # the base's: the work tree gets the series' tests
        log(f"stage 4/5: environment with torch {torch}")
        extra = gates.requirement_args(ws, tree) if upstream_checkout else ()
        extra += gates.DOCS_REQUIREMENTS if upstream_checkout and gates.changed_pages(tree) else ()
        env = ensure_environment(ws, tree, torch, log, installer=installer, extra=extra)
        groups, tests = prepared.test_groups(), prepared.test_modules()
        counts = ", ".join(f"{name}: {len(modules)}" for name, modules in groups.items())
        log(f"stage 5/5: running {len(tests)} test modules of the series ({counts})")
        reports = ws.reports / f"torch-{torch}"
        outcome = run_tests(env, tree, tests, prepared.sources(), reports, pytest_args)
        changed = measure(added_lines(tree, trees.BASE_REF, "HEAD"), xml) if (xml := outcome.coverage_xml) else None
        title = f"Lines the series adds or changes under src/, covered by its tests (torch {torch})"
        changed_report = changed.write(reports, title) if changed is not None else None
        upstream = []
        if upstream_checkout:
            not_upstream = (*prepared.acceptance, *series_test_files(prepared.patches))
            upstream = [gates.run_upstream_tests(ws, env, tree, log, not_upstream)]
            upstream += gates.run_static_gates(ws, env, tree, log)
            upstream += [docs] if (docs := gates.run_docs_gate(ws, env, tree, log)) else []
            upstream += gates.run_hooks(ws, tree, log)
        return JobResult(prepared, torch, outcome, upstream, changed, changed_report)


def summary(result: JobResult) -> str:
    prepared, outcome, applied = result.prepared, result.outcome, result.prepared.applied
    coverage = [
        f"  coverage:  changed lines: {result.changed.line()} (uncovered listed in {result.changed_report})",
        f"             changed modules: {outcome.coverage}% (xml: {outcome.coverage_xml})",
    ] if result.changed is not None else ["  coverage:  n/a (no coverage report)"]  # fmt: skip
    excluded = sum(len(v) for v in applied.excluded.values())
    patches = "already applied, reused" if applied.reused else f"{len(applied.applied)} applied"
    ran = ", ".join(f"{name}: {count}" for name, count in ran_per_group(outcome.junit, prepared.test_groups()).items())
    return "\n".join([
        "summary",
        f"  base:      {prepared.pin.name} {prepared.pin.version} ({prepared.base.source}, "
        f"commit {prepared.base.base_commit[:12]})",
        f"  torch:     {result.torch}",
        f"  patches:   {len(prepared.patches)} in series, {patches}"
        + (f", {len(applied.already_present)} already in base" if applied.already_present else "")
        + (f", {excluded} paths excluded" if excluded else ""),
        f"  tests:     {outcome.line()}" + ("" if outcome.no_tests else f" ({ran})"),
        *coverage,
        f"  tree:      {prepared.base.path} (branch {trees.SERIES_BRANCH})",
        *(f"  upstream:  {comparison.line()}" for comparison in result.upstream),
        f"  result:    {({0: 'OK', 1: 'FAILED', 5: 'NO TESTS RAN'})[result.exit_status]}",
    ])  # fmt: skip


def ran_per_group(junit: Path, groups: dict[str, list[str]]) -> dict[str, int]:
    counts = dict.fromkeys(groups, 0)
    for case in junit_cases(junit):
        # pytest: the module from the rootdir (tests.x or x), then its class; one that fails to import: no class name
        module = "tests/" + (case.classname or case.name).removeprefix("tests.").replace(".", "/") + "/"
        mine = [name for name, paths in groups.items() for p in paths if module.startswith(p[:-3] + "/")]
        if case.outcome in ("passed", "failed") and mine:
            counts[mine[0]] += 1
    return counts


def is_test_module(path: str) -> bool:
    return re.search(r"(^|/)test_[^/]*\.py$", path) is not None


def series_test_files(patches: list[Patch]) -> list[str]:
    return list(dict.fromkeys(p for x in patches for p in x.new_files if p.startswith("tests/") and is_test_module(p)))


def write_harness(tree: Path, patches: list[Patch]) -> list[Path]:
    """The ``RunIf`` helpers and package markers the series' tests need, where the tree lacks them; what was written."""
    runifs = {f"tests/{suite}/helpers/runif.py": RUNIF.format(suite=suite, package=package).encode()
              for suite, package in _SUITES.items()}  # fmt: skip
    markers = dict.fromkeys(_markers([*runifs, *series_test_files(patches)]), _MARKER)
    return [tree / path for path in _place(tree, "patchseries-harness.json", {}, {**runifs, **markers})]


def _markers(paths: list[str]) -> list[str]:
    """The ``__init__.py`` files of the folders of ``paths``, from ``tests/<suite>`` down (upstream has them all)."""
    folders = {p.rsplit("/", up)[0] for p in paths if p.split("/")[1] in _SUITES for up in range(1, p.count("/"))}
    return sorted(f"{folder}/__init__.py" for folder in folders if f"{folder}/__init__.py" not in paths)


def source_files(source: Path) -> list[str]:
    """The acceptance suite's files: those of its ``tests_*`` folders (not its README), no caches, no hidden files."""
    found = sorted(path.relative_to(source).as_posix() for path in source.glob("tests_*/**/*") if path.is_file())
    return [path for path in found if not re.search(r"(^|/)(\.|__pycache__/)|\.py[co]$", path)]


def install_acceptance(tree: Path, source: Path) -> list[str]:
    files = {f"tests/{relative}": (source / relative).read_bytes() for relative in source_files(source)}
    _place(tree, "patchseries-acceptance.json", files, dict.fromkeys(_markers(list(files)), _MARKER))
    return sorted(path for path in files if is_test_module(path))


def _place(tree: Path, name: str, files: dict[str, bytes], generated: dict[str, bytes]) -> list[str]:
    """The one writer of the tool's files in ``tests/``, by sha256 in manifest ``name``; one in the way refuses all."""
    manifest_file = git_path(tree, name)
    manifest: dict[str, list[str]] = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    listed = git("--literal-pathspecs", "ls-files", "-z", "--cached", "--", *files, *generated, *manifest, cwd=tree)
    tracked = set(listed.stdout.split("\0"))
    wanted = {**{p: d for p, d in generated.items() if p not in tracked and (p in manifest or _read(tree / p) is None)},
              **files}  # fmt: skip
    stale = [path for path in manifest if path not in wanted and path not in tracked]
    for path in [*wanted, *stale]:  # in the way: tracked, not written by the tool, or changed since
        now = _read(tree / path)
        if path in tracked or now not in (None, wanted.get(path)) and _sha(now or b"") not in manifest.get(path, []):
            raise SeriesError(f"{tree / path} is in the way of patchseries' files in tests/ (copies of "
                              f"{ACCEPTANCE_DIR}/, the harness): the tree tracks it, or patchseries did "
                              "not write it, or it changed since; rename the file in "
                              f"{ACCEPTANCE_DIR}/, or move yours away; nothing was copied")  # fmt: skip
    changed = {path: data for path, data in wanted.items() if _read(tree / path) != data}
    # excluded before written (never an untracked file); meanwhile the manifest allows both contents (interrupted runs)
    add_excludes(tree, [f"/{path}" for path in wanted])
    entries = {**manifest, **{path: [*manifest.get(path, []), _sha(data)] for path, data in changed.items()}}
    write_file(manifest_file, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    for path, data in changed.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    stale.sort(key=lambda path: (path.endswith("/__init__.py"), -path.count("/")))  # markers last, deepest first
    removed = [path for path in stale if _remove_copy(tree, path)]
    kept = {p: manifest[p] for p in stale if p not in removed} | {p: [_sha(d)] for p, d in wanted.items()}
    write_file(manifest_file, json.dumps(kept, indent=1, sort_keys=True) + "\n")
    add_excludes(tree, [], drop=[f"/{path}" for path in manifest if path not in kept])
    return sorted(changed)


def _remove_copy(tree: Path, path: str) -> bool:
    target = tree / path
    names = {p.name for p in target.parent.iterdir()} if target.parent.is_dir() else set()
    if target.name == "__init__.py" and names - {"__init__.py", "__pycache__"}:
        return False
    target.unlink(missing_ok=True)
    shutil.rmtree(target.parent / "__pycache__", ignore_errors=True)
    with contextlib.suppress(OSError):  # up to the first folder that holds something
        os.removedirs(target.parent)
    return True


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
