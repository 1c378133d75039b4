"""``patchseries test-wheels``: the wheels in ``dist/`` tested as users get them.

Each wheel is installed with the installer (``uv pip``, else pip; never editable, never on ``PYTHONPATH``) into a
fresh environment with a torch release, together with the other wheels of ``dist/`` it requires (``lightning``
requires ``pytorch-lightning``). Then, against the installed package:

- what is installed: the version (``2.6.6+series.N``), the series' record in the ``.dist-info`` (its fingerprint must
  be the series' of ``patches/``), and the package found in the environment's ``site-packages``;
- the installed-files check (:func:`patched_lines`): for each patch, one line it adds to a source file of the package,
  taken from the patch file at run time (one that the series leaves in place and that the unpatched release lacks),
  looked up in the installed file: a wheel built from the unpatched sources fails it;
- the acceptance suite, for a standalone package with its imports mapped (``lightning.pytorch`` ->
  ``pytorch_lightning``, ``lightning.fabric`` -> ``lightning_fabric``), run from a scratch folder that holds only the
  tests and Lightning's ``pyproject.toml`` (its pytest configuration, as in the main job), so that every ``import``
  finds the installed package.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from patchseries.acceptance import is_test_module, source_files
from patchseries.environment import (
    TEST_REQUIREMENTS,
    Environment,
    build_venv,
    choose_uv,
    companion_requirements,
    index_args,
    parse_torch_version,
    torch_index,
)
from patchseries.errors import SeriesError
from patchseries.gitcmd import git
from patchseries.harness import RUNIF
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.series import Patch, file_sections, fingerprint, hunks, section_path
from patchseries.standalone import PackageMapping, WheelPin, replace_imports
from patchseries.testrun import TestOutcome, run_tests
from patchseries.trees import BASE_REF, resolve_source, tool_tree
from patchseries.wheelbuild import SERIES_REF
from patchseries.wheeldist import RECORD_NAME, refuse_another_series, wheel_prefix
from patchseries.wheels import check_python, running_python

MIN_LINE = 12  # characters of a looked-up line: shorter ones (``return x``) are in many files
_REQUIRES = re.compile(r"^Requires-Dist: ([A-Za-z0-9._-]+)", re.MULTILINE)
_INFO_SCRIPT = """\
import importlib.metadata as metadata, importlib.util, json, sys, sysconfig
name, package = sys.argv[1], sys.argv[2]
dist = metadata.distribution(name)
spec = importlib.util.find_spec(package)  # finds the package without importing it (nor torch)
print(json.dumps({"version": dist.version, "record": dist.read_text(sys.argv[3]), "origin": spec and spec.origin,
                  "purelib": sysconfig.get_paths()["purelib"]}))
"""


@dataclass(frozen=True)
class PatchLine:
    """The line the installed-files check looks up for one patch, or why there is none."""

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
    """For each patch, one line it adds to a Python source of the package, as the package has it (mapped).

    Read from the patch files now (whatever the series is today), among the lines of at least :data:`MIN_LINE`
    characters that the file has after the whole series and did not have in the release (so that it is found in a
    patched install and missing from an unpatched one): first one that no other patch adds, else one that another
    patch adds too, else a block of consecutive added lines as the file has it after the series (a patch whose only
    lines are short: ``try:``, ``finally:``).
    """
    added_by: dict[str, set[str]] = {}
    sources: dict[str, list[tuple[str, str]]] = {}
    for patch in patches:
        text = patch.path.read_bytes().decode(errors="surrogateescape")
        sections = [(section_path(s), s) for s in file_sections(text)]
        sources[patch.name] = [
            (p, s) for p, s in sections if p.endswith(".py") and not p.startswith(lacks) and mapping.path(p)
        ]
        for path, section in sources[patch.name]:
            for run in _added_runs(section):
                for line in mapping.lines(path, run):
                    added_by.setdefault(line.strip(), set()).add(patch.name)
    files: dict[str, tuple[str, str]] = {}
    found = []
    for patch in patches:
        if not sources[patch.name]:
            found.append(PatchLine(patch.name, "", None, "no source change in this package"))
            continue
        candidates: list[tuple[int, str, str]] = []  # (preference, installed path, line or block)
        for path, section in sources[patch.name]:
            if path not in files:
                files[path] = tuple(  # type: ignore[assignment]
                    "".join(mapping.lines(path, _show(tree, ref, path))) for ref in (SERIES_REF, BASE_REF)
                )
            after, before = files[path]
            after_lines, before_lines = _stripped(after.splitlines()), _stripped(before.splitlines())
            target = str(mapping.path(path)).removeprefix("src/")
            for run in _added_runs(section):
                mapped = mapping.lines(path, run)
                for line in (m.strip() for m in mapped):
                    if len(line) >= MIN_LINE and line in after_lines and line not in before_lines:
                        candidates.append((0 if added_by.get(line) == {patch.name} else 1, target, line))
                block = "".join(mapped)
                if len(mapped) > 1 and len(block.strip()) >= MIN_LINE and block in after and block not in before:
                    candidates.append((2, target, block))
        if candidates:
            _, target, line = min(candidates, key=lambda c: c[0])
            found.append(PatchLine(patch.name, target, line))
        else:
            found.append(PatchLine(patch.name, "", None, "none of its added lines is left after the series"))
    return found


def check_installed(lines: list[PatchLine], site_packages: Path) -> tuple[bool, list[str]]:
    """Look each patch's line up in the installed files; whether all were found (and at least one), and a report."""
    report = []
    ok = True
    looked_up = 0
    for item in lines:
        if item.line is None:
            report.append(f"{item.patch[:4]}: not checked ({item.note})")
            continue
        looked_up += 1
        installed = site_packages / item.path
        text = installed.read_text(errors="replace") if installed.is_file() else None
        if text is None:
            ok = False
            report.append(f"{item.patch[:4]}: MISSING {item.path} is not installed")
        elif (item.line not in text) if "\n" in item.line else (item.line not in _stripped(text.splitlines())):
            ok = False
            report.append(f"{item.patch[:4]}: NOT PATCHED {item.path} lacks {_shown(item.line)}")
        else:
            report.append(f"{item.patch[:4]}: found in {item.path}: {_shown(item.line)}")
    if looked_up == 0:
        ok = False
        report.append("no patch has a source line in this package: nothing was checked")
    return ok, report


