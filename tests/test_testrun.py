"""Running the series' tests: pytest's own verdicts are reported as such, and the main job's summary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from patchseries import job, runner
from patchseries.changed_lines import ChangedLines, FileLines
from patchseries.cli import main
from patchseries.errors import SeriesError
from patchseries.job import BaseChoice, JobResult, prepare, summary
from patchseries.progress import quiet
from patchseries.runner import Environment, run_tests


def test_no_collected_test_is_not_a_failure(tmp_path):
    test_file = tmp_path / "tree" / "tests" / "tests_pytorch" / "test_x.py"
    test_file.parent.mkdir(parents=True)
    test_file.write_text("def test_x():\n    pass\n")
    env = Environment(Path(sys.prefix), "2.13.0")  # the interpreter running this suite has pytest

    tests = ["tests/tests_pytorch/test_x.py"]

    outcome = run_tests(env, tmp_path / "tree", tests, [], tmp_path / "reports", ("-k", "nomatch"))

    assert outcome.failed == 0
    assert outcome.no_tests
    assert not outcome.ok
    assert outcome.line() == "none ran: pytest collected no test (check the -k/-m or other pytest arguments)"


def test_no_test_module_to_run_is_refused_and_a_stale_report_is_not_taken(tmp_path):
    stale = tmp_path / "reports" / "junit.xml"
    stale.parent.mkdir()
    stale.write_text('<testsuites><testsuite><testcase classname="t" name="test_old"/></testsuite></testsuites>')
    env = Environment(Path(sys.prefix), "2.13.0")

    with pytest.raises(SeriesError, match="^no test module to run: the series adds none under tests/, and accept"):
        run_tests(env, tmp_path, [], [], tmp_path / "reports")
    outcome = run_tests(env, _tree(tmp_path), ["tests/tests_pytorch/test_x.py"], [], tmp_path / "reports", ("--co",))

    assert outcome.no_tests
    assert outcome.passed == 0


def test_main_job_that_ran_no_test_says_so_and_exits_5(synthetic, monkeypatch):
    outcome = runner.TestOutcome(0, 0, 0, runner.PYTEST_NO_TESTS, None, synthetic.ws.reports / "junit.xml", None, 0)
    monkeypatch.setattr(job, "ensure_environment", lambda *args, **kwargs: None)
    monkeypatch.setattr(job, "run_tests", lambda *args, **kwargs: outcome)

    result = job.run_main_job(synthetic.ws, BaseChoice(), "2.13.0", quiet, pytest_args=("-k", "x"))

    text = summary(result)
    assert "tests:     none ran: pytest collected no test" in text
    assert "failed" not in text
    assert text.endswith("result:    NO TESTS RAN")
    assert result.exit_status == 5


def _tree(tmp_path, body="def test_x():\n    pass\n", ini=""):
    test_file = tmp_path / "tree" / "tests" / "tests_pytorch" / "test_x.py"
    test_file.parent.mkdir(parents=True)
    test_file.write_text(body)
    if ini:
        (tmp_path / "tree" / "pyproject.toml").write_text(ini)
    return tmp_path / "tree"


def _run(tmp_path, tree, *pytest_args):
    env = Environment(Path(sys.prefix), "2.13.0")
    return run_tests(env, tree, ["tests/tests_pytorch/test_x.py"], [], tmp_path / "reports", pytest_args)


@pytest.mark.parametrize(
    "pytest_args",
    [
        ("--co", "-q"),
        ("--setup-plan",),
    ],
)
def test_collecting_or_setting_up_tests_without_running_them_is_not_a_success(tmp_path, pytest_args):
    outcome = _run(tmp_path, _tree(tmp_path), *pytest_args)

    assert not outcome.ok
    assert outcome.no_tests
    assert (
        outcome.line()
        == "none ran: pytest ran no test body (--collect-only, --setup-plan or a similar pytest argument)"
    )


def test_tests_that_were_all_skipped_are_not_a_success(tmp_path):
    outcome = _run(tmp_path, _tree(tmp_path, "import pytest\n\n\n@pytest.mark.skip\ndef test_x():\n    pass\n"))

    assert not outcome.ok
    assert outcome.no_tests
    assert outcome.line() == "none ran: 1 skipped"


def test_a_test_that_errors_in_its_setup_is_a_failure_not_none_ran(tmp_path):
    body = (
        "import pytest\n\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError\n\n\ndef test_x(broken):\n    pass\n"
    )

    outcome = _run(tmp_path, _tree(tmp_path, body))

    assert not outcome.no_tests
    assert not outcome.ok
    assert outcome.failed == 1


def test_tests_that_ran_and_passed_are_ok(tmp_path):
    outcome = _run(tmp_path, _tree(tmp_path), "-q")

    assert outcome.ok
    assert outcome.line() == "1 passed, 0 failed, 0 skipped"


def test_main_job_that_only_collected_tests_exits_5(synthetic, monkeypatch):
    outcome = runner.TestOutcome(0, 0, 0, 0, None, synthetic.ws.reports / "junit.xml", None, 0)
    monkeypatch.setattr(job, "ensure_environment", lambda *args, **kwargs: None)
    monkeypatch.setattr(job, "run_tests", lambda *args, **kwargs: outcome)

    result = job.run_main_job(synthetic.ws, BaseChoice(), "2.13.0", quiet, pytest_args=("--co",))

    assert summary(result).endswith("result:    NO TESTS RAN")
    assert result.exit_status == 5


def test_pytest_output_has_no_colour_codes_when_it_is_not_a_terminal(tmp_path, capfd, monkeypatch):
    # Lightning's own pyproject.toml asks for colour always (addopts = --color=yes): a log file gets none
    for name in ("PY_COLORS", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    tree = _tree(tmp_path, ini='[tool.pytest.ini_options]\naddopts = ["--color=yes"]\n')

    outcome = _run(tmp_path, tree)

    assert outcome.ok
    output = capfd.readouterr().out
    assert "1 passed" in output
    assert "\x1b[" not in output


def test_a_pytest_usage_error_is_bad_input_not_a_failed_test(synthetic, tmp_path, monkeypatch, capsys):
    """``test -- --bogus-pytest-flag`` is bad input (exit 2, one line), not "result: FAILED" (exit 1)."""
    # the interpreter running this suite has pytest and pytest-cov: it stands in for the torch environment
    monkeypatch.setattr(job, "ensure_environment", lambda *args, **kwargs: Environment(Path(sys.prefix), "x"))

    status = main(["test", "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir), "--",
                   "--bogus-pytest-flag"])  # fmt: skip

    captured = capsys.readouterr()
    assert status == 2
    ours = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert ours == [
        "error: pytest refused its arguments (--bogus-pytest-flag): a usage error, pytest exit status 4 (its message "
        "is above); nothing was tested. Correct the pytest arguments after --"
    ]
    assert "result:" not in captured.out


def _outcome(tmp_path: Path, coverage: float | None) -> runner.TestOutcome:
    xml = tmp_path / "coverage.xml" if coverage is not None else None
    return runner.TestOutcome(3, 0, 1, 0, coverage, tmp_path / "junit.xml", xml, 3)


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
