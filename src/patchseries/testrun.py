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


@dataclass(frozen=True)
class TestOutcome:
    passed: int
    failed: int
    skipped: int
    returncode: int
    coverage: float | None
    junit: Path
    coverage_xml: Path | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.failed == 0

    @property
    def no_tests(self) -> bool:
        """pytest collected no test (e.g. ``-k`` matched none): nothing was tested, and nothing failed."""
        return self.returncode == PYTEST_NO_TESTS and self.passed + self.failed + self.skipped == 0

    def line(self) -> str:
        if self.no_tests:
            return "none ran: pytest collected no test (check the -k/-m or other pytest arguments)"
        counts = f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"
        if self.returncode not in (0, 1) and not self.failed:
            counts += f" (pytest exit status {self.returncode}; see its output above)"
        return counts


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
    for stale in (junit, coverage_xml):
        remove(stale)
    command = [str(env.python), "-m", "pytest", *(_relative_to_tests(f) for f in test_files)]
    command += ["-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit2"]
    if changed_sources:
        rc = _coverage_config(reports, tree, changed_sources)
        command += ["--cov=lightning", f"--cov-config={rc}", "--cov-report=term", f"--cov-report=xml:{coverage_xml}"]
    env_vars = {**os.environ, "PYTHONUNBUFFERED": "1", "COVERAGE_FILE": str(reports / ".coverage")}
    env_vars.pop("PYTHONPATH", None)
    if source_override is not None:
        env_vars["PYTHONPATH"] = str(source_override)
    proc = subprocess.run([*command, *pytest_args], cwd=tree / "tests", env=env_vars, check=False)
    passed, failed, skipped = _junit_counts(junit)
    return TestOutcome(
        passed=passed,
        failed=failed,
        skipped=skipped,
        returncode=proc.returncode,
        coverage=_line_rate(coverage_xml) if changed_sources else None,
        junit=junit,
        coverage_xml=coverage_xml if coverage_xml.exists() else None,
    )


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