def run_wheel_test(
    ws: Workspace,
    wheel_pin: WheelPin,
    patches: list[Patch],
    package: str,
    torch: str,
    dist: Path,
    log: Log,
    rebuild: str,
    installer: str = "auto",
    pytest_args: tuple[str, ...] = (),
) -> WheelResult:
    """Install ``package``'s wheel from ``dist`` with ``torch`` into a fresh environment and test it (module doc).

    ``rebuild``: the command that builds the wheels into ``dist``, with the run's own options (a refusal's remedy).
    """
    pin = wheel_pin.pin
    check_python(torch, parse_torch_version(torch), running_python())
    wheel = find_wheel(dist, package, wheel_pin.local_version, rebuild)
    wanted = fingerprint(patches)
    refuse_another_series(wheel, wanted, f", then build the wheels again ({rebuild})")
    wheels = [wheel, *_required_wheels(wheel, wheel_pin, dist, rebuild)]
    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree, _ = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)
    mapping = wheel_pin.mapping(package)
    lines = patched_lines(patches, mapping, tree.path, pin.sdist_lacks)
    result = WheelResult(package, torch, wheel)
    venv = _fresh_environment(ws, package, torch, wheels, log, installer)
    info = _installed_info(venv, _dist_name(wheel), package)
    result.version = str(info["version"])
    origin = str(info["origin"] or "")
    site_packages = Path(str(info["purelib"]))
    problems = []
    if result.version != wheel_pin.local_version:
        problems.append(f"installed version {result.version}, not {wheel_pin.local_version}")
    if not origin.startswith(str(site_packages)):
        problems.append(f"{package} is imported from {origin or 'nowhere'}, not from {site_packages}")
    record = json.loads(str(info["record"] or "{}"))
    if record.get("series", {}).get("fingerprint") != wanted:
        problems.append(f"the installed {RECORD_NAME} does not name the series {wanted[:12]}")
    files_ok, result.files = check_installed(lines, site_packages)
    result.files_ok = files_ok and not problems
    result.files[:0] = problems
    log(f"installed {package} {result.version} in {venv.name}; installed-files check: "
        f"{'ok' if result.files_ok else 'FAILED'}")  # fmt: skip
    suites = _suites(wheel_pin, package)
    ws.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheel-tests-") as scratch:
        root = Path(scratch)
        modules = _write_suite(ws.acceptance, root, suites, mapping)
        # Lightning's own pytest configuration, as the main job runs under it in the tree (not this project's)
        shutil.copyfile(tree.path / "pyproject.toml", root / "pyproject.toml")
        log(f"running the acceptance suite ({len(modules)} modules of {', '.join(suites)}) against the installed "
            f"{package}")  # fmt: skip
        reports = ws.reports / f"wheel-{package}-torch-{torch}"
        result.outcome = run_tests(Environment(venv, torch), root, modules, [], reports, pytest_args)
    return result


