"""Upstream checkout mode: the series meets Lightning's own tests and static gates.

On a base that ships upstream's ``tests/`` (``--checkout`` or ``--git``), the main job also runs the existing upstream
test modules that exercise the changed code, under upstream's own ``conftest.py`` and requirement files, and runs
upstream's ruff and mypy settings over the files the series changes. Each is run on the series and, when something
fails, on the base too, so that a failure the base already has is reported as pre-existing, not blamed on the series.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from patchseries.environment import Environment
from patchseries.gitcmd import out
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.testrun import junit_cases, run_tests
from patchseries.trees import BASE_REF, base_worktree

# Every upstream module (or folder of modules) that exercises the code the series changes: the LightningModule and its
# optimizers, the loops and strategies that call them, precision plugins' backward and step, compiling, Fabric.
UPSTREAM_MODULES = (
    "tests/tests_pytorch/core",
    "tests/tests_pytorch/trainer/optimization",
    "tests/tests_pytorch/loops",
    "tests/tests_pytorch/strategies",
    "tests/tests_pytorch/plugins/precision",
    "tests/tests_pytorch/models/test_hooks.py",
    "tests/tests_pytorch/utilities/test_compile.py",
    "tests/tests_fabric/test_wrappers.py",
    "tests/tests_fabric/test_fabric.py",
)
UPSTREAM_REQUIREMENTS = ("requirements/pytorch/test.txt", "requirements/fabric/test.txt", "requirements/typing.txt")
# ruff and mypy findings look like "path:line:col: message"; the line and column move when code is added
_FINDING = re.compile(r"^(?P<path>[^:\s]+):\d+(?::\d+)?: (?P<message>.+)$")


@dataclass
class Comparison:
    """Failures (tests or findings) with the series, split by whether the base has them too."""

    name: str
    checked: int = 0
    new: list[str] = field(default_factory=list)
    pre_existing: list[str] = field(default_factory=list)
    note: str = ""  # instead of the counts: why the check was not run ("not run: ...")

    def line(self) -> str:
        if self.note:
            return f"{self.name}: {self.note}"
        verdict = "no new failure" if not self.new else f"{len(self.new)} NEW: " + "; ".join(self.new[:5])
        return f"{self.name}: {self.checked} checked, {verdict}, {len(self.pre_existing)} pre-existing"


def requirement_args(ws: Workspace, tree: Path) -> tuple[str, ...]:
    """``-r FILE`` for each of upstream's requirement files the tree has (minus torch pins), and upstream's ruff."""
    args: list[str] = [_ruff_requirement(tree)]
    for name in UPSTREAM_REQUIREMENTS:
        path = tree / name
        if path.is_file():
            args += ["-r", str(_without_torch_pin(path, ws.reports / "requirements"))]
    return tuple(args)


def run_upstream_tests(
    ws: Workspace, env: Environment, tree: Path, log: Log, not_upstream: tuple[str, ...] = ()
) -> Comparison:
    """Upstream's modules of :data:`UPSTREAM_MODULES` on the series, and the failing ones again on the base.

    ``not_upstream`` are test modules under those folders that are not upstream's (the acceptance suite's copies, the
    modules the series adds): they are left out, as the base has none of them to compare with.
    """
    modules = [m for m in UPSTREAM_MODULES if (tree / m).exists()]
    result = Comparison("upstream tests")
    if not modules:
        return result
    log(f"upstream: running {len(modules)} upstream test modules and folders on the series")
    reports = ws.reports / f"upstream-{env.torch}"
    ignored = tuple(f"--ignore={path.removeprefix('tests/')}" for path in not_upstream)
    after = run_tests(env, tree, modules, [], reports / "series", ("-q", *ignored))
    failing = _failed_ids(after.junit)
    result.checked = after.passed + after.failed
    if failing:
        # only the modules of the failures run again on the base (all of them when there is no report to name them):
        # the widened modules take minutes, those few seconds. A module the base lacks has only new failures.
        base_tree = base_worktree(ws, tree)
        named = {_module_of(tree, case) for case in failing}
        rerun = sorted(m for m in named if m and (base_tree / m).is_file()) if "" not in named else modules
        log(f"upstream: {len(failing)} failures; running their {len(rerun)} modules on the base to tell which are new")
        failing_before: set[str] = set()
        if rerun:
            before = run_tests(
                env, base_tree, rerun, [], reports / "base", ("-q", "-p", "no:randomly", *ignored), base_tree / "src"
            )
            failing_before = _failed_ids(before.junit)
        _split(result, failing, failing_before)
    return result


def _module_of(tree: Path, case: str) -> str:
    """``tests/tests_pytorch/x/test_y.py`` for a JUnit ``classname::name`` (``""`` if no module of ``tree`` matches).

    The class name is the module's dotted path, then any test classes: the longest prefix that is a file is the module.
    A module that failed to import has no class name, and its dotted path as the name.
    """
    classname, _, name = case.partition("::")
    parts = (classname or name).split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        for module in (path, f"tests/{path}"):  # from the rootdir (the tree), or from tests/
            if module.startswith("tests/") and (tree / module).is_file():
                return module
    return ""


def run_static_gates(ws: Workspace, env: Environment, tree: Path, log: Log) -> list[Comparison]:
    """Ruff (lint and format) and mypy, with the tree's own configuration, on the Python files the series changes."""
    changed = [p for p in out("diff", "--name-only", "--diff-filter=AM", BASE_REF, "HEAD", cwd=tree).split()]
    sources = [p for p in changed if p.endswith(".py")]
    if not sources:
        return []
    base_tree = base_worktree(ws, tree)
    existing_in_base = [p for p in sources if (base_tree / p).is_file()]
    python = str(env.python)
    tools = {
        "ruff check": [python, "-m", "ruff", "check", "--output-format=concise", "--no-cache"],
        "ruff format": [python, "-m", "ruff", "format", "--check", "--no-cache"],
        "mypy": [python, "-m", "mypy", "--follow-imports=silent", "--no-incremental", "--no-install-types"],
    }
    comparisons = []
    for name, command in tools.items():
        files = [p for p in sources if p.startswith("src/")] if name == "mypy" else sources
        if not files:
            continue
        log(f"static gates: {name} on {len(files)} changed files")
        after = _findings(command, tree, files)
        before = _findings(command, base_tree, [p for p in files if p in existing_in_base])
        comparison = Comparison(name, checked=len(files))
        _split(comparison, after, before)
        comparisons.append(comparison)
    return comparisons


