"""``patchseries test-wheels``: the wheels in ``dist/`` tested as users get them.

Each wheel is installed (``uv pip``, else pip; never editable) into a fresh environment with a torch release, with the
wheels of ``dist/`` it requires. Then, against the installed package: its version, its record's series and where it
is imported from; for each patch one line it adds, looked up in the installed file (:func:`patched_lines`: a wheel of
the unpatched release fails it); and the acceptance suite (imports mapped for a standalone package), run from a folder
that holds only the tests and Lightning's ``pyproject.toml``, so that every ``import`` finds the installed package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from patchseries.acceptance import is_test_module, source_files
from patchseries.apply import tool_tree
from patchseries.base import resolve_source
from patchseries.environment import (
    TEST_REQUIREMENTS,
    Environment,
    build_venv,
    choose_uv,
    companion_requirements,
    index_args,
    torch_index,
)
from patchseries.errors import SeriesError
from patchseries.gitcmd import git
from patchseries.harness import RUNIF
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.release import (
    RECORD_NAME,
    SERIES_REF,
    PackageMapping,
    WheelPin,
    refuse_another_series,
    replace_imports,
    wheel_prefix,
)
from patchseries.series import Patch, file_sections, hunks, section_path
from patchseries.testrun import TestOutcome, run_tests
from patchseries.trees import BASE_REF

MIN_LINE = 12  # characters of a looked-up line: shorter ones (``return x``) are in many files
_INFO_SCRIPT = """\
import importlib.metadata as metadata, importlib.util, json, sys, sysconfig
dist, spec = metadata.distribution(sys.argv[1]), importlib.util.find_spec(sys.argv[2])  # not imported (nor torch)
print(json.dumps({"version": dist.version, "record": dist.read_text(sys.argv[3]), "origin": spec and spec.origin,
                  "purelib": sysconfig.get_paths()["purelib"]}))