def summary(result: WheelResult, local_version: str) -> str:
    outcome = result.outcome
    tests = "n/a" if outcome is None else outcome.line()
    verdict = "NO TESTS RAN" if result.exit_status == 5 else ("OK" if result.ok else "FAILED")
    lines = [
        "wheel test",
        f"  package:   {result.package} {result.version or local_version} (installed from {result.wheel})",
        f"  torch:     {result.torch}",
        *(f"  files:     {line}" for line in result.files),
        f"  tests:     {tests} (acceptance suite against the installed package)",
        f"  result:    {verdict}",
    ]
    return "\n".join(lines)


def _shown(line: str) -> str:
    """A looked-up line as the report shows it: a block as its lines, stripped, joined by `` / ``."""
    return repr(" / ".join(part.strip() for part in line.splitlines()))


def _show(tree: Path, ref: str, path: str) -> list[str]:
    proc = git("show", f"{ref}:{path}", cwd=tree, check=False)
    return proc.stdout.splitlines(keepends=True) if proc.returncode == 0 else []


def _stripped(lines: list[str]) -> set[str]:
    return {line.strip() for line in lines}


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


def _dist_name(wheel: Path) -> str:
    return wheel.name.split("-", 1)[0]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _required_wheels(wheel: Path, wheel_pin: WheelPin, dist: Path, rebuild: str) -> list[Path]:
    """The wheels of ``dist`` that ``wheel`` requires (our ``pytorch_lightning`` for ``lightning``), not PyPI's."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next((archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA")), "")
    required = {_normalized(name) for name in _REQUIRES.findall(metadata)}
    itself = _normalized(_dist_name(wheel))
    ours = [p for p in wheel_pin.packages if _normalized(p) in required and _normalized(p) != itself]
    return [find_wheel(dist, package, wheel_pin.local_version, rebuild) for package in ours]


def _fresh_environment(ws: Workspace, package: str, torch: str, wheels: list[Path], log: Log, installer: str) -> Path:
    py = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    venv = ws.venvs / f"wheel-{package}-{py}-torch{torch}"
    uv = choose_uv(installer)  # made fresh every time (no recipe): what a user's new environment is
    requirements = [f"torch=={torch}", *companion_requirements(torch), *TEST_REQUIREMENTS, *map(str, wheels)]
    log(f"creating {venv.name}: torch {torch} and {', '.join(w.name for w in wheels)} installed with "
        f"{'uv pip' if uv else 'pip'}")  # fmt: skip
    build_venv(venv, sys.executable, uv, [*index_args(uv is not None, torch_index()), *requirements],
               f"cannot install {wheels[0].name} with torch {torch}", log)  # fmt: skip
    return venv


def _installed_info(venv: Path, dist_name: str, package: str) -> dict[str, object]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _INFO_SCRIPT, dist_name, package, RECORD_NAME],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SeriesError(f"cannot read what is installed in {venv}: {reason}")
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    return data


def _suites(wheel_pin: WheelPin, package: str) -> list[str]:
    standalone = wheel_pin.standalone(package)
    subpackages = standalone.ships if standalone else tuple(s.subpackage for s in wheel_pin.standalones)
    return [f"tests_{sub}" for sub in subpackages]


def _write_suite(source: Path, root: Path, suites: list[str], mapping: PackageMapping) -> list[str]:
    """The acceptance suite's files of ``suites`` under ``root/tests``, imports mapped, with RunIf and package markers;
    its test modules (``tests/...`` paths)."""
    modules = []
    written: list[Path] = []
    for relative in source_files(source):
        suite = relative.split("/", 1)[0]
        if suite not in suites:
            continue
        data = (source / relative).read_text(errors="surrogateescape")
        target = root / "tests" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_mapped(data, mapping), errors="surrogateescape")
        written.append(target)
        if is_test_module(relative):
            modules.append(f"tests/{relative}")
    for suite in suites:
        runif = root / "tests" / suite / "helpers" / "runif.py"
        if not runif.exists():
            sub = suite.removeprefix("tests_")
            runif.parent.mkdir(parents=True, exist_ok=True)
            runif.write_text(_mapped(RUNIF.format(suite=suite, package=f"{mapping.base}.{sub}"), mapping))
            written.append(runif)
    for path in written:  # package markers from tests/<suite> down, as upstream has them
        folder = path.parent
        while folder != root / "tests":
            (folder / "__init__.py").touch()
            folder = folder.parent
    if not modules:
        raise SeriesError(f"the acceptance suite ({source}) has no test modules in {', '.join(suites)}")
    return sorted(modules)


def _mapped(text: str, mapping: PackageMapping) -> str:
    return "".join(replace_imports(text.splitlines(keepends=True), mapping.imports)) if mapping.imports else text
