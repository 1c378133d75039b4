"""The matrix's table: results per test module from JUnit, rendered to Markdown and into docs/compatibility.md."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from patchseries import matrix
from patchseries.cli import main
from patchseries.errors import SeriesError
from patchseries.matrix import (
    DEFAULT_VERSIONS,
    TABLE_END,
    TABLE_START,
    Row,
    from_json,
    results_by_module,
    to_json,
    to_markdown,
    update_table_page,
)
from patchseries.runner import torch_release

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
    probe = {"torch": "2.1.2+cu121", "lightning": "2.6.6", "backend": "aot_eager", "with": {"graphs": 3}}  # as printed
    rows = [
        Row("2.1.2", before={"test_a": "3 failed"}, after={"test_a": "3 passed"}, compile=probe),
        Row("2.99.0", error="cannot install torch 2.99.0 for py3.11: no such version"),
    ]
    made_on = dt.date(2026, 11, 30)

    again, date = from_json(to_json(rows, made_on))
    table = to_markdown(again, date)

    assert "on 2026-11-30" in table
    assert "| 2.1.2 | `test_a` | 3 failed | 3 passed |" in table
    assert "| 2.99.0 | (all) | not run | cannot install torch 2.99.0 for py3.11: no such version |" in table


def test_page_table_is_replaced_between_the_markers(tmp_path):
    page = tmp_path / "compatibility.md"
    page.write_text("intro\n<!-- matrix:start -->\nold\n<!-- matrix:end -->\noutro\n")

    update_table_page(page, "new table\n")

    assert page.read_text() == "intro\n<!-- matrix:start -->\nnew table\n<!-- matrix:end -->\noutro\n"


def test_page_without_markers_is_refused(tmp_path):
    page = tmp_path / "compatibility.md"
    page.write_text("no markers\n")
    with pytest.raises(SeriesError, match="needs one <!-- matrix:start --> line, then one <!-- matrix:end --> line"):
        update_table_page(page, "table\n")


def test_changed_lines_are_merged_over_the_releases_in_the_table_and_survive_a_round_trip():
    first = {"files": {"src/lightning/a.py": {"covered": [1], "missed": {"2": "b", "3": "c"}}}, "unmeasured": []}
    second = {"files": {"src/lightning/a.py": {"covered": [2], "missed": {"1": "a", "3": "c"}}}, "unmeasured": []}
    results = {"before": {"test_a": "1 failed"}, "after": {"test_a": "1 passed"}}
    rows = [Row("2.1.2", **results, changed_lines=first), Row("2.15.0", **results, changed_lines=second)]

    again, date = from_json(to_json(rows, dt.date(2026, 11, 30)))
    table = to_markdown(again, date)

    assert "merged over the releases: 2/3 covered (66.7%); per release: 2.1.2 1/3 covered (33.3%);" in table
    assert "Not covered on any release: `lightning/a.py:3`." in table


def test_default_versions_are_every_minor_release_from_2_1_to_2_15_once():
    assert [torch_release(v) for v in DEFAULT_VERSIONS] == list(DEFAULT_VERSIONS)
    assert [v.rsplit(".", 1)[0] for v in DEFAULT_VERSIONS] == [f"2.{minor}" for minor in range(1, 16)]


PAGE_TEXT = "intro\n<!-- matrix:start -->\nold table\n\nold compile statistics\n<!-- matrix:end -->\noutro\n"


def _matrix(synthetic, *args):
    return main(["matrix", *args, "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)])


def _complete_row(torch="2.13.0"):
    return Row(torch, before={"test_a": "1 failed"}, after={"test_a": "1 passed"}, compile={"with": {"graphs": 2}})


def test_an_incomplete_matrix_leaves_the_page_as_it_was_and_says_where_its_results_are(
    synthetic, tmp_path, monkeypatch, capsys
):
    page = tmp_path / "compatibility.md"
    page.write_text(PAGE_TEXT)
    failed = Row("2.15.0", error="torch 2.15.0 and Lightning 2.6.6 need Python 3.11 to 3.14, not 3.10")
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: [failed])

    status = _matrix(synthetic, "--torch", "2.15.0", "--write-docs", str(page))

    assert status == 2
    assert page.read_text() == PAGE_TEXT
    saved = synthetic.ws.reports / "matrix" / "matrix.json"
    assert from_json(saved.read_text())[0] == [failed]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: matrix incomplete, no result for torch 2.15.0 (torch 2.15.0: torch 2.15.0 and Lightning 2.6.6 need "
        f"Python 3.11 to 3.14, not 3.10); the results are saved in {saved}; {page} was left as it was (a table "
        "is replaced only by a complete one)"
    ]


def test_a_matrix_whose_compile_statistics_failed_is_incomplete_too(synthetic, tmp_path, monkeypatch):
    page = tmp_path / "compatibility.md"
    page.write_text(PAGE_TEXT)
    probe_failed = Row("2.13.0", before={"t": "1 failed"}, after={"t": "1 passed"}, compile={"error": "probe failed"})
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: [_complete_row("2.1.2"), probe_failed])

    assert _matrix(synthetic, "--write-docs", str(page)) == 2
    assert page.read_text() == PAGE_TEXT


@pytest.mark.parametrize("option", ["--write-docs", "--write-readme"])  # the old name stays an alias
def test_a_complete_matrix_replaces_the_page_table(synthetic, tmp_path, monkeypatch, option):
    page = tmp_path / "compatibility.md"
    page.write_text(PAGE_TEXT)
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: [_complete_row()])

    assert _matrix(synthetic, option, str(page)) == 0
    assert "| 2.13.0 | `test_a` | 1 failed | 1 passed |" in page.read_text()
    assert "old table" not in page.read_text()


@pytest.mark.parametrize("failing", ["matrix.json", "matrix.md"])
def test_a_write_that_fails_midway_leaves_the_old_matrix_files_whole(synthetic, monkeypatch, capsys, failing):
    """A full disk (or an interrupt) while matrix.json or matrix.md is written leaves the old file whole."""
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: [_complete_row("2.13.0")])
    assert _matrix(synthetic) == 0
    out_dir = synthetic.ws.reports / "matrix"
    before = {path.name: path.read_bytes() for path in sorted(out_dir.iterdir())}
    assert set(before) == {"matrix.json", "matrix.md"}
    capsys.readouterr()

    def half_then_disk_full(write):
        def half(self, data, *args, **kwargs):
            if self.name.startswith(failing):  # the file itself, or the copy renamed over it
                write(self, data[: len(data) // 2], *args, **kwargs)
                raise OSError(28, "No space left on device", str(self))
            return write(self, data, *args, **kwargs)

        return half

    monkeypatch.setattr(Path, "write_text", half_then_disk_full(Path.write_text))
    monkeypatch.setattr(Path, "write_bytes", half_then_disk_full(Path.write_bytes))
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: [_complete_row(), _complete_row("2.14.0")])

    assert _matrix(synthetic) == 2
    assert capsys.readouterr().err.startswith("error: No space left on device")
    assert (out_dir / failing).read_bytes() == before[failing]  # each file is replaced in one rename, or not at all
    assert sorted(path.name for path in out_dir.iterdir()) == sorted(before)  # no half-written copy is left either


@pytest.mark.parametrize(
    "text",
    [
        "no markers\n",
        "<!-- matrix:start -->\nno end\n",
        "<!-- matrix:end -->\nx\n<!-- matrix:start -->\n",
        "<!-- matrix:start -->\n<!-- matrix:end -->\n<!-- matrix:start -->\n",
    ],
)
def test_page_markers_are_checked_before_the_matrix_runs(synthetic, tmp_path, monkeypatch, capsys, text):
    page = tmp_path / "compatibility.md"
    page.write_text(text)
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: pytest.fail("ran before checking the page"))

    status = _matrix(synthetic, "--write-docs", str(page))

    assert status == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {page} needs one {TABLE_START} line, then one {TABLE_END} line, around the table"]
    assert page.read_text() == text


def test_a_crlf_page_keeps_its_line_endings(tmp_path):
    page = tmp_path / "compatibility.md"
    page.write_bytes(PAGE_TEXT.replace("\n", "\r\n").encode())

    update_table_page(page, "new table\nsecond line\n")

    data = page.read_bytes()
    assert data == b"intro\r\n<!-- matrix:start -->\r\nnew table\r\nsecond line\r\n<!-- matrix:end -->\r\noutro\r\n"


SAVED = to_json([_complete_row()], dt.date(2026, 12, 1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SAVED[:40], "(Expecting value: line 3 column 12 (char 40))"),
        (SAVED.replace('"made_on"', '"made_when"'), "(expected made_on and a list of rows)"),
        (SAVED.replace('"made_on": "2026-12-01",', '"made_on": "2026-12-01", "extra": 1,'), "(expected made_on"),
        (SAVED.replace("2026-12-01", "2026-13-01"), "(month must be in 1..12)"),
        ('{"made_on": "2026-12-01", "rows": {"torch": "2.13.0"}}', "(row 1: "),
        (SAVED.replace('"error": null', '"error": null, "old": 1'), "(row 1: Row.__init__() got an unexpected keyword"),
        (SAVED.replace('"rows": [', '"rows": [[],'), "(row 1: "),
        (SAVED.replace('"after": {\n        "test_a": "1 passed"\n      }', '"after": ["1 passed"]'), "(row 1: "),
        (SAVED.replace('"torch": "2.13.0"', '"torch": 2.13'), "(row 1: "),
        (SAVED.replace('"with": {\n          "graphs": 2\n        }', '"with": 2'), "(row 1: "),
        ('{"made_on": "2026-12-01", "rows": [{"torch": "2.1.2", "error": "x", "changed_lines": {"files": 3}}]}',
         "(row 1: "),
    ],
)  # fmt: skip
def test_a_bad_saved_matrix_is_one_error_line(synthetic, tmp_path, capsys, text, message):
    saved = tmp_path / "matrix.json"
    saved.write_text(text)

    status = _matrix(synthetic, "--from-json", str(saved))

    assert status == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"error: {saved} is not a saved matrix (")
    assert err[0].endswith("); run the matrix again")
    assert message in err[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from-json", "m.json", "--torch", "2.13.0"), "error: --torch and --from-json are alternatives: --from-json "
         "renders the releases saved in JSON; drop --torch, or run the matrix without --from-json"),
    ],
)  # fmt: skip
def test_options_that_would_be_ignored_are_refused(synthetic, monkeypatch, capsys, args, message):
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: pytest.fail("ran despite a refused option"))

    assert _matrix(synthetic, *args) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_a_saved_matrix_without_rows_never_replaces_a_page_table(synthetic, tmp_path, capsys):
    """A saved matrix with no rows never renders an empty table over the page's complete one."""
    page = tmp_path / "compatibility.md"
    page.write_text(f"intro\n{TABLE_START}\n| torch | ... |\n| 2.13.0 | ok |\n{TABLE_END}\nend\n")
    before = page.read_bytes()
    saved = tmp_path / "matrix.json"
    saved.write_text('{"made_on": "2026-12-01", "rows": []}')

    status = _matrix(synthetic, "--from-json", str(saved), "--write-docs", str(page))

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {saved} is not a saved matrix (expected made_on and a list of rows); run the matrix again"
    ]
    assert page.read_bytes() == before
    assert not (synthetic.ws.reports / "matrix" / "matrix.md").exists()


