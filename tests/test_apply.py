"""Applying the series: in a fresh tree, all or nothing, re-runs detected, leftovers of killed runs removed."""

from __future__ import annotations

import json

import pytest

from conftest import change_patches, commit, git, one_error, snapshot
from patchseries.errors import SeriesError
from patchseries.export import export_series
from patchseries.gitcmd import has_path
from patchseries.job import series_test_files, write_harness
from patchseries.pin import load_pin
from patchseries.progress import quiet
from patchseries.series import read_series
from patchseries.trees import BASE_REF, SERIES_BRANCH, BaseTree, apply_series, resolve_source, tool_tree


def _apply(synthetic, log=quiet, ws=None):
    ws = ws or synthetic.ws
    pin = load_pin(ws.pin_file)
    ws.workdir.mkdir(parents=True, exist_ok=True)
    return tool_tree(ws, pin, read_series(ws.series_file), resolve_source(ws, pin, None, False, False), log)


def test_series_is_applied_on_its_own_branch(synthetic):
    base, result = _apply(synthetic)

    assert result.applied == [p.name for p in read_series(synthetic.ws.series_file)]
    assert git(base.path, "symbolic-ref", "--short", "HEAD") == SERIES_BRANCH
    assert "return 42" in (base.path / "src/fakelib/core.py").read_text()
    assert git(base.path, "status", "--porcelain") == ""
    assert not (base.path / ".git/info/attributes").exists()  # applying's own merge setting, gone once applied


def test_applied_series_is_reproducible(synthetic, tmp_path):
    _, first = _apply(synthetic)
    _, second = _apply(synthetic, ws=type(synthetic.ws)(synthetic.ws.patches, tmp_path / "elsewhere"))

    assert first.head == second.head


def test_rerun_on_a_patched_tree_is_detected_not_an_error(synthetic):
    messages: list[str] = []
    _apply(synthetic)
    _, again = _apply(synthetic, messages.append)

    assert again.reused
    assert any("already applied" in m for m in messages)


def test_patch_already_in_the_base_is_skipped(synthetic, tmp_path):
    pin = load_pin(synthetic.ws.pin_file)
    patches = read_series(synthetic.ws.series_file)
    repo = tmp_path / "base-with-the-series"  # a base that already contains the whole series
    git(tmp_path, "clone", "-q", "--branch", "series", str(synthetic.tree), str(repo))
    git(repo, "checkout", "-q", "-b", "base")
    git(repo, "branch", "-q", "-D", "series")

    result = apply_series(BaseTree(repo, "checkout"), patches, pin, quiet)

    assert result.already_present == [p.name for p in patches]
    assert result.applied == []


def _add_a_conflicting_patch(synthetic):
    """A third patch whose context no longer exists once the first patch is applied."""
    git(synthetic.tree, "checkout", "-q", "-b", "conflicting", "base")
    commit(synthetic.tree, {"src/fakelib/core.py": "def answer():\n    return 0\n"}, "Conflict with the fix")
    git(synthetic.tree, "checkout", "-q", "series")
    export_series(synthetic.tree, synthetic.ws.patches / "extra", branch="conflicting")
    next((synthetic.ws.patches / "extra").glob("*.patch")).rename(synthetic.ws.patches / "0003-conflict.patch")
    with synthetic.ws.series_file.open("a") as handle:
        handle.write("0003-conflict.patch\n")


def test_failing_patch_is_named_and_leaves_no_tree(synthetic):
    _add_a_conflicting_patch(synthetic)

    with pytest.raises(SeriesError, match=r"0003-conflict.patch does not apply: src/fakelib/core.py; nothing was"):
        _apply(synthetic)

    assert not synthetic.ws.trees.exists()  # the fresh tree it was applied in is removed


def test_leftovers_of_a_killed_run_are_removed_by_the_next_run(synthetic):
    """A run killed (SIGKILL) while building leaves its scratch in ``<workdir>/patchseries-tmp``: the next run removes
    it."""
    leftover = synthetic.ws.scratch / "sdist-1.0-killed"
    leftover.mkdir(parents=True)
    (leftover / "junk").write_text("left by a killed run")

    assert synthetic.run("apply").returncode == 0

    assert not synthetic.ws.scratch.exists()
    assert sorted(path.name for path in synthetic.ws.trees.iterdir()) == ["sdist-1.0"]


