"""``patchseries test-wheels``: the wheels in ``dist/`` installed as users get them (never editable) into a fresh
environment with a torch release, then checked against the installed package: its version and record, one line each
patch adds (:func:`patched_lines`), and the acceptance suite run from a folder of its own, imports mapped."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from patchseries import release
from patchseries import runner as env
from patchseries.errors import SeriesError
from patchseries.gitcmd import git
from patchseries.job import RUNIF, is_test_module, source_files
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.release import RECORD_NAME, SERIES_REF, PackageMapping, WheelPin, replace_imports, wheel_prefix
from patchseries.runner import run_tests
from patchseries.series import Patch, file_sections, hunks, section_path
from patchseries.trees import BASE_REF, resolve_source, tool_tree

MIN_LINE = 12  # characters of a looked-up line: shorter ones (``return x``) are in many files
_INFO_SCRIPT = """\
import importlib.metadata as metadata, importlib.util, json, sys, sysconfig
dist, spec = metadata.distribution(sys.argv[1]), importlib.util.find_spec(sys.argv[2])  # not imported (nor torch)
print(json.dumps({"version": dist.version, "record": dist.read_text(sys.argv[3]), "origin": spec and spec.origin,
                  "purelib": sysconfig.get_paths()["purelib"]}))
"""


@dataclass(frozen=True)
class PatchLine:
    patch: str
    path: str  # in the installed package: pytorch_lightning/core/module.py
    line: str | None  # a line, or a block of lines; None: nothing to look up, for the reason ``note``
    note: str = ""


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
    runs = {}  # each patch's runs of consecutive added lines, mapped, with the file they go to
    for patch in patches:
        sections = file_sections(patch.path.read_bytes().decode(errors="surrogateescape"))
        paths = [(path, s) for s in sections if (path := section_path(s)).endswith(".py") and mapping.path(path)]
        runs[patch.name] = [(p, mapping.lines(p, run)) for p, s in paths if not p.startswith(lacks) for run in _runs(s)]
    added_by: dict[str, set[str]] = {}
    for name, patch_runs in runs.items():
        for _, run in patch_runs:
            for line in run:
                added_by.setdefault(line.strip(), set()).add(name)
    files = {}  # each file's text after the series and in the release, and its stripped lines
    for path in {path for patch_runs in runs.values() for path, _ in patch_runs}:
        texts = [_show(tree, ref, path, mapping) for ref in (SERIES_REF, BASE_REF)]
        files[path] = (*texts, *map(_stripped, texts))
    found = []
    for patch in patches:
        candidates = []  # (preference, installed path, line or block)
        for path, run in runs[patch.name]:
            (after, before, after_lines, before_lines), target = files[path], str(mapping.path(path))[len("src/") :]
            for line in (m.strip() for m in run):
                if len(line) >= MIN_LINE and line in after_lines and line not in before_lines:
                    candidates.append((0 if added_by[line] == {patch.name} else 1, target, line))
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
    report, failed = [], 0
    for item in lines:
        installed = site_packages / item.path
        text = installed.read_text(errors="replace") if item.line and installed.is_file() else None
        if item.line is None:
            report.append(f"{item.patch[:4]}: not checked ({item.note})")
            continue
        failed += 1
        if text is None:
            report.append(f"{item.patch[:4]}: MISSING {item.path} is not installed")
        elif (item.line not in text) if "\n" in item.line else (item.line not in _stripped(text)):
            report.append(f"{item.patch[:4]}: NOT PATCHED {item.path} lacks {_shown(item.line)}")
        else:
            failed -= 1
            report.append(f"{item.patch[:4]}: found in {item.path}: {_shown(item.line)}")
    if all(item.line is None for item in lines):
        return False, [*report, "no patch has a source line in this package: nothing was checked"]
    return failed == 0, report


def run_wheel_test(
    ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], package: str, torch: str, dist: Path, log: Log,
    rebuild: str, installer: str = "auto", pytest_args: tuple[str, ...] = (),
) -> tuple[int, str]:  # fmt: skip
    """Install ``package``'s wheel from ``dist`` with ``torch`` into a fresh environment and test it (module doc): the
    exit status and the summary. ``rebuild``: the command that builds the wheels into ``dist`` (a refusal's remedy)."""
    pin, version = wheel_pin.pin, wheel_pin.local_version
    wheel = find_wheel(dist, package, version, rebuild)
    release.refuse_another_series(wheel, wheel_pin.series, f", then build the wheels again ({rebuild})")
    with zipfile.ZipFile(wheel) as archive:  # the wheels of dist/ it requires (pytorch_lightning), not PyPI's
        metadata = next((archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA")), "")
    required = {canonicalize_name(name) for name in re.findall(r"^Requires-Dist: ([\w.-]+)", metadata, re.MULTILINE)}
    ours = [p for p in wheel_pin.packages if p != package and canonicalize_name(p) in required]
    wheels = [wheel, *(find_wheel(dist, p, version, rebuild) for p in ours)]
    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)[0].path
    mapping = wheel_pin.mapping(package)
    lines = patched_lines(patches, mapping, tree, pin.sdist_lacks)
    venv = ws.venvs / f"wheel-{package}-py{sys.version_info[0]}.{sys.version_info[1]}-torch{torch}"
    uv = env.choose_uv(installer)  # made fresh every time (no recipe): what a user's new environment is
    log(f"creating {venv.name}: torch {torch} and {', '.join(w.name for w in wheels)} installed with "
        f"{'uv pip' if uv else 'pip'}")  # fmt: skip
    requirements = [f"torch=={torch}", *env.companion_requirements(torch), *env.TEST_REQUIREMENTS, *map(str, wheels)]
    env.build_venv(venv, sys.executable, uv, [*env.index_args(uv is not None, env.torch_index()), *requirements],
                   f"cannot install {wheel.name} with torch {torch}", log)  # fmt: skip
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", _INFO_SCRIPT, wheel.name.split("-", 1)[0], package,
                           RECORD_NAME], capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SeriesError(f"cannot read what is installed in {venv}: "
                          f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")  # fmt: skip
    info = json.loads(proc.stdout)
    site_packages, origin = Path(info["purelib"]), str(info["origin"] or "nowhere")
    problems = [
        info["version"] != version and f"installed version {info['version']}, not {version}",
        not origin.startswith(str(site_packages)) and f"{package} is imported from {origin}, not from {site_packages}",
        json.loads(info["record"] or "{}").get("series", {}).get("fingerprint") != wheel_pin.series
        and f"the installed {RECORD_NAME} does not name the series {wheel_pin.series[:12]}",
    ]
    files_ok, files = check_installed(lines, site_packages)
    files_ok = files_ok and not any(problems)
    log(f"installed {package} {info['version']} in {venv.name}; installed-files check: "
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
        f"  package:   {package} {info['version']} (installed from {wheel})",
        f"  torch:     {torch}",
        *(f"  files:     {line}" for line in [*(p for p in problems if p), *files]),
        f"  tests:     {outcome.line()} (acceptance suite against the installed package)",
        f"  result:    {({5: 'NO TESTS RAN', 0: 'OK'}).get(status, 'FAILED')}",
    ])  # fmt: skip


def _shown(line: str) -> str:
    return repr(" / ".join(part.strip() for part in line.splitlines()))


def _show(tree: Path, ref: str, path: str, mapping: PackageMapping) -> str:
    proc = git("show", f"{ref}:{path}", cwd=tree, check=False)
    return mapping.text(path, proc.stdout) if proc.returncode == 0 else ""


def _stripped(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def _runs(section: str) -> list[list[str]]:
    """The runs of consecutive added lines of a diff section, each line with its newline."""
    runs: list[list[str]] = [[]]
    for hunk in hunks(section):
        for marker, _, text in [*hunk, (" ", 0, "")]:
            if marker == "+":
                runs[-1].append(text + "\n")
            elif runs[-1]:
                runs.append([])
    return [run for run in runs if run]


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