def test_a_saved_matrix_without_test_results_never_replaces_a_page_table(synthetic, tmp_path, capsys):
    page = tmp_path / "compatibility.md"
    page.write_text(f"intro\n{TABLE_START}\n| torch | ... |\n| 2.13.0 | ok |\n{TABLE_END}\nend\n")
    before = page.read_bytes()
    saved = tmp_path / "t.json"
    saved.write_text('{"made_on":"2026-01-01","rows":[{"torch":"2.13.0","compile":{"x":{}}}]}')

    status = _matrix(synthetic, "--from-json", str(saved), "--write-docs", str(page))

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {saved} is not a saved matrix (row 1: no test results (before and after) and no error); run the "
        "matrix again"
    ]
    assert page.read_bytes() == before
    assert not (synthetic.ws.reports / "matrix").exists()


def test_write_docs_through_a_link_writes_the_page_it_names(synthetic, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{TABLE_START}\nold\n{TABLE_END}\nend\n")
    link = tmp_path / "link.md"
    link.symlink_to(page)
    saved = tmp_path / "matrix.json"
    row = Row("2.13.0", before={"t": "1 failed"}, after={"t": "1 passed"}, compile={"with": {"graphs": 2}})
    saved.write_text(to_json([row]))

    status = main(["matrix", "--from-json", str(saved), "--write-docs", str(link), "--patches",
                   str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)])  # fmt: skip

    assert status == 0
    assert link.is_symlink()
    assert "old" not in page.read_text()
    assert matrix.TABLE_START in page.read_text()
    assert str(page) in capsys.readouterr().out.splitlines()[-1]


