"""Run the series' tests with pytest and pytest-cov inside an environment, and read back the results."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from patchseries.environment import Environment
from patchseries.errors import SeriesError
from patchseries.paths import remove

PYTEST_NO_TESTS = 5
PYTEST_USAGE_ERROR = 4  # pytest refused its command line: nothing was tested, so it is bad input, not a failure
# A plugin loaded into the run counts the test bodies that ran: pytest's JUnit report counts a test that
# ``--setup-plan`` or ``--setup-only`` only set up as passed, and ``--collect-only`` ends with exit status 0.
_BODIES_PLUGIN = "_patchseries_bodies"
_BODIES_ENV = "PATCHSERIES_BODIES_FILE"
_BODIES_SOURCE = f'''\
"""Written by patchseries: counts the test bodies that ran (a call phase not skipped; an xfail ran too)."""

import os

_ran = 0


def pytest_runtest_logreport(report):
    global _ran
    if report.when == "call" and (not report.skipped or hasattr(report, "wasxfail")):
        _ran += 1


def pytest_sessionfinish(session):
    with open(os.environ["{_BODIES_ENV}"], "w") as handle:
        handle.write(str(_ran))
'''


@dataclass(frozen=True)
class TestOutcome:
    passed: int
    failed: int
    skipped: int
    returncode: int
    coverage: float | None
    junit: Path
    coverage_xml: Path | None
    ran: int | None = None  # test bodies that ran; None: not counted (then the passed tests are taken)

    @property
    def ok(self) -> bool:
        """Tests ran, and passed: a run that ran no test body is not a success, whatever pytest's exit status."""
        return self.returncode == 0 and self.failed == 0 and not self.no_tests

    @property
    def no_tests(self) -> bool:
        """No test body ran and none failed: nothing was tested (and nothing failed).

        pytest collected none (``-k`` matched none), only listed or set them up (``--collect-only``,
        ``--setup-plan``), or skipped them all.
        """
        if self.returncode not in (0, PYTEST_NO_TESTS) or self.failed:
            return False
        return (self.ran if self.ran is not None else self.passed) == 0

    def line(self) -> str:
        if self.no_tests:
            return self._none_ran()
        counts = f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"
        if self.returncode not in (0, 1) and not self.failed:
            counts += f" (pytest exit status {self.returncode}; see its output above)"
        return counts

    def _none_ran(self) -> str:
        total = self.passed + self.skipped
        if total == 0 and self.returncode == PYTEST_NO_TESTS:
            return "none ran: pytest collected no test (check the -k/-m or other pytest arguments)"
        if total == 0:
            return "none ran: pytest only collected the tests (--collect-only or a similar pytest argument)"
        if self.skipped == total:
            return f"none ran: {self.skipped} skipped"
        tests = "1 test" if total == 1 else f"{total} tests"
        return (
            f"none ran: pytest set up {tests} but ran none of their bodies (--setup-plan, --setup-only or a similar "
            "pytest argument)"
        )


