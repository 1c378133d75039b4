"""``patchseries test-wheels``: the wheels installed as users get them, with a torch release, checked and tested."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

from patchseries import release, trees
from patchseries import runner as env
from patchseries.errors import SeriesError
from patchseries.job import RUNIF, is_test_module, source_files
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.series import Patch

_INFO_SCRIPT = """\
import importlib.metadata as metadata, importlib.util, json, sys, sysconfig
spec = importlib.util.find_spec(sys.argv[2])  # not imported (nor torch)
print(json.dumps([metadata.version(sys.argv[1]), spec and spec.origin, sysconfig.get_paths()["purelib"]]))
"""


def find_wheel(dist: Path, package: str, local_version: str, rebuild: str) -> Path:
    """The wheel of ``package`` in ``dist``; ``rebuild``: the command that builds it there (the run's own options)."""
    if not (found := sorted(dist.glob(f"{package}-{local_version}-*.whl")) if dist.is_dir() else []):
        raise SeriesError(f"there is no {package} {local_version} wheel in {dist}; build the wheels first ({rebuild})")
    return found[-1]


def check_installed(series: Path, changed: list[str], mapping: release.PackageMapping,
                    site_packages: Path) -> tuple[bool, list[str]]:  # fmt: skip
    """Whether each file the series changes in the package (at least one) is installed as its wheel has it; a report."""
    files = {target.removeprefix("src/"): mapping.read(series / path, path)
             for path, target in release.series_files(changed, mapping).items()}  # fmt: skip
    installed = {path: (site_packages / path).read_bytes() for path in files if (site_packages / path).is_file()}
    wrong = [path for path, data in files.items() if installed.get(path) != data]
    if not files:
        return False, ["the series changes no file of this package: nothing was checked"]
    return not wrong, [f"{len(files) - len(wrong)} of {len(files)} files the series changes are installed as it has "
                       "them", *(f"NOT THE SERIES': {path}" for path in wrong)]  # fmt: skip


def run_wheel_test(
    ws: Workspace, wheel_pin: release.WheelPin, patches: list[Patch], package: str, torch: str, dist: Path, log: Log,
    rebuild: str, installer: str = "auto", pytest_args: tuple[str, ...] = (),
) -> tuple[int, str]:  # fmt: skip
    """Install ``package``'s wheel with ``torch`` in a fresh environment and test it: exit status and summary."""
    pin, version = wheel_pin.pin, wheel_pin.local_version
    wheel = find_wheel(dist, package, version, rebuild)
    metadata = release.dist_info(wheel, "METADATA") or ""  # the wheels of dist/ it requires, not PyPI's
    required = {canonicalize_name(name) for name in re.findall(r"^Requires-Dist: ([\w.-]+)", metadata, re.MULTILINE)}
    ours = [p for p in wheel_pin.packages if p != package and canonicalize_name(p) in required]
    wheels = [wheel, *(find_wheel(dist, p, version, rebuild) for p in ours)]
    for each in wheels:  # the ones it requires too: a person's wheel at that name is not the series'
        release.kept(each, wheel_pin.series, then=f", build the wheels again ({rebuild}) and re-run")
    base, applied = trees.tool_tree(ws, pin, patches, trees.resolve_source(ws, pin, None, False, False), log)
    mapping = wheel_pin.mapping(package)
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
    installed, origin, purelib = json.loads(proc.stdout)
    site_packages, origin = Path(purelib), str(origin or "nowhere")
    problems = [f"installed version {installed}, not {version}"] if installed != version else []
    problems += [] if origin.startswith(purelib) else [f"{package} is imported from {origin}, not from {site_packages}"]
    standalone = wheel_pin.standalone(package)
    suites = [f"tests_{s}" for s in (standalone.ships if standalone else (s.subpackage for s in wheel_pin.standalones))]
    with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheel-tests-") as scratch:
        changed = release.series_snapshot(base.path, applied.head, series := Path(scratch) / "series")
        files_ok, files = check_installed(series, changed, mapping, site_packages)
        files_ok = files_ok and not problems
        log(f"installed {package} {installed} in {venv.name}; installed-files check: {'ok' if files_ok else 'FAILED'}")
        modules = _write_suite(ws.acceptance, suite := Path(scratch) / "suite", suites, mapping)
        shutil.copyfile(base.path / "pyproject.toml", suite / "pyproject.toml")  # pytest's config
        log(f"running {len(modules)} acceptance test modules of {', '.join(suites)} against the installed {package}")
        reports = ws.reports / f"wheel-{package}-torch-{torch}"
        outcome = env.run_tests(env.Environment(venv, torch), suite, modules, [], reports, pytest_args)
    status = (5 if outcome.no_tests else 0 if outcome.ok else 1) if files_ok else 1
    return status, "\n".join([
        "wheel test",
        f"  package:   {package} {installed} (installed from {wheel})",
        f"  torch:     {torch}",
        *(f"  files:     {line}" for line in [*problems, *files]),
        f"  tests:     {outcome.line()} (acceptance suite against the installed package)",
        f"  result:    {({5: 'NO TESTS RAN', 0: 'OK'}).get(status, 'FAILED')}",
    ])  # fmt: skip


def _write_suite(source: Path, root: Path, suites: list[str], mapping: release.PackageMapping) -> list[str]:
    files = [r for r in source_files(source) if r.split("/", 1)[0] in suites]
    written = [(root / "tests" / r, (source / r).read_text(errors="surrogateescape")) for r in files]
    for suite in (suite for suite in suites if f"{suite}/helpers/runif.py" not in files):
        package = f"{mapping.base}.{suite.removeprefix('tests_')}"
        written.append((root / "tests" / suite / "helpers" / "runif.py", RUNIF.format(suite=suite, package=package)))
    for path, text in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        mapped = "".join(release.replace_imports(text.splitlines(keepends=True), mapping.imports))
        path.write_text(mapped, errors="surrogateescape")
        for folder in path.parents[: len(path.relative_to(root / "tests").parts) - 1]:  # package markers, as upstream
            (folder / "__init__.py").touch()
    if not any(is_test_module(r) for r in files):
        raise SeriesError(f"the acceptance suite ({source}) has no test modules in {', '.join(suites)}")
    return sorted(f"tests/{r}" for r in files if is_test_module(r))