def test_a_run_whose_pytest_wrote_no_report_is_no_result_and_never_replaces_a_page_table(synthetic, tmp_path):
    page = tmp_path / "compatibility.md"
    page.write_text(f"intro\n{TABLE_START}\n| 2.13.0 | ok |\n{TABLE_END}\n")
    before = page.read_bytes()
    saved = tmp_path / "t.json"
    no_report = {matrix.NO_REPORT: "error: pytest produced no report"}
    saved.write_text(to_json([Row("2.13.0", before=no_report, after=no_report, compile={"with": {"graphs": 2}})]))

    assert _matrix(synthetic, "--from-json", str(saved), "--write-docs", str(page)) == 2
    assert page.read_bytes() == before


def test_a_page_that_is_not_utf8_is_refused_in_one_line_before_a_run(synthetic, tmp_path, capsys):
    page = tmp_path / "compatibility.md"
    page.write_bytes(f"caf\xe9\n{TABLE_START}\n{TABLE_END}\n".encode("latin-1"))
    saved = tmp_path / "t.json"
    saved.write_text(to_json([_complete_row()]))

    assert _matrix(synthetic, "--from-json", str(saved), "--write-docs", str(page)) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {page} is not UTF-8 text (invalid continuation byte at "
                                                    "byte 3); save it as UTF-8"]  # fmt: skip