def run_tests(
    env: Environment,
    tree: Path,
    test_files: list[str],
    changed_sources: list[str],
    reports: Path,
    pytest_args: tuple[str, ...] = (),
    source_override: Path | None = None,
) -> TestOutcome:
    """Run ``test_files`` (paths relative to ``tree``) the way upstream does: from ``tests/`` with ``python -m``.

    Coverage is measured on ``changed_sources`` only (the Lightning modules the series changes), reported in the
    terminal and as XML. ``source_override`` puts another ``src/`` first on the path (the unpatched base, for the
    matrix's "before the series" run) instead of the editable install.
    """
    if not test_files:
        raise SeriesError("the series adds no test files under tests/, so there is nothing to run")
    reports.mkdir(parents=True, exist_ok=True)
    junit = reports / "junit.xml"
    coverage_xml = reports / "coverage.xml"
    bodies = reports / "bodies-ran"
    for stale in (junit, coverage_xml, bodies):
        remove(stale)
    plugin_dir = _bodies_plugin(reports)
    command = [str(env.python), "-m", "pytest", *(_relative_to_tests(f) for f in test_files)]
    command += ["-p", "no:cacheprovider", "-p", _BODIES_PLUGIN, f"--junitxml={junit}", "-o", "junit_family=xunit2"]
    # colour only on a terminal, as pytest's default does: Lightning's own configuration says --color=yes, which
    # writes escape codes into a log file or a pipe; a --color in pytest_args still wins (it comes later)
    command += ["--color=auto"]
    if changed_sources:
        rc = _coverage_config(reports, tree, changed_sources)
        command += ["--cov=lightning", f"--cov-config={rc}", "--cov-report=term", f"--cov-report=xml:{coverage_xml}"]
    env_vars = {**os.environ, "PYTHONUNBUFFERED": "1", "COVERAGE_FILE": str(reports / ".coverage")}
    env_vars[_BODIES_ENV] = str(bodies)
    env_vars.pop("PYTHONPATH", None)
    python_path = [*([str(source_override)] if source_override is not None else []), str(plugin_dir)]
    env_vars["PYTHONPATH"] = os.pathsep.join(python_path)
    proc = subprocess.run([*command, *pytest_args], cwd=tree / "tests", env=env_vars, check=False)
    if proc.returncode == PYTEST_USAGE_ERROR:
        given = f" ({' '.join(pytest_args)})" if pytest_args else ""
        raise SeriesError(
            f"pytest refused its arguments{given}: a usage error, pytest exit status {PYTEST_USAGE_ERROR} (its "
            "message is above); nothing was tested. Correct the pytest arguments after --"
        )
    passed, failed, skipped = _junit_counts(junit)
    return TestOutcome(
        passed=passed,
        failed=failed,
        skipped=skipped,
        returncode=proc.returncode,
        coverage=_line_rate(coverage_xml) if changed_sources else None,
        junit=junit,
        coverage_xml=coverage_xml if coverage_xml.exists() else None,
        ran=_bodies_ran(bodies),
    )


def _bodies_plugin(reports: Path) -> Path:
    """A folder holding only the body-counting plugin, put on the run's ``PYTHONPATH``."""
    folder = reports / "plugin"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{_BODIES_PLUGIN}.py").write_text(_BODIES_SOURCE)
    return folder


def _bodies_ran(bodies: Path) -> int:
    """The count the plugin wrote; none if pytest ended before its session did (``--help``, ``--version``)."""
    try:
        return int(bodies.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def changed_source_files(paths: list[str]) -> list[str]:
    """The Python modules under ``src/`` among ``paths``: what the coverage report is about."""
    return sorted({p for p in paths if p.startswith("src/") and p.endswith(".py")})


def _relative_to_tests(path: str) -> str:
    return path[len("tests/") :] if path.startswith("tests/") else f"../{path}"


def _coverage_config(reports: Path, tree: Path, sources: list[str]) -> Path:
    include = "\n".join(f"    */{source}" for source in sources)
    rc = reports / "coveragerc"
    # Measured over the whole package (``--cov=lightning``), reported for the changed modules only. Python subprocesses
    # are measured too (coverage.py 7.10+): tests of code that must run in a fresh interpreter (a module compiled before
    # ``import lightning``) run it in one.
    rc.write_text(f"[run]\npatch = subprocess\n\n[report]\ninclude =\n{include}\nskip_empty = true\n")
    return rc


@dataclass(frozen=True)
class CaseResult:
    """One ``<testcase>`` of a JUnit report."""

    classname: str
    name: str
    outcome: str  # "passed", "failed", "xfailed" or "skipped"


def junit_cases(junit: Path) -> list[CaseResult]:
    """Every test case of a pytest JUnit report (none if the report is missing)."""
    if not junit.exists():
        return []
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "xfailed" if "xfail" in (child.get("type", "") + child.get("message", "")) else "skipped"
        cases.append(CaseResult(case.get("classname") or "", case.get("name") or "", outcome))
    return cases


def _junit_counts(junit: Path) -> tuple[int, int, int]:
    outcomes = [case.outcome for case in junit_cases(junit)]
    failed = outcomes.count("failed")
    skipped = outcomes.count("skipped") + outcomes.count("xfailed")
    return len(outcomes) - failed - skipped, failed, skipped


def _line_rate(coverage_xml: Path) -> float | None:
    if not coverage_xml.exists():
        return None
    return round(float(ET.parse(coverage_xml).getroot().get("line-rate", 0)) * 100, 1)