"""


@dataclass(frozen=True)
class PatchLine:
    """The line the installed-files check looks up for one patch (a block: several lines), or why there is none."""

    patch: str
    path: str  # in the installed package: pytorch_lightning/core/module.py
    line: str | None
    note: str = ""


@dataclass
class WheelResult:
    package: str
    torch: str
    wheel: Path
    version: str = ""
    files: list[str] = field(default_factory=list)  # one line per patch: found, or the problem
    files_ok: bool = False
    outcome: TestOutcome | None = None

    @property
    def ok(self) -> bool:
        return self.files_ok and self.outcome is not None and self.outcome.ok

    @property
    def exit_status(self) -> int:
        if self.files_ok and self.outcome is not None and self.outcome.no_tests:
            return 5
        return 0 if self.ok else 1


def find_wheel(dist: Path, package: str, local_version: str, rebuild: str) -> Path:
    """The wheel of ``package`` in ``dist``; ``rebuild``: the command that builds it there (the run's own options)."""
    found = sorted(dist.glob(f"{wheel_prefix(package, local_version)}*.whl")) if dist.is_dir() else []
    if not found:
        raise SeriesError(f"there is no {package} {local_version} wheel in {dist}; build the wheels first ({rebuild})")
    return found[-1]


def patched_lines(patches: list[Patch], mapping: PackageMapping, tree: Path, lacks: tuple[str, ...]) -> list[PatchLine]:
    """For each patch, one line it adds to a Python source of the package (mapped), read from the patch files now:
    one the file has after the whole series and lacked in the release, of :data:`MIN_LINE` characters or more; first
    one no other patch adds, else one another patch adds too, else a block of its consecutive added lines."""
    runs = {
        patch.name: [
            (path, run)
            for section in file_sections(patch.path.read_bytes().decode(errors="surrogateescape"))
            if (path := section_path(section)).endswith(".py") and not path.startswith(lacks) and mapping.path(path)
            for run in _added_runs(section)
        ]
        for patch in patches
    }
    added_by: dict[str, set[str]] = {}
    for name, patch_runs in runs.items():
        for path, run in patch_runs:
            for line in mapping.lines(path, run):
                added_by.setdefault(line.strip(), set()).add(name)
    files: dict[str, tuple[str, str]] = {}
    found = []
    for patch in patches:
        candidates: list[tuple[int, str, str]] = []  # (preference, installed path, line or block)
        for path, run in runs[patch.name]:
            if path not in files:
                files[path] = (
                    _mapped_file(tree, SERIES_REF, path, mapping),
                    _mapped_file(tree, BASE_REF, path, mapping),
                )
            after, before = files[path]
            after_lines, before_lines = _stripped(after), _stripped(before)
            target = str(mapping.path(path)).removeprefix("src/")
            mapped = mapping.lines(path, run)
            for line in (m.strip() for m in mapped):
                if len(line) >= MIN_LINE and line in after_lines and line not in before_lines:
                    candidates.append((0 if added_by.get(line) == {patch.name} else 1, target, line))
            block = "".join(mapped)
            if len(mapped) > 1 and len(block.strip()) >= MIN_LINE and block in after and block not in before:
                candidates.append((2, target, block))
        if candidates:
            found.append(PatchLine(patch.name, *min(candidates, key=lambda c: c[0])[1:]))
        else:
            why = "none of its added lines is left after the series" if runs[patch.name] else "no source change in it"
            found.append(PatchLine(patch.name, "", None, why))
    return found


def check_installed(lines: list[PatchLine], site_packages: Path) -> tuple[bool, list[str]]:
    """Look each patch's line up in the installed files; whether all were found (and at least one), and a report."""
    report, failed = [], 0
    for item in lines:
        installed = site_packages / item.path
        text = installed.read_text(errors="replace") if item.line and installed.is_file() else None
        if item.line is None:
            report.append(f"{item.patch[:4]}: not checked ({item.note})")
        elif text is None:
            report.append(f"{item.patch[:4]}: MISSING {item.path} is not installed")
        elif (item.line not in text) if "\n" in item.line else (item.line not in _stripped(text)):
            report.append(f"{item.patch[:4]}: NOT PATCHED {item.path} lacks {_shown(item.line)}")
        else:
            report.append(f"{item.patch[:4]}: found in {item.path}: {_shown(item.line)}")
            continue
        failed += item.line is not None
    if all(item.line is None for item in lines):
        return False, [*report, "no patch has a source line in this package: nothing was checked"]
    return failed == 0, report


def run_wheel_test(
    ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], package: str, torch: str, dist: Path, log: Log,
    rebuild: str, installer: str = "auto", pytest_args: tuple[str, ...] = (),
) -> WheelResult:  # fmt: skip
    """Install ``package``'s wheel from ``dist`` with ``torch`` into a fresh environment and test it (module doc).
    ``rebuild``: the command that builds the wheels into ``dist`` with the run's own options (a refusal's remedy)."""
    pin = wheel_pin.pin
    wheel = find_wheel(dist, package, wheel_pin.local_version, rebuild)
    refuse_another_series(wheel, wheel_pin.series, f", then build the wheels again ({rebuild})")
    with zipfile.ZipFile(wheel) as archive:
        metadata = next((archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA")), "")
    required = {
        canonicalize_name(Requirement(r).name) for r in HeaderParser().parsestr(metadata).get_all("Requires-Dist", [])
    }
    ours = [p for p in wheel_pin.packages if p != package and canonicalize_name(p) in required]  # not PyPI's
    wheels = [wheel, *(find_wheel(dist, p, wheel_pin.local_version, rebuild) for p in ours)]
    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)[0].path
    mapping = wheel_pin.mapping(package)
    lines = patched_lines(patches, mapping, tree, pin.sdist_lacks)
    result = WheelResult(package, torch, wheel)
    venv = ws.venvs / f"wheel-{package}-py{sys.version_info[0]}.{sys.version_info[1]}-torch{torch}"
    uv = choose_uv(installer)  # made fresh every time (no recipe): what a user's new environment is
    log(f"creating {venv.name}: torch {torch} and {', '.join(w.name for w in wheels)} installed with "
        f"{'uv pip' if uv else 'pip'}")  # fmt: skip
    requirements = [f"torch=={torch}", *companion_requirements(torch), *TEST_REQUIREMENTS, *map(str, wheels)]
    build_venv(venv, sys.executable, uv, [*index_args(uv is not None, torch_index()), *requirements],
               f"cannot install {wheel.name} with torch {torch}", log)  # fmt: skip
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", _INFO_SCRIPT, wheel.name.split("-", 1)[0], package,
                           RECORD_NAME], capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SeriesError(f"cannot read what is installed in {venv}: {reason}")
    info = json.loads(proc.stdout)
    result.version, site_packages = str(info["version"]), Path(info["purelib"])
    problems = [
        result.version != wheel_pin.local_version
        and f"installed version {result.version}, not {wheel_pin.local_version}",
        not str(info["origin"] or "").startswith(str(site_packages))
        and f"{package} is imported from {info['origin'] or 'nowhere'}, not from {site_packages}",
        json.loads(info["record"] or "{}").get("series", {}).get("fingerprint") != wheel_pin.series
        and f"the installed {RECORD_NAME} does not name the series {wheel_pin.series[:12]}",
    ]
    files_ok, result.files = check_installed(lines, site_packages)
    result.files[:0] = [p for p in problems if p]
    result.files_ok = files_ok and not any(problems)
    log(f"installed {package} {result.version} in {venv.name}; installed-files check: "
        f"{'ok' if result.files_ok else 'FAILED'}")  # fmt: skip
    standalone = wheel_pin.standalone(package)
    suites = [f"tests_{s}" for s in (standalone.ships if standalone else (s.subpackage for s in wheel_pin.standalones))]
    ws.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheel-tests-") as scratch:
        root = Path(scratch)
        modules = _write_suite(ws.acceptance, root, suites, mapping)
        shutil.copyfile(tree / "pyproject.toml", root / "pyproject.toml")  # Lightning's pytest configuration
        log(f"running the acceptance suite ({len(modules)} modules of {', '.join(suites)}) against the installed "
            f"{package}")  # fmt: skip
        reports = ws.reports / f"wheel-{package}-torch-{torch}"
        result.outcome = run_tests(Environment(venv, torch), root, modules, [], reports, pytest_args)
    return result


