"""Running the series' tests: the torch table, the one builder of virtual environments, pytest and its reports."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

from patchseries.errors import SeriesError
from patchseries.paths import Workspace, remove
from patchseries.progress import Log

DEFAULT_TORCH = "2.13.0"
PYTHON_FLOOR = (3, 10)  # lightning-2.6.6.tar.gz, PKG-INFO: "Requires-Python: >=3.10"
# torch (major, minor) -> (oldest, newest Python with a wheel), newest patch release (the releases `matrix` runs); read
# from PyPI on 2026-12-01 with PIP_CONFIG_FILE=/dev/null `pip index versions torch --isolated --only-binary=:all:
# --python-version 3.Y --platform manylinux_2_28_x86_64` (Y = 9 ... 14). A new torch release is added here.
TORCH = {(2, minor): ((3, oldest), (3, newest), patch) for minor, oldest, newest, patch in [
    (1, 9, 11, 2), (2, 9, 12, 2), (3, 9, 12, 1), (4, 9, 12, 1), (5, 9, 13, 1), (6, 9, 13, 0), (7, 9, 13, 1),
    (8, 9, 13, 0), (9, 10, 14, 1), (10, 10, 14, 0), (11, 10, 14, 0), (12, 10, 14, 1), (13, 10, 14, 0), (14, 10, 14, 1),
    (15, 11, 14, 0)]}  # fmt: skip

# setuptools: torch 2.1's inductor imports it, uv's venvs lack it; coverage 7.10+ measures subprocesses the tests start
TEST_REQUIREMENTS = ("pytest", "pytest-cov", "coverage>=7.10", "setuptools")
READY = ".patchseries-ready"  # in a venv: its recipe, written once every install is done
HEARTBEAT_S = 15.0

PYTEST_NO_TESTS = 5
# pytest's JUnit report counts a test that `--setup-plan` only set up as passed, and `--collect-only` exits 0: this
# plugin, loaded into the run, counts the test bodies that ran
_BODIES_SOURCE = """\
ran = 0
def pytest_runtest_logreport(report):  # a call phase not skipped: a body ran (an xfail's too)
    global ran
    ran += report.when == "call" and (not report.skipped or hasattr(report, "wasxfail"))
def pytest_sessionfinish(session):
    open({bodies!r}, "w").write(str(ran))
