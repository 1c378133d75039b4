"""Coverage of the changed lines: the diff's added lines under src/, coverage.py's hits, the merge over runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import commit, git
from patchseries.changed_lines import (
    JSON_NAME,
    ChangedLines,
    FileLines,
    added_lines,
    measure,
    merge,
    parse_added_lines,
)

DIFF = """\
diff --git a/src/pkg/mod.py b/src/pkg/mod.py
index 1111111..2222222 100644
--- a/src/pkg/mod.py
+++ b/src/pkg/mod.py
@@ -3 +3 @@ def f():
-    return 1
+    return 2
@@ -10,0 +11,2 @@ def g():
+++ x  # an added line that looks like a header
+    y = 1
@@ -20,2 +21,0 @@ def h():
-    gone = 1
-    gone = 2
diff --git a/src/pkg/new.py b/src/pkg/new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/src/pkg/new.py
@@ -0,0 +1,2 @@
+def new():
+    return 3
diff --git a/src/pkg/old.py b/src/pkg/old.py
deleted file mode 100644
--- a/src/pkg/old.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
diff --git a/tests/test_mod.py b/tests/test_mod.py
--- a/tests/test_mod.py
+++ b/tests/test_mod.py
@@ -1 +1 @@
-a
+b
"""

XML = """<?xml version="1.0" ?>
<coverage version="7.0" line-rate="0.5">
  <sources><source>/somewhere/src/pkg</source></sources>
  <packages><package name="pkg"><classes>
    <class name="mod.py" filename="mod.py"><lines>
      <line number="3" hits="1"/><line number="12" hits="0"/><line number="30" hits="1"/>
    </lines></class>
    <class name="new.py" filename="new.py"><lines>
      <line number="1" hits="1"/><line number="2" hits="0"/>
    </lines></class>
  </classes></package></packages>
</coverage>
"""


def test_added_lines_are_numbered_from_each_hunk_header_and_only_python_under_src_counts():
    assert parse_added_lines(DIFF) == {
        "src/pkg/mod.py": {3: "    return 2", 11: "++ x  # an added line that looks like a header", 12: "    y = 1"},
        "src/pkg/new.py": {1: "def new():", 2: "    return 3"},
    }


def test_only_lines_coverage_counts_as_executable_are_counted(tmp_path):
    xml = tmp_path / "coverage.xml"
    xml.write_text(XML)

    result = measure(parse_added_lines(DIFF), xml)

    # mod.py line 11 is not executable for coverage (a comment-like continuation), line 30 is not changed
    assert result.files["src/pkg/mod.py"] == FileLines(covered={3}, missed={12: "    y = 1"})
    assert result.files["src/pkg/new.py"] == FileLines(covered={1}, missed={2: "    return 3"})
    assert result.line() == "2/4 covered (50.0%)"


def test_changed_file_missing_from_the_report_is_listed_not_counted(tmp_path):
    xml = tmp_path / "coverage.xml"
    xml.write_text(XML.replace('filename="new.py"', 'filename="other.py"'))

    result = measure(parse_added_lines(DIFF), xml)

    assert result.unmeasured == ["src/pkg/new.py"]
    assert result.line() == "1/2 covered (50.0%), 1 changed files not in the coverage report"
    assert "src/pkg/new.py" in result.report("title")


def test_merge_covers_a_line_covered_by_any_run():
    first = ChangedLines({"src/a.py": FileLines({1}, {2: "b", 3: "c"})}, unmeasured=["src/b.py"])
    second = ChangedLines({"src/a.py": FileLines({2}, {1: "a", 3: "c"}), "src/b.py": FileLines(set(), {7: "g"})})

    merged = merge([first, second])

    assert merged.files["src/a.py"] == FileLines({1, 2}, {3: "c"})
    assert merged.files["src/b.py"] == FileLines(set(), {7: "g"})
    assert merged.unmeasured == []
    assert merged.line() == "2/4 covered (50.0%)"
    assert merged.missed_lines() == [("src/a.py", 3, "c"), ("src/b.py", 7, "g")]


def test_report_lists_each_uncovered_line_and_json_round_trips(tmp_path):
    result = ChangedLines({"src/a.py": FileLines({1}, {5: "    raise RuntimeError('cuda only')"})})

    report = result.write(tmp_path, "torch 2.13.0")

    assert report.read_text() == (
        "torch 2.13.0\nchanged lines: 1/2 covered (50.0%)\n\nuncovered changed lines:\n"
        "src/a.py:5: raise RuntimeError('cuda only')\n"
    )
    assert ChangedLines.from_dict(json.loads((tmp_path / JSON_NAME).read_text())) == result
    assert ChangedLines().line() == "0/0 covered (n/a)"


def test_synthetic_series_measured_with_a_real_coverage_report(synthetic, tmp_path):
    """The series' diff in the synthetic tree against what coverage.py writes for the series' own test."""
    commit(
        synthetic.tree,
        {"src/fakelib/core.py": "def answer():\n    return 42\n\n\ndef unused():\n    return 0\n"},
        "Add a function no test calls",
    )
    assert added_lines(synthetic.tree, "base", "series") == {
        "src/fakelib/core.py": {2: "    return 42", 3: "", 4: "", 5: "def unused():", 6: "    return 0"}
    }
    xml = tmp_path / "coverage.xml"
    env = {**os.environ, "PYTHONPATH": str(synthetic.tree / "src"), "COVERAGE_FILE": str(tmp_path / ".coverage")}
    coverage = [sys.executable, "-m", "coverage"]
    test = "tests/tests_pytorch/core/test_answer.py"
    for command in (
        [*coverage, "run", "--source=fakelib", "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        [*coverage, "xml", "-o", str(xml)],
    ):
        subprocess.run(command, cwd=synthetic.tree, env=env, check=True, capture_output=True)

    result = measure(added_lines(synthetic.tree, "base", "series"), xml)

    # `def unused():` runs at import; its body does not; blank lines are not executable
    assert result.files == {"src/fakelib/core.py": FileLines({2, 5}, {6: "    return 0"})}
    assert result.line() == "2/3 covered (66.7%)"


def test_added_lines_of_a_file_with_a_space_in_its_name(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q")
    commit(tree, {"src/pkg/my mod.py": "a = 1\n"}, "base")
    commit(tree, {"src/pkg/my mod.py": "a = 1\nb = 2\n"}, "change")

    diff = git(tree, "diff", "-U0", "HEAD~1", "HEAD")

    assert "+++ b/src/pkg/my mod.py\t" in diff  # git ends the line with a tab for such a name
    assert parse_added_lines(diff) == {"src/pkg/my mod.py": {2: "b = 2"}}