def summary(result: WheelResult, local_version: str) -> str:
    verdict = "NO TESTS RAN" if result.exit_status == 5 else ("OK" if result.ok else "FAILED")
    return "\n".join([
        "wheel test",
        f"  package:   {result.package} {result.version or local_version} (installed from {result.wheel})",
        f"  torch:     {result.torch}",
        *(f"  files:     {line}" for line in result.files),
        f"  tests:     {'n/a' if result.outcome is None else result.outcome.line()} (acceptance suite against the "
        "installed package)",
        f"  result:    {verdict}",
    ])  # fmt: skip


def _shown(line: str) -> str:
    return repr(" / ".join(part.strip() for part in line.splitlines()))


def _mapped_file(tree: Path, ref: str, path: str, mapping: PackageMapping) -> str:
    proc = git("show", f"{ref}:{path}", cwd=tree, check=False)
    return mapping.text(path, proc.stdout) if proc.returncode == 0 else ""


def _stripped(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def _added_runs(section: str) -> list[list[str]]:
    """The runs of consecutive added lines of a diff section, each line with its newline."""
    runs: list[list[str]] = []
    for hunk in hunks(section):
        current: list[str] = []
        for marker, _, text in [*hunk, (" ", 0, "")]:
            if marker == "+":
                current.append(text + "\n")
            elif current:
                runs.append(current)
                current = []
    return runs


def _write_suite(source: Path, root: Path, suites: list[str], mapping: PackageMapping) -> list[str]:
    """The acceptance suite's files of ``suites`` under ``root/tests``, imports mapped, with RunIf and package markers;
    its test modules (``tests/...`` paths)."""
    written = []
    for relative in (r for r in source_files(source) if r.split("/", 1)[0] in suites):
        written.append((root / "tests" / relative, (source / relative).read_text(errors="surrogateescape")))
    for suite in suites:
        if not (source / suite / "helpers" / "runif.py").exists():
            runif = RUNIF.format(suite=suite, package=f"{mapping.base}.{suite.removeprefix('tests_')}")
            written.append((root / "tests" / suite / "helpers" / "runif.py", runif))
    for path, text in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(replace_imports(text.splitlines(keepends=True), mapping.imports)), errors="surrogateescape"
        )
        for folder in path.parents[: len(path.relative_to(root / "tests").parts) - 1]:  # markers, as upstream has them
            (folder / "__init__.py").touch()
    modules = sorted(f"tests/{r}" for r in source_files(source) if r.split("/", 1)[0] in suites and is_test_module(r))
    if not modules:
        raise SeriesError(f"the acceptance suite ({source}) has no test modules in {', '.join(suites)}")
    return modules