def test_hunks_for_files_the_sdist_lacks_are_excluded_and_reported(synthetic):
    git(synthetic.tree, "checkout", "-q", "-b", "docs", "series")
    # upstream docs exist only in an upstream checkout: emulate a patch made there
    commit(synthetic.tree, {"docs/index.rst": "Docs\n"}, "Add docs page")
    commit(synthetic.tree, {"docs/index.rst": "Docs, improved\n", "src/fakelib/__init__.py": "VERSION = '1.1'\n"},
           "Improve docs and bump")  # fmt: skip
    export_series(synthetic.tree, synthetic.ws.patches / "docs", branch="docs", base="docs~1")
    patch = next((synthetic.ws.patches / "docs").glob("*.patch"))
    patch.rename(synthetic.ws.patches / "0003-docs.patch")
    with synthetic.ws.series_file.open("a") as handle:
        handle.write("0003-docs.patch\n")
    messages: list[str] = []

    base, result = _apply(synthetic, messages.append)

    assert result.excluded == {"0003-docs.patch": ["docs/index.rst"]}
    assert any("excluding docs/index.rst" in m for m in messages)
    assert (base.path / "src/fakelib/__init__.py").read_text() == "VERSION = '1.1'\n"
    assert not (base.path / "docs").exists()


def test_harness_is_written_only_where_upstream_tests_are_missing(synthetic):
    base, _ = _apply(synthetic)
    patches = read_series(synthetic.ws.series_file)

    written = write_harness(base.path, patches)

    runif = base.path / "tests/tests_pytorch/helpers/runif.py"
    assert runif in written
    assert "_runif_reasons" in runif.read_text()
    assert (base.path / "tests/tests_pytorch/core/__init__.py").exists()
    assert series_test_files(patches) == ["tests/tests_pytorch/core/test_answer.py"]
    assert git(base.path, "status", "--porcelain") == ""  # harness files are ignored, never committed
    assert write_harness(base.path, patches) == []
    # the work tree now has tests/, but the sdist base still counts as a base without upstream tests
    assert not has_path(base.path, "tests", BASE_REF)  # as the main job decides it


def test_file_added_by_an_earlier_patch_is_not_excluded(synthetic):
    # the first patch adds tests/tests_pytorch/core/test_answer.py; a later patch edits it
    new_test = "tests/tests_pytorch/core/test_answer.py"
    commit(synthetic.tree, {new_test: "def test_answer():\n    assert True\n"}, "Edit the new test")
    export_series(synthetic.tree, synthetic.ws.patches, branch="series")

    base, result = _apply(synthetic)

    assert result.excluded == {}
    assert (base.path / new_test).read_text() == "def test_answer():\n    assert True\n"


def test_a_refused_series_leaves_the_tree_as_it_was_and_the_fixed_series_reuses_it(synthetic):
    """A refused series leaves the tree on its branch, so the next run does not take it for local changes."""
    base, _ = _apply(synthetic)
    series_before = git(base.path, "rev-parse", "series")
    listed = synthetic.ws.series_file.read_text()
    _add_a_conflicting_patch(synthetic)

    refused = synthetic.run("apply")

    assert refused.returncode == 2
    assert git(base.path, "symbolic-ref", "--short", "HEAD") == "series"
    assert git(base.path, "rev-parse", "series") == series_before
    synthetic.ws.series_file.write_text(listed)  # the contributor fixes the series
    rerun = synthetic.run("apply")
    assert rerun.returncode == 0, rerun.stderr
    assert "reusing it" in rerun.stderr


@pytest.mark.parametrize("patches_changed", [False, True])
def test_a_persons_series_wip_branch_with_a_commit_and_an_edit_is_left_byte_for_byte(synthetic, patches_changed):
    """A person's branch `series-wip` (the tool's old work branch's name), checked out, with a commit
    and an uncommitted edit: `apply` stops with one line and changes nothing, whether patches/ changed or not."""
    base, _ = _apply(synthetic)
    git(base.path, "checkout", "-q", "-b", "series-wip")
    commit(base.path, {"src/fakelib/core.py": "def answer():\n    return 43\n"}, "My work in progress")
    (base.path / "src/fakelib/__init__.py").write_text("VERSION = 'mine'\n")
    before = snapshot(base.path)
    if patches_changed:
        change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == proc.stderr.splitlines()[-1:]
    assert "is not as the tool built it (its refs changed (HEAD, refs/heads/series-wip))" in proc.stderr
    assert snapshot(base.path) == before


def test_a_patch_git_am_cannot_read_is_refused_with_git_ams_reason(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.write_bytes(b"\xef\xbb\xbf" + first.read_bytes())  # a byte order mark an editor wrote

    error = one_error(synthetic.run("apply"))

    assert "does not apply: Patch format detection failed;" in error
    assert "see `git am` output" not in error


def test_the_tree_records_are_json(synthetic):
    assert synthetic.run("apply").returncode == 0
    files = synthetic.ws.trees / "sdist-1.0" / ".git" / "patchseries-files"
    assert isinstance(json.loads(files.read_text()), dict)
