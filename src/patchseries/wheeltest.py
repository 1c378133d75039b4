"""``patchseries test-wheels``: the wheels in ``dist/`` installed as users get them (never editable) into a fresh
environment with a torch release, then checked against the installed package: its version and origin, one line each
patch adds (:func:`patched_lines`), and the acceptance suite run from a folder of its own, imports mapped."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from packaging.utils import canonicalize_name

from patchseries import release
from patchseries import runner as env
from patchseries.errors import SeriesError
from patchseries.gitcmd import git
from patchseries.job import RUNIF, is_test_module, source_files
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.release import SERIES_REF, PackageMapping, WheelPin, replace_imports
from patchseries.runner import run_tests
from patchseries.series import Patch, file_sections, hunks, section_path
from patchseries.trees import BASE_REF, resolve_source, tool_tree

MIN_LINE = 12  # characters of a looked-up line: shorter ones (``return x``) are in many files
_INFO_SCRIPT = """\
import importlib.metadata as metadata, importlib.util, json, sys, sysconfig
spec = importlib.util.find_spec(sys.argv[2])  # not imported (nor torch)
print(json.dumps([metadata.version(sys.argv[1]), spec and spec.origin, sysconfig.get_paths()["purelib"]]))
"""


@dataclass(frozen=True)
class PatchLine:
    patch: str
    path: str  # in the installed package: pytorch_lightning/core/module.py
    line: str | None  # a line, or a block of lines; None: nothing to look up, for the reason ``note``
    note: str = ""


def find_wheel(dist: Path, package: str, local_version: str, rebuild: str) -> Path:
    """The wheel of ``package`` in ``dist``; ``rebuild``: the command that builds it there (the run's own options)."""
    found = sorted(dist.glob(f"{package}-{local_version}-*.whl")) if dist.is_dir() else []
    if not found:
        raise SeriesError(f"there is no {package} {local_version} wheel in {dist}; build the wheels first ({rebuild})")
    return found[-1]


def patched_lines(patches: list[Patch], mapping: PackageMapping, tree: Path, lacks: tuple[str, ...]) -> list[PatchLine]:
    """For each patch, one line it adds to a Python source of the package (mapped), read from the patch files now:
    one the file has after the whole series and lacked in the release, of :data:`MIN_LINE` characters or more; first
    one no other patch adds, else one another patch adds too, else a block of its consecutive added lines."""
    runs = {}  # each patch's runs of consecutive added lines, mapped, with the file they go to
    for patch in patches:
        sections = file_sections(patch.path.read_bytes().decode(errors="surrogateescape"))
        paths = [(path, s) for s in sections if (path := section_path(s)).endswith(".py") and mapping.path(path)]
        runs[patch.name] = [(p, mapping.lines(p, run)) for p, s in paths if not p.startswith(lacks) for run in _runs(s)]
    added_by = Counter(line for each in runs.values() for line in {line.strip() for _, run in each for line in run})

    @functools.cache
    def texts(path: str) -> tuple[str, str, set[str]]:  # after the series and in the release, mapped; lines added
        refs = (SERIES_REF, BASE_REF)
        after, before = (mapping.text(path, git("show", f"{ref}:{path}", cwd=tree, check=False).stdout) for ref in refs)
        return after, before, _stripped(after) - _stripped(before)

    found = []
    for patch in patches:
        candidates = []  # (preference, installed path, line or block)
        for path, run in runs[patch.name]:
            (after, before, new), target = texts(path), str(mapping.path(path)).removeprefix("src/")
            lines = [line for line in map(str.strip, run) if len(line) >= MIN_LINE and line in new]
            candidates += [(0 if added_by[line] == 1 else 1, target, line) for line in lines]
            block = "".join(run)
            if len(run) > 1 and len(block.strip()) >= MIN_LINE and block in after and block not in before:
                candidates.append((2, target, block))
        if candidates:
            found.append(PatchLine(patch.name, *min(candidates, key=lambda c: c[0])[1:]))
        else:
            why = "none of its added lines is left after the series" if runs[patch.name] else "no source change in it"
            found.append(PatchLine(patch.name, "", None, why))
    return found


def check_installed(lines: list[PatchLine], site_packages: Path) -> tuple[bool, list[str]]:
    """Look each patch's line up in the installed files; whether all were found (and at least one), and a report."""
    report, ok = [], True
    for item in lines:
        if item.line is None:
            report.append(f"{item.patch[:4]}: not checked ({item.note})")
            continue
        installed = site_packages / item.path
        text = installed.read_text(errors="replace") if installed.is_file() else ""
        found = item.line in text if "\n" in item.line else item.line in _stripped(text)
        ok = ok and found
        state = "found in" if found else "NOT PATCHED"
        report.append(f"{item.patch[:4]}: {state} {item.path}: {' / '.join(map(str.strip, item.line.splitlines()))!r}")
    if all(item.line is None for item in lines):
        return False, [*report, "no patch has a source line in this package: nothing was checked"]
    return ok, report


def run_wheel_test(
    ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], package: str, torch: str, dist: Path, log: Log,
    rebuild: str, installer: str = "auto", pytest_args: tuple[str, ...] = (),
) -> tuple[int, str]:  # fmt: skip
    """Install ``package``'s wheel from ``dist`` with ``torch`` into a fresh environment and test it (module doc): the
    exit status and the summary. ``rebuild``: the command that builds the wheels into ``dist`` (a refusal's remedy)."""
    pin, version = wheel_pin.pin, wheel_pin.local_version
    wheel = find_wheel(dist, package, version, rebuild)
    release.kept(wheel, wheel_pin.series, f", then build the wheels again ({rebuild})")
    metadata = release.dist_info(wheel, "METADATA") or ""  # the wheels of dist/ it requires, not PyPI's
    required = {canonicalize_name(name) for name in re.findall(r"^Requires-Dist: ([\w.-]+)", metadata, re.MULTILINE)}
    ours = [p for p in wheel_pin.packages if p != package and canonicalize_name(p) in required]
    wheels = [wheel, *(find_wheel(dist, p, version, rebuild) for p in ours)]
    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)[0].path
    mapping = wheel_pin.mapping(package)
    lines = patched_lines(patches, mapping, tree, pin.sdist_lacks)
    venv = ws.venvs / f"wheel-{package}-py{sys.version_info[0]}.{sys.version_info[1]}-torch{torch}"
    uv = env.find_uv(installer)  # made fresh every time (no recipe): what a user's new environment is
    log(f"creating {venv.name}: torch {torch} and {', '.join(w.name for w in wheels)} installed with "
        f"{'uv pip' if uv else 'pip'}")  # fmt: skip
    requirements = [f"torch=={torch}", *env.companion_requirements(torch), *env.TEST_REQUIREMENTS, *map(str, wheels)]
    env.build_venv(venv, sys.executable, uv, [*env.index_args(uv is not None, env.torch_index()), *requirements],
                   f"cannot install {wheel.name} with torch {torch}", log)  # fmt: skip
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", _INFO_SCRIPT, wheel.name.split("-", 1)[0], package],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SeriesError(f"cannot read what is installed in {venv}: "
                          f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")  # fmt: skip
    # the record was checked in the wheel (kept): the version installed is that wheel's
    installed, origin, purelib = json.loads(proc.stdout)
    site_packages, origin = Path(purelib), str(origin or "nowhere")
    problems = [
        installed != version and f"installed version {installed}, not {version}",
        not origin.startswith(purelib) and f"{package} is imported from {origin}, not from {site_packages}",
    ]
    files_ok, files = check_installed(lines, site_packages)
    files_ok = files_ok and not any(problems)
    log(f"installed {package} {installed} in {venv.name}; installed-files check: "
        f"{'ok' if files_ok else 'FAILED'}")  # fmt: skip
    standalone = wheel_pin.standalone(package)
    suites = [f"tests_{s}" for s in (standalone.ships if standalone else (s.subpackage for s in wheel_pin.standalones))]
    ws.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheel-tests-") as scratch:
        modules = _write_suite(ws.acceptance, Path(scratch), suites, mapping)
        shutil.copyfile(tree / "pyproject.toml", Path(scratch) / "pyproject.toml")  # Lightning's pytest configuration
        log(f"running the acceptance suite ({len(modules)} modules of {', '.join(suites)}) against the installed "
            f"{package}")  # fmt: skip
        reports = ws.reports / f"wheel-{package}-torch-{torch}"
        outcome = run_tests(env.Environment(venv, torch), Path(scratch), modules, [], reports, pytest_args)
    status = (5 if outcome.no_tests else 0 if outcome.ok else 1) if files_ok else 1
    return status, "\n".join([
        "wheel test",
        f"  package:   {package} {installed} (installed from {wheel})",
        f"  torch:     {torch}",
        *(f"  files:     {line}" for line in [*(p for p in problems if p), *files]),
        f"  tests:     {outcome.line()} (acceptance suite against the installed package)",
        f"  result:    {({5: 'NO TESTS RAN', 0: 'OK'}).get(status, 'FAILED')}",
    ])  # fmt: skip


