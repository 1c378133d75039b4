"""The main job's summary: the changed-lines coverage line and where its report is."""

from __future__ import annotations

from pathlib import Path

from patchseries.changed_lines import ChangedLines, FileLines
from patchseries.pipeline import BaseChoice, JobResult, prepare, summary
from patchseries.progress import quiet
from patchseries.testrun import TestOutcome as Outcome


def _outcome(tmp_path: Path, coverage: float | None) -> Outcome:
    xml = tmp_path / "coverage.xml" if coverage is not None else None
    return Outcome(3, 0, 1, 0, coverage, tmp_path / "junit.xml", xml)


def test_summary_reports_changed_lines_then_changed_modules(synthetic, tmp_path):
    prepared = prepare(synthetic.ws, BaseChoice(), quiet)
    changed = ChangedLines({"src/fakelib/core.py": FileLines({2, 5}, {6: "    return 0"})})
    report = tmp_path / "changed-lines.txt"

    text = summary(JobResult(prepared, "2.13.0", _outcome(tmp_path, 44.8), [], changed, report))

    assert f"  coverage:  changed lines: 2/3 covered (66.7%) (uncovered listed in {report})\n" in text
    assert f"             changed modules: 44.8% (xml: {tmp_path / 'coverage.xml'})\n" in text
    assert text.endswith("  result:    OK")


def test_summary_without_a_coverage_report(synthetic, tmp_path):
    prepared = prepare(synthetic.ws, BaseChoice(), quiet)

    text = summary(JobResult(prepared, "2.13.0", _outcome(tmp_path, None)))

    assert "  coverage:  n/a (no coverage report)\n" in text
