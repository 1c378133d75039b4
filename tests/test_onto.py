"""`check --onto REF`: each patch is reported as already upstream, applying cleanly, or conflicting."""

from __future__ import annotations

from conftest import commit, git
from patchseries.onto import check_onto
from patchseries.series import read_series


def test_each_patch_is_placed_against_an_upstream_ref(synthetic):
    tree = synthetic.tree
    git(tree, "checkout", "-q", "-b", "master", "base")
    # upstream merged the fix under another message, and rewrote the CHANGELOG line the second patch edits
    commit(tree, {"src/fakelib/core.py": "def answer():\n    return 42\n",
                  "tests/tests_pytorch/core/test_answer.py": "from fakelib.core import answer\n\n\n"
                  "def test_answer():\n    assert answer() == 42\n"}, "Merged upstream as #1")  # fmt: skip
    commit(tree, {"src/fakelib/CHANGELOG.md": "# Changelog\n\n## [unreleased]\n\n### Fixed\n\n- Something else\n"}, "x")

    standings = check_onto(tree, "master", "base", read_series(synthetic.ws.series_file))

    assert [(s.status, s.detail) for s in standings] == [
        ("already upstream", f"same patch id as {git(tree, 'rev-parse', 'master~1')[:12]}"),
        ("conflicts", "src/fakelib/CHANGELOG.md"),
    ]
    assert git(tree, "status", "--porcelain") == ""  # the upstream repository is only read


def test_patch_that_applies_is_reported_clean(synthetic):
    git(synthetic.tree, "branch", "master", "base")

    standings = check_onto(synthetic.tree, "master", "base", read_series(synthetic.ws.series_file))

    assert [s.status for s in standings] == ["applies cleanly", "applies cleanly"]