def _stripped(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def _runs(section: str) -> list[list[str]]:
    """The runs of consecutive added lines of a diff section, each line with its newline."""
    grouped = (groupby(hunk, key=lambda line: line[0] == "+") for hunk in hunks(section))
    return [[text + "\n" for _, _, text in run] for groups in grouped for added, run in groups if added]


def _write_suite(source: Path, root: Path, suites: list[str], mapping: PackageMapping) -> list[str]:
    """The acceptance suite's files of ``suites`` under ``root/tests``, imports mapped, with RunIf and package markers;
    its test modules (``tests/...`` paths)."""
    files = [r for r in source_files(source) if r.split("/", 1)[0] in suites]
    written = [(root / "tests" / r, (source / r).read_text(errors="surrogateescape")) for r in files]
    for suite in (suite for suite in suites if f"{suite}/helpers/runif.py" not in files):
        package = f"{mapping.base}.{suite.removeprefix('tests_')}"
        written.append((root / "tests" / suite / "helpers" / "runif.py", RUNIF.format(suite=suite, package=package)))
    for path, text in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        mapped = "".join(replace_imports(text.splitlines(keepends=True), mapping.imports))
        path.write_text(mapped, errors="surrogateescape")
        for folder in path.parents[: len(path.relative_to(root / "tests").parts) - 1]:  # package markers, as upstream
            (folder / "__init__.py").touch()
    if not any(is_test_module(r) for r in files):
        raise SeriesError(f"the acceptance suite ({source}) has no test modules in {', '.join(suites)}")
    return sorted(f"tests/{r}" for r in files if is_test_module(r))