def _findings(command: list[str], tree: Path, files: list[str]) -> set[str]:
    if not files:
        return set()
    proc = subprocess.run([*command, *files], cwd=tree, capture_output=True, text=True, check=False)
    findings = set()
    for line in proc.stdout.splitlines():
        match = _FINDING.match(line.strip())
        if match:
            findings.add(f"{match.group('path')}: {match.group('message')}")
        elif line.startswith("Would reformat: "):
            findings.add(line.strip())
    return findings


def _split(comparison: Comparison, failing: set[str], failing_before: set[str]) -> None:
    comparison.new = sorted(failing - failing_before)
    comparison.pre_existing = sorted(failing & failing_before)


def _failed_ids(junit: Path) -> set[str]:
    if not junit.exists():
        return {"(no report)"}
    return {f"{case.classname}::{case.name}" for case in junit_cases(junit) if case.outcome == "failed"}


def _ruff_requirement(tree: Path) -> str:
    """The ruff release upstream pins in ``.pre-commit-config.yaml`` (its ruff-pre-commit ``rev``), else any."""
    config = tree / ".pre-commit-config.yaml"
    text = config.read_text() if config.is_file() else ""
    match = re.search(r"ruff-pre-commit\s*\n\s*rev:\s*v?([0-9][0-9.]*)", text)
    return f"ruff=={match.group(1)}" if match else "ruff"


def _without_torch_pin(requirements: Path, directory: Path) -> Path:
    """Upstream's typing requirements pin torch; the job's own torch must win, so a copy without that line is used."""
    text = requirements.read_text()
    kept = [line for line in text.splitlines() if not re.match(r"^\s*torch\s*(==|>=|<=|~=|<|>|$)", line)]
    if len(kept) == len(text.splitlines()):
        return requirements
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / f"{requirements.parent.name}-{requirements.stem}.no-torch.txt"
    copy.write_text("\n".join(kept) + "\n")
    return copy
