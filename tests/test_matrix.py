"""The matrix's table: results per test module from JUnit, rendered to Markdown and into the README."""

from __future__ import annotations

import datetime as dt

import pytest

from patchseries.environment import parse_torch_version
from patchseries.errors import SeriesError
from patchseries.matrix import (
    DEFAULT_VERSIONS,
    Row,
    from_json,
    merged_changed_lines,
    results_by_module,
    to_json,
    to_markdown,
    update_readme,
)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests_pytorch.core.test_a" name="test_1"/>
<testcase classname="tests_pytorch.core.test_a" name="test_2"><failure message="boom"/></testcase>
<testcase classname="tests_pytorch.core.test_a" name="test_3"><skipped type="pytest.xfail" message="bug"/></testcase>
<testcase classname="" name="tests_pytorch.core.test_b"><error message="collection failure"/></testcase>
<testcase classname="tests_fabric.test_c" name="test_4"><skipped type="pytest.skip" message="no gpu"/></testcase>
</testsuite></testsuites>
"""


def test_results_are_counted_per_module_including_import_errors(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)

    assert results_by_module(junit) == {
        "test_a": "1 failed, 1 passed, 1 xfailed",
        "test_b": "1 failed",
        "test_c": "1 skipped",
    }


def test_table_has_a_row_per_version_and_module_and_survives_a_round_trip():
    rows = [
        Row("2.1.2", before={"test_a": "3 failed"}, after={"test_a": "3 passed"}, compile={"with": {"graphs": 3}}),
        Row("2.99.0", error="cannot install torch 2.99.0 for py3.11: no such version"),
    ]
    made_on = dt.date(2026, 11, 30)

    again, date = from_json(to_json(rows, made_on))
    table = to_markdown(again, date)

    assert "on 2026-11-30" in table
    assert "| 2.1.2 | `test_a` | 3 failed | 3 passed |" in table
    assert "| 2.99.0 | (all) | not run | cannot install torch 2.99.0 for py3.11: no such version |" in table


def test_readme_table_is_replaced_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- matrix:start -->\nold\n<!-- matrix:end -->\noutro\n")

    update_readme(readme, "new table\n")

    assert readme.read_text() == "intro\n<!-- matrix:start -->\nnew table\n<!-- matrix:end -->\noutro\n"


def test_readme_without_markers_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(SeriesError, match="has no <!-- matrix:start -->"):
        update_readme(readme, "table\n")


def test_changed_lines_are_merged_over_the_releases_in_the_table_and_survive_a_round_trip():
    first = {"files": {"src/lightning/a.py": {"covered": [1], "missed": {"2": "b", "3": "c"}}}, "unmeasured": []}
    second = {"files": {"src/lightning/a.py": {"covered": [2], "missed": {"1": "a", "3": "c"}}}, "unmeasured": []}
    rows = [Row("2.1.2", after={"test_a": "1 passed"}, changed_lines=first), Row("2.15.0", changed_lines=second)]

    again, date = from_json(to_json(rows, dt.date(2026, 11, 30)))
    table = to_markdown(again, date)

    assert "merged over the releases: 2/3 covered (66.7%); per release: 2.1.2 1/3 covered (33.3%);" in table
    assert "Not covered on any release: `lightning/a.py:3`." in table
    assert merged_changed_lines([Row("2.4.1")]) is None


def test_default_versions_are_every_minor_release_from_2_1_to_2_15_once():
    minors = [parse_torch_version(v)[:2] for v in DEFAULT_VERSIONS]
    assert minors == [(2, minor) for minor in range(1, 16)]