"""


def torch_release(version: str, python: tuple[int, int] | None = None) -> str:
    """``version`` as the table's full release number (``2.13`` is ``2.13.0``), refused unless known for ``python``."""
    if not (match := re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", version)):
        raise SeriesError(f"unknown torch version {version!r}: expected a release number such as {DEFAULT_TORCH}")
    major, minor, patch = (int(part or 0) for part in match.groups())
    release = f"{major}.{minor}.{patch}"
    if (major, minor) < (2, 1):
        raise SeriesError(f"torch {release} is older than 2.1, the oldest release Lightning 2.6.6 supports")
    if (major, minor) > max(TORCH):
        raise SeriesError(f"torch {release} is newer than every release this tool knows (up to {_show(max(TORCH))}, "
                          "src/patchseries/runner.py); pick another --torch")  # fmt: skip
    oldest, newest, last = TORCH[major, minor]
    if patch > last:
        releases = f"{major}.{minor}.0 to {major}.{minor}.{last}" if last else f"{major}.{minor}.0 alone"
        raise SeriesError(f"torch {release} is not a release this tool knows: torch {major}.{minor} has {releases} "
                          "(src/patchseries/runner.py); pick one of those, or another --torch")  # fmt: skip
    lowest = max(oldest, PYTHON_FLOOR)
    if python is not None and not lowest <= python <= newest:
        raise SeriesError(f"torch {release} and Lightning 2.6.6 need Python {_show(lowest)} to {_show(newest)}, not "
                          f"{_show(python)}; run patchseries with one of those, or pick another --torch")  # fmt: skip
    return release


def _show(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def torch_index() -> str:  # an extra index for torch (CI: the CPU-only wheels) ('' if unset), refused unless a URL
    if (index := os.environ.get("PATCHSERIES_TORCH_INDEX", "").strip()) and not re.match(r"(https?|file)://.", index):
        raise SeriesError(f"PATCHSERIES_TORCH_INDEX={index!r} is not a package index URL (such as https://download."
                          "pytorch.org/whl/cpu); correct it, or unset it to use PyPI alone")  # fmt: skip
    return index


def index_args(uv: bool, index: str) -> list[str]:
    # beside PyPI, the best version winning (torch's CPU builds are 2.13.0+cpu); uv takes the first index unless told
    return ["--extra-index-url", index, *(["--index-strategy", "unsafe-best-match"] if uv else [])] if index else []


def companion_requirements(torch: str) -> list[str]:  # torch < 2.3 (a full release number): NumPy 1.x, pkg_resources
    return ["numpy<2", "setuptools<70"] if tuple(map(int, torch.split("."))) < (2, 3, 0) else []


def find_uv(installer: str = "auto") -> str | None:
    """``--installer``'s uv (auto, uv, pip): the one installed with this package, else one on PATH; None: pip."""
    try:
        uv = str(__import__("uv").find_uv_bin()) if installer != "pip" else None
    except (ImportError, FileNotFoundError):
        uv = shutil.which("uv")
    if uv or installer != "uv":
        return uv
    raise SeriesError("--installer uv was requested but uv is not installed; pip install uv, or use --installer pip")


class Environment(NamedTuple):
    path: Path
    torch: str

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def ensure_environment(ws: Workspace, tree: Path, torch_version: str, log: Log, extra: tuple[str, ...] = (),
                       installer: str = "auto") -> Environment:  # fmt: skip
    """A venv of this Python with ``torch_version`` and ``tree`` installed editable, reused while its recipe holds."""
    torch_version, py_tag = torch_release(torch_version, sys.version_info[:2]), f"py{_show(sys.version_info[:2])}"
    venv = ws.venvs / f"{py_tag}-torch{torch_version}-{tree.name}"
    requirements = [f"torch=={torch_version}", *companion_requirements(torch_version), *TEST_REQUIREMENTS, *extra]
    index = torch_index()
    recipe = "\n".join([str(tree), *requirements, *([f"index: {index}"] if index else [])]) + "\n"
    if is_ready(venv, recipe):
        log(f"reusing environment {venv.name}")
    else:
        uv = find_uv(installer)
        log(f"creating environment {venv.name} with {'uv' if uv else 'venv + pip'} (torch {torch_version}; "
            "minutes when torch is not cached yet)")  # fmt: skip
        args = [*index_args(uv is not None, index), *requirements, "-e", str(tree)]
        build_venv(venv, sys.executable, uv, args, f"cannot install torch {torch_version} for {py_tag}", log, recipe)
    return Environment(venv, torch_version)


def is_ready(venv: Path, recipe: str) -> bool:  # built by build_venv from recipe, every install done
    return (venv / READY).is_file() and (venv / READY).read_text() == recipe


def build_venv(venv: Path, python: str, uv: str | None, args: list[str], cannot: str, log: Log,
               recipe: str | None = None) -> None:  # fmt: skip
    """The one builder of virtual environments: ``python`` with ``args`` installed and ``recipe`` as its marker."""
    remove(venv)
    for old in venv.parent.glob(glob.escape(venv.name) + "." + "[0-9a-f]" * 8):
        shutil.rmtree(old, ignore_errors=True)
    build = venv.with_name(f"{venv.name}.{os.urandom(4).hex()}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    inside = str(build / "bin" / "python")
    create = [uv, "venv", "--quiet", "--python", python, str(build)] if uv else [python, "-m", "venv", str(build)]
    pip = [inside, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    try:
        run_installer(create, f"cannot create a virtual environment with {python}", log)
        run_installer([*([uv, "pip", "install", "--quiet", "--python", inside] if uv else pip), *args], cannot, log)
        if recipe is not None:
            (build / READY).write_text(recipe)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    venv.symlink_to(build.name, target_is_directory=True)  # last: a venv cannot be moved (its scripts name its path)


def run_installer(command: list[str], what: str, log: Log) -> None:
    start = time.monotonic()
    # on Linux the installer ends when this process dies (PR_SET_PDEATHSIG, SIGTERM): a killed run leaves none running
    orphan = (lambda: __import__("ctypes").CDLL(None).prctl(1, 15)) if sys.platform == "linux" else None
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=orphan)
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                output = proc.communicate(timeout=HEARTBEAT_S)[0]
                break
            log(f"still installing ({time.monotonic() - start:.0f} s): {Path(command[0]).name} {command[1]} ...")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:  # the cause: pip's first ERROR: line, else uv's last cause, with the address it fetched
        lines = [re.sub(r"^(cause|Caused by): ", "", line.strip(" ╰─▶×│")) for line in output.splitlines()]
        hints = ("hint:", "help:", "warning:", "WARNING:", "note:", "[notice]")  # never the cause
        lines = [line for line in lines if line and not line.startswith(hints)]
        errors = [line for line in lines if line.startswith("ERROR: ")]
        fetched = [f" ({line})" for line in lines[:-1] if "Failed to fetch:" in line]
        reason = errors[0] if errors else (lines[-1] + "".join(fetched[-1:])) if lines else ""
        raise SeriesError(f"{what}: {reason or f'exit status {proc.returncode}'}")


class TestOutcome(NamedTuple):
    passed: int
    failed: int
    skipped: int
    returncode: int
    coverage: float | None
    junit: Path
    coverage_xml: Path | None
    ran: int  # test bodies that ran (the JUnit report counts a test only set up as passed)

    @property
    def ok(self) -> bool:  # a run that ran no test body is not a success, whatever pytest's exit status
        return self.returncode == 0 and self.failed == 0 and not self.no_tests

    @property
    def no_tests(self) -> bool:  # none collected (``-k``), only collected or set up, or all skipped; none failed
        return self.returncode in (0, PYTEST_NO_TESTS) and not self.failed and self.ran == 0

    def line(self) -> str:
        if not self.no_tests:
            odd = self.returncode not in (0, 1) and not self.failed
            exit_status = f" (pytest exit status {self.returncode}; see its output above)" if odd else ""
            return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped{exit_status}"
        if self.passed == self.skipped == 0 and self.returncode == PYTEST_NO_TESTS:
            return "none ran: pytest collected no test (check the -k/-m or other pytest arguments)"
        if self.skipped and not self.passed:
            return f"none ran: {self.skipped} skipped"
        return "none ran: pytest ran no test body (--collect-only, --setup-plan or a similar pytest argument)"


def run_tests(env: Environment, tree: Path, test_files: list[str], changed_sources: list[str], reports: Path,
              pytest_args: tuple[str, ...] = (), source_override: Path | None = None) -> TestOutcome:  # fmt: skip
    """Run ``test_files`` from ``tests/``, covering ``changed_sources``; ``source_override``: a ``src/`` put first."""
    if not test_files:
        raise SeriesError("no test module to run: the series adds none under tests/, and acceptance/ has none")
    remove(reports)  # no report of an earlier run is taken for this one's
    (plugin := reports / "plugin").mkdir(parents=True)
    junit, coverage_xml, bodies = reports / "junit.xml", reports / "coverage.xml", reports / "bodies-ran"
    (plugin / "_patchseries_bodies.py").write_text(_BODIES_SOURCE.format(bodies=str(bodies)))
    tests = [f.removeprefix("tests/") if f.startswith("tests/") else f"../{f}" for f in test_files]
    # colour only on a terminal (Lightning's configuration says --color=yes); a --color in pytest_args still wins
    command = [str(env.python), "-m", "pytest", *tests, "-p", "no:cacheprovider", "-p", "_patchseries_bodies",
               f"--junitxml={junit}", "-o", "junit_family=xunit2", "--color=auto"]  # fmt: skip
    if changed_sources:
        # measured over the whole package, Python subprocesses too (coverage.py 7.10+), reported for the changed files
        include = "".join(f"\n    */{source}" for source in changed_sources)
        rc = reports / "coveragerc"
        rc.write_text(f"[run]\npatch = subprocess\n\n[report]\ninclude ={include}\nskip_empty = true\n")
        command += ["--cov=lightning", f"--cov-config={rc}", "--cov-report=term", f"--cov-report=xml:{coverage_xml}"]
    python_path = [*([str(source_override)] if source_override is not None else []), str(plugin)]
    env_vars = {**os.environ, "PYTHONUNBUFFERED": "1", "COVERAGE_FILE": str(reports / ".coverage"),
                "PYTHONPATH": os.pathsep.join(python_path)}  # fmt: skip
    proc = subprocess.run([*command, *pytest_args], cwd=tree / "tests", env=env_vars, check=False)
    if proc.returncode == 4:  # pytest refused its command line: bad input, nothing was tested
        given = f" ({' '.join(pytest_args)})" if pytest_args else ""
        raise SeriesError(f"pytest refused its arguments{given}: a usage error, pytest exit status 4 (its message is "
                          "above); nothing was tested. Correct the pytest arguments after --")  # fmt: skip
    outcomes = [case.outcome for case in junit_cases(junit)]
    failed, skipped = outcomes.count("failed"), outcomes.count("skipped") + outcomes.count("xfailed")
    xml = coverage_xml if coverage_xml.exists() else None
    coverage = round(float(ET.parse(xml).getroot().get("line-rate", 0)) * 100, 1) if xml else None
    ran = int(bodies.read_text() or 0) if bodies.exists() else 0  # none: pytest ended early (--help, --version)
    return TestOutcome(len(outcomes) - failed - skipped, failed, skipped, proc.returncode, coverage, junit, xml, ran)


class CaseResult(NamedTuple):  # one ``<testcase>`` of a JUnit report
    classname: str
    name: str
    outcome: str  # "passed", "failed", "xfailed" or "skipped"


def junit_cases(junit: Path) -> list[CaseResult]:
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase") if junit.exists() else []:
        tags = {child.tag: child.get("type", "") + child.get("message", "") for child in case}
        skipped = "xfailed" if "xfail" in tags.get("skipped", "") else "skipped" if "skipped" in tags else "passed"
        outcome = "failed" if {"failure", "error"} & tags.keys() else skipped
        cases.append(CaseResult(case.get("classname") or "", case.get("name") or "", outcome))
    return cases
