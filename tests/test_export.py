"""Export regenerates patches/ from a branch; the drift check proves patches equal a fresh export of themselves."""

from __future__ import annotations

import pytest

from conftest import commit, git
from patchseries.errors import SeriesError
from patchseries.export import drift_problems, export_series
from patchseries.series import read_series


def _drift(synthetic):
    return drift_problems(synthetic.tree, read_series(synthetic.ws.series_file), synthetic.ws.patches)


def test_committed_series_equals_a_fresh_export(synthetic):
    assert _drift(synthetic) == []


def test_export_is_stable_and_machine_independent(synthetic):
    first = {p.name: p.read_bytes() for p in synthetic.ws.patches.glob("*.patch")}
    export_series(synthetic.tree, synthetic.ws.patches, branch="series")
    second = {p.name: p.read_bytes() for p in synthetic.ws.patches.glob("*.patch")}

    assert first == second
    text = next(iter(first.values())).decode()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] " in text
    assert not text.rstrip().endswith(git(synthetic.tree, "--version").split()[-1])  # no git-version signature


def test_hand_edited_patch_is_reported_as_drift(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    # a hand edit of the diff: git still applies it, but the blob ids in the index line no longer match
    first.write_text(first.read_text().replace("+    return 42", "+    return 43"))

    assert any(f"{first.name} differs from a fresh export" in p for p in _drift(synthetic))


def test_whitespace_error_is_reported(synthetic):
    commit(synthetic.tree, {"src/fakelib/core.py": "def answer():\n    return 42   \n"}, "Trailing whitespace")
    export_series(synthetic.tree, synthetic.ws.patches, branch="series")

    problems = _drift(synthetic)

    assert len(problems) == 1
    assert "0003-Trailing-whitespace.patch" in problems[0]
    assert "whitespace" in problems[0]


def test_export_removes_stale_patches_and_rewrites_series(synthetic):
    git(synthetic.tree, "reset", "-q", "--hard", "series~1")
    names = export_series(synthetic.tree, synthetic.ws.patches, branch="series")

    assert [p.name for p in synthetic.ws.patches.glob("*.patch")] == names == ["0001-Fix-the-answer.patch"]
    assert synthetic.ws.series_file.read_text().splitlines()[1:] == names
    assert synthetic.ws.pin_file.exists()


def test_export_of_a_branch_without_commits_is_refused(synthetic):
    with pytest.raises(SeriesError, match="has no commits on top of 'base'"):
        export_series(synthetic.tree, synthetic.ws.patches, branch="base")


def test_export_of_a_missing_branch_is_refused(synthetic):
    with pytest.raises(SeriesError, match="has no branch 'nope'"):
        export_series(synthetic.tree, synthetic.ws.patches, branch="nope")
