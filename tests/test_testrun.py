"""Running the series' tests: pytest's own verdicts are reported as such."""

from __future__ import annotations

import sys
from pathlib import Path

from patchseries import pipeline, testrun
from patchseries.environment import Environment
from patchseries.progress import quiet
from patchseries.testrun import run_tests


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


def test_main_job_that_ran_no_test_says_so_and_exits_5(synthetic, monkeypatch):
    outcome = testrun.TestOutcome(0, 0, 0, testrun.PYTEST_NO_TESTS, None, synthetic.ws.reports / "junit.xml", None)
    monkeypatch.setattr(pipeline, "ensure_environment", lambda *args, **kwargs: None)
    monkeypatch.setattr(pipeline, "run_tests", lambda *args, **kwargs: outcome)

    result = pipeline.run_main_job(synthetic.ws, pipeline.BaseChoice(), "2.13.0", quiet, pytest_args=("-k", "x"))

    text = pipeline.summary(result)
    assert "tests:     none ran: pytest collected no test" in text
    assert "failed" not in text
    assert text.endswith("result:    NO TESTS RAN")
    assert result.exit_status == 5
