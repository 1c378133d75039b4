"""Export regenerates patches/ from a branch; the drift check proves patches equal a fresh export of themselves."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    RELEASE_FILES,
    TOOL,
    Synthetic,
    between,
    change_patches,
    cli,
    commit,
    files_of,
    git,
    one_error,
    run_signalled,
    shell,
    without_the_tool,
)
from patchseries.errors import SeriesError
from patchseries.export import drift_report, export_series
from patchseries.pin import load_pin
from patchseries.series import read_series

CORE = "src/fakelib/core.py"


def _drift(synthetic):
    ws = synthetic.ws
    return drift_report(synthetic.tree, read_series(ws.series_file), ws.patches, ws.scratch).problems


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


def test_export_with_relative_paths_from_another_directory_writes_the_patches_folder(synthetic, tmp_path, monkeypatch):
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.0.1'\n"}, "Fix the version")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    names = export_series(Path("..", "work", "edit", synthetic.tree.name), Path("../patches"), branch="series")

    assert names == ["0001-Fix-the-answer.patch", "0002-Add-a-CHANGELOG-entry.patch", "0003-Fix-the-version.patch"]
    assert synthetic.ws.series_file.read_text().splitlines()[1:] == names
    assert sorted(p.name for p in synthetic.ws.patches.glob("*.patch")) == names
    assert git(synthetic.tree, "status", "--porcelain", "--untracked-files=all") == ""  # nothing staged in the tree
    assert list(elsewhere.iterdir()) == []


def test_export_of_a_missing_branch_is_refused(synthetic):
    with pytest.raises(SeriesError, match="has no branch 'nope'"):
        export_series(synthetic.tree, synthetic.ws.patches, branch="nope")


# Upstream files the synthetic sdist lacks (its pin says lacks = ["tests/", "docs/"]), as Lightning's sdist lacks docs/.
LACKS = ("tests/", "docs/")
DOCS = "docs/index.rst"
DOCUMENTED = "Add a docstring and document it"


@pytest.fixture
def upstream_series(synthetic, upstream_clone):
    """The series authored on an upstream tree (the release plus docs/), with a patch that changes code and docs."""
    commit(upstream_clone, {DOCS: "Fakelib\n"}, "Docs")
    git(upstream_clone, "tag", "-f", "1.0")
    git(upstream_clone, "checkout", "-q", "-b", "base")
    git(upstream_clone, "checkout", "-q", "-b", "series")
    git(upstream_clone, "am", "-q", *sorted(str(p) for p in synthetic.ws.patches.glob("*.patch")))
    documented = (
        RELEASE_FILES["src/fakelib/core.py"]
        .replace("return 41", "return 42")
        .replace("():\n", '():\n    """The answer."""\n')
    )
    commit(upstream_clone, {"src/fakelib/core.py": documented, DOCS: "Fakelib\n\n``answer()`` answers.\n"}, DOCUMENTED)
    _in_git(synthetic.ws.patches)  # another tree's export: this one may replace it once git holds it
    export_series(upstream_clone, synthetic.ws.patches, branch="series")
    return upstream_clone


def _report(synthetic, base_repo, lacks=LACKS):
    ws = synthetic.ws
    return drift_report(base_repo, read_series(ws.series_file), ws.patches, ws.scratch, lacks=lacks)


def test_check_on_the_sdist_leaves_out_hunks_for_files_it_lacks_and_checks_the_rest(synthetic, upstream_series):
    report = _report(synthetic, synthetic.tree)

    assert report.problems == []
    assert report.unchecked == {"0003-Add-a-docstring-and-document-it.patch": [DOCS]}


def test_hand_edit_beside_a_left_out_hunk_is_still_drift(synthetic, upstream_series):
    patch = synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch"
    patch.write_text(patch.read_text().replace('"""The answer."""', '"""The answer!"""'))

    assert any(
        "0003-Add-a-docstring-and-document-it.patch differs" in p for p in _report(synthetic, synthetic.tree).problems
    )


def test_dropping_hunks_suggests_an_edit_tree_of_an_upstream_base(synthetic, upstream_series):
    """The remedy names `edit --git` (not the tool's tree, `apply --git`), with the run's options."""
    patch = synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch"
    git(synthetic.tree, "am", "-q", f"--exclude={DOCS}", str(patch))
    edit = "python -m patchseries edit --workdir W"

    with pytest.raises(SeriesError, match=f"an upstream base \\({edit} --git, or --checkout PATH instead of --git\\)"):
        export_series(synthetic.tree, synthetic.ws.patches, branch="series", lacks=LACKS, edit=edit)


def test_check_on_an_upstream_tree_checks_every_hunk(synthetic, upstream_series):
    patch = synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch"
    assert _report(synthetic, upstream_series, lacks=()).problems == []
    assert _report(synthetic, upstream_series, lacks=()).unchecked == {}

    patch.write_text(patch.read_text().replace("answers.", "answers!"))  # only the docs hunk: the sdist cannot see it

    assert _report(synthetic, synthetic.tree).problems == []
    assert any("differs from a fresh export" in p for p in _report(synthetic, upstream_series, lacks=()).problems)


def test_export_from_the_sdist_tree_refuses_to_drop_hunks_for_files_it_lacks(synthetic, upstream_series):
    patch = synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch"
    _in_git(synthetic.ws.patches)  # the other tree's export, committed: this tree may replace it
    git(synthetic.tree, "am", "-q", f"--exclude={DOCS}", str(patch))  # what `apply` does on the sdist base
    before = {p.name: p.read_text() for p in synthetic.ws.patches.iterdir() if p.is_file()}

    with pytest.raises(
        SeriesError, match=r"would drop 0003-Add-a-docstring-and-document-it.patch's hunks for docs/index.rst"
    ):
        export_series(synthetic.tree, synthetic.ws.patches, branch="series", lacks=LACKS)

    assert {p.name: p.read_text() for p in synthetic.ws.patches.iterdir() if p.is_file()} == before
    export_series(synthetic.tree, synthetic.ws.patches, branch="series", lacks=LACKS, drop_lacking=True)
    assert DOCS not in patch.read_text()


def test_export_from_an_upstream_tree_may_drop_a_docs_hunk_on_purpose(synthetic, upstream_series):
    git(upstream_series, "checkout", "-q", "series~1", "--", DOCS)
    git(upstream_series, "commit", "-q", "--amend", "--no-edit")

    export_series(upstream_series, synthetic.ws.patches, branch="series", lacks=LACKS)

    assert DOCS not in (synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch").read_text()


def test_a_patch_that_only_changes_files_the_sdist_lacks_is_left_out_and_the_rest_checked(synthetic, upstream_series):
    commit(upstream_series, {DOCS: "Fakelib\n\nSee ``answer()``.\n"}, "Reword the docs")
    commit(upstream_series, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    export_series(upstream_series, synthetic.ws.patches, branch="series")

    report = _report(synthetic, synthetic.tree)

    assert report.problems == []
    assert report.unchecked["0004-Reword-the-docs.patch"] == [DOCS]
    bumped = synthetic.ws.patches / "0005-Bump-the-version.patch"
    bumped.write_text(bumped.read_text().replace("VERSION = '1.1'", "VERSION = '1.2'"))
    assert any("0005-Bump-the-version.patch differs" in p for p in _report(synthetic, synthetic.tree).problems)


def test_check_command_names_what_the_sdist_could_not_check_and_checkout_checks_it(synthetic, upstream_series):
    on_sdist = synthetic.run("check")
    on_upstream = synthetic.run("check", "--checkout", str(upstream_series))

    assert on_sdist.returncode == 0, on_sdist.stderr
    assert (
        "not checked: 1 upstream files that the sdist base lacks (docs/index.rst), changed by 0003" in on_sdist.stdout
    )
    assert on_upstream.returncode == 0, on_upstream.stderr
    assert on_upstream.stdout.startswith("ok: 3 patches equal a fresh export")
    assert "not checked" not in on_upstream.stdout
    git(upstream_series, "tag", "-d", "1.0")
    assert "has no 'refs/tags/1.0'" in synthetic.run("check", "--checkout", str(upstream_series)).stderr


def test_export_from_the_sdist_tree_refuses_to_drop_a_docs_only_patch_or_a_reworded_one(synthetic, upstream_series):
    commit(upstream_series, {DOCS: "Fakelib\n\nSee ``answer()``.\n"}, "Reword the docs")
    export_series(upstream_series, synthetic.ws.patches, branch="series")
    patches = sorted(synthetic.ws.patches.glob("*.patch"))
    # what `apply` leaves on the sdist tree: 0003 without its docs hunk, 0004 (docs only) skipped, 0003 reworded
    git(synthetic.tree, "am", "-q", f"--exclude={DOCS}", str(patches[2]))
    git(synthetic.tree, "commit", "-q", "--amend", "-m", "Document the answer, reworded")

    with pytest.raises(SeriesError, match=r"0003-Add-a-docstring-and-document-it.patch's hunks for docs/index.rst; "
                       r"0004-Reword-the-docs.patch's hunks for docs/index.rst"):  # fmt: skip
        export_series(synthetic.tree, synthetic.ws.patches, branch="series", lacks=LACKS)

    assert sorted(synthetic.ws.patches.glob("*.patch")) == patches


def test_a_skipped_docs_only_patch_does_not_hide_a_misnumbered_series(synthetic, upstream_series):
    commit(upstream_series, {DOCS: "Fakelib\n\nSee ``answer()``.\n"}, "Reword the docs")
    commit(upstream_series, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    export_series(upstream_series, synthetic.ws.patches, branch="series")
    bumped = synthetic.ws.patches / "0005-Bump-the-version.patch"
    bumped.rename(synthetic.ws.patches / "0009-Bump-the-version.patch")
    series = synthetic.ws.series_file
    series.write_text(series.read_text().replace("0005-Bump", "0009-Bump"))

    assert any("patch numbers differ" in p for p in _report(synthetic, synthetic.tree).problems)


def test_export_keeps_a_patch_file_that_series_does_not_list_and_says_so(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    wip = synthetic.ws.patches / "0009-wip.patch"
    wip.write_bytes(first.read_bytes())  # a contributor's work in progress, never exported
    git(synthetic.tree, "reset", "-q", "--hard", "series~1")

    proc = synthetic.run("export")

    assert proc.returncode == 0, proc.stderr
    assert wip.read_bytes() == first.read_bytes()
    assert synthetic.ws.series_file.read_text().splitlines()[1:] == ["0001-Fix-the-answer.patch"]
    assert not (synthetic.ws.patches / "0002-Add-a-CHANGELOG-entry.patch").exists()  # written by export: replaced
    assert f"left 0009-wip.patch in {synthetic.ws.patches}: series does not list it" in proc.stdout


def test_export_refuses_to_overwrite_a_patch_file_that_series_does_not_list(synthetic):
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    mine = synthetic.ws.patches / "0003-Bump-the-version.patch"
    mine.write_text("my own notes\n")
    before = {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()}

    with pytest.raises(SeriesError, match=r"export would overwrite or remove .*/0003-Bump-the-version.patch, "):
        export_series(synthetic.tree, synthetic.ws.patches, branch="series")

    assert {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()} == before


@pytest.mark.parametrize("lacked", [DOCS, "tests/tests_pytorch/core/test_module.py"])
def test_export_from_the_sdist_tree_refuses_to_drop_hunks_once_a_commit_adds_files_at_their_paths(
    synthetic, upstream_clone, lacked
):
    # the series authored upstream changes an upstream file that the sdist lacks (docs, or an existing test module)
    commit(upstream_clone, {lacked: "upstream's own file\n"}, "Upstream file")
    git(upstream_clone, "tag", "-f", "1.0")
    git(upstream_clone, "checkout", "-q", "-b", "base")
    git(upstream_clone, "checkout", "-q", "-b", "series")
    git(upstream_clone, "am", "-q", *sorted(str(p) for p in synthetic.ws.patches.glob("*.patch")))
    commit(upstream_clone, {"src/fakelib/core.py": "def answer():\n    return 42  # why\n",
                            lacked: "upstream's own file\nchanged by the series\n"}, DOCUMENTED)  # fmt: skip
    _in_git(synthetic.ws.patches)  # another tree's export: this one may replace it once git holds it
    export_series(upstream_clone, synthetic.ws.patches, branch="series")
    patch = synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch"
    git(synthetic.tree, "am", "-q", f"--exclude={lacked}", str(patch))  # what `apply` does on the sdist base
    commit(synthetic.tree, {lacked: "a placeholder\n"}, "Placeholder")  # now the sdist tree has a file there
    before = files_of(synthetic.ws.patches)

    with pytest.raises(
        SeriesError, match=rf"would drop 0003-Add-a-docstring-and-document-it.patch's hunks for {lacked}"
    ):
        export_series(synthetic.tree, synthetic.ws.patches, branch="series", lacks=LACKS)

    assert files_of(synthetic.ws.patches) == before


def _snapshot(patches_dir):
    """The series as a reader sees it: the series file and every patch file (the staging folder aside)."""
    return {p.name: p.read_bytes() for p in patches_dir.iterdir() if p.is_file()}


def _rework(tree):
    """A new form of the synthetic series: 0001 reworded (a new name), 0002 as it was, a new 0003."""
    git(tree, "checkout", "-q", "-B", "series", "base")
    commit(tree, {"src/fakelib/core.py": "def answer():\n    return 42\n"}, "Fix the answer properly")
    changelog = RELEASE_FILES["src/fakelib/CHANGELOG.md"].replace("-\n", "- Fixed the answer\n")
    commit(tree, {"src/fakelib/CHANGELOG.md": changelog}, "Add a CHANGELOG entry\n\nUpstream-Status: Pending")
    commit(tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")


def test_an_export_interrupted_anywhere_leaves_the_old_series_or_the_new_one_and_a_re_run_completes_it(
    synthetic, monkeypatch
):
    import os
    import shutil
    from pathlib import Path

    patches, record = synthetic.ws.patches, synthetic.tree / ".git" / "patchseries-base"
    old, held = _snapshot(patches), record.read_bytes()  # the series, and the tree's record that it last held it
    _rework(synthetic.tree)
    export_series(synthetic.tree, patches, branch="series")
    new = _snapshot(patches)
    assert old != new
    for name, data in old.items():  # back to the old series
        (patches / name).write_bytes(data)
    for name in set(new) - set(old):
        (patches / name).unlink()
    record.write_bytes(held)

    steps = {"count": 0, "stop_at": 0}

    def interrupting(real):
        def step(*args, **kwargs):
            steps["count"] += 1
            if steps["count"] == steps["stop_at"]:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        return step

    for name, real in (("replace", os.replace), ("rename", os.rename), ("unlink", os.unlink)):
        monkeypatch.setattr(os, name, interrupting(real))
    monkeypatch.setattr(shutil, "move", interrupting(shutil.move))
    monkeypatch.setattr(Path, "unlink", interrupting(Path.unlink))
    monkeypatch.setattr(Path, "write_text", interrupting(Path.write_text))
    interrupted = 0
    while True:
        steps["count"], steps["stop_at"] = 0, steps["stop_at"] + 1
        try:
            export_series(synthetic.tree, patches, branch="series")
        except KeyboardInterrupt:
            interrupted += 1
        else:
            break
        steps["stop_at"], saved = 0, steps["stop_at"]  # no interrupts while the series is read and restored
        read_series(synthetic.ws.series_file)  # what `status`, `apply` and `test` read
        state = _snapshot(patches)
        assert state in (old, new), f"a mix after an interrupt at step {saved}: {sorted(state)}"
        if state == new:
            for name, data in old.items():
                (patches / name).write_bytes(data)
            for name in set(new) - set(old):
                (patches / name).unlink()
            record.write_bytes(held)
        steps["stop_at"] = saved
    assert interrupted >= 3
    assert _snapshot(patches) == new
    assert sorted(p.name for p in patches.iterdir() if p.is_dir()) == []


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGKILL"])
def test_an_export_stopped_while_renaming_in_puts_back_the_old_series_or_a_rerun_completes_it(
    synthetic, tmp_path, signame
):
    patches = synthetic.ws.patches
    _rework(synthetic.tree)
    before = files_of(patches)

    proc = run_signalled(
        synthetic, tmp_path, f"export-switch:{signame}", "export", "--workdir", str(synthetic.ws.workdir),
        "--author", "New Person <new@example.org>",  # every patch changes: the first renamed in is a new one
    )  # fmt: skip

    if signame == "SIGTERM":
        assert proc.returncode == 130, proc.stderr
        assert files_of(patches) == before
    else:
        assert proc.returncode == -9
        assert "was cut short" in one_error(synthetic.run("apply"))  # a reader of the series sees it, refuses
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.2'\n"}, "Another change")  # another export:
    rerun = synthetic.run("export")  # what the killed one renamed in is the tool's, not "yours"
    assert rerun.returncode == 0, rerun.stderr
    assert [p.name for p in patches.iterdir() if p.is_dir()] == []
    assert _drift(synthetic) == []
    assert synthetic.run("apply").returncode == 0


def test_a_cut_short_export_without_its_tree_is_cleared_by_the_printed_remedy(synthetic, tmp_path):
    _rework(synthetic.tree)
    args = ("export", "--workdir", str(synthetic.ws.workdir))
    assert run_signalled(synthetic, tmp_path, "export-switch:SIGKILL", *args).returncode == -9
    shutil.rmtree(synthetic.tree)  # the tree is gone: export cannot run again

    error = one_error(synthetic.run("apply"))

    assert shell(between(error, "`rm -r ", "`")[1:]).returncode == 0
    assert synthetic.run("apply").returncode == 0


def test_a_refused_export_after_a_cut_short_one_leaves_the_series_marked_as_cut_short(synthetic, tmp_path):
    _rework(synthetic.tree)
    args = ("export", "--workdir", str(synthetic.ws.workdir))
    assert run_signalled(synthetic, tmp_path, "export-switch:SIGKILL", *args).returncode == -9
    commit(synthetic.tree, {CORE: "def answer():\n    return 46\n"}, "  Leading spaces")  # a commit export refuses

    assert "`git am` would read its patch's subject otherwise" in one_error(synthetic.run("export"))
    assert "was cut short" in one_error(synthetic.run("apply"))  # the half-switched series is still refused


def test_check_sees_a_cr_added_to_one_line_of_a_patch(synthetic):
    patch = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    lines = patch.read_bytes().split(b"\n")
    subject = next(i for i, line in enumerate(lines) if line.startswith(b"Subject:"))
    lines[subject] += b"\r"  # not a CRLF file (its From line has none): a byte export does not write
    patch.write_bytes(b"\n".join(lines))

    check = synthetic.run("check")

    assert check.returncode == 1, check.stdout + check.stderr
    assert f"drift: {patch.name} differs from a fresh export" in check.stdout


def test_a_persons_file_or_link_named_like_exports_staging_is_neither_refused_nor_removed(synthetic, tmp_path):
    (tmp_path / "notes").mkdir()
    (synthetic.ws.patches / ".patchseries-export-notes").symlink_to(tmp_path / "notes")
    (synthetic.ws.patches / ".patchseries-export-log.txt").write_text("mine\n")

    assert synthetic.run("apply").returncode == 0
    assert synthetic.run("export").returncode == 0
    assert (synthetic.ws.patches / ".patchseries-export-notes").is_symlink()
    assert (synthetic.ws.patches / ".patchseries-export-log.txt").read_text() == "mine\n"


def _to_crlf(path):
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def test_a_crlf_series_file_is_drift(synthetic):
    _to_crlf(synthetic.ws.series_file)

    assert read_series(synthetic.ws.series_file)  # still readable
    assert _drift(synthetic) == [
        f"series file has CRLF line endings, which export does not write; convert it back with `perl -pi -e "
        f"'s/\\r$//' {synthetic.ws.series_file}`",
        f"to write the series again (a copy of each file changed by hand kept): `{TOOL} export`",
    ]


def test_a_crlf_patch_is_named_as_crlf_and_the_rest_is_still_checked(synthetic):
    first, second = sorted(synthetic.ws.patches.glob("*.patch"))
    _to_crlf(first)
    second.write_text(second.read_text().replace("+- Fixed the answer", "+- Fixed the answer!"))  # a hand edit

    problems = _drift(synthetic)

    assert problems == [
        f"{first.name} has CRLF line endings, which export does not write; convert it back with `perl -pi -e "
        f"'s/\\r$//' {first}`",
        f"{second.name} differs from a fresh export",
        f"to write the series again (a copy of each file changed by hand kept): `cp {second} {second}.mine && "
        f"{TOOL} export`",
    ]


def _authors(patches_dir):
    return {
        line for p in patches_dir.glob("*.patch") for line in p.read_text().splitlines() if line.startswith("From:")
    }


def test_export_author_sets_every_from_line_keeps_the_rest_and_passes_the_drift_check(synthetic):
    before = {p.name: p.read_text() for p in synthetic.ws.patches.glob("*.patch")}
    export = ("export", "--tree", str(synthetic.tree))

    proc = synthetic.run(*export, "--author", "José Réviewer <jose@example.com>")

    assert proc.returncode == 0, proc.stderr
    assert _authors(synthetic.ws.patches) == {"From: =?UTF-8?q?Jos=C3=A9=20R=C3=A9viewer?= <jose@example.com>"}
    for name, text in before.items():  # only the From: line differs: dates, message and diff are the commits'
        after = (synthetic.ws.patches / name).read_text()
        assert [line for line in after.splitlines() if not line.startswith("From:")] == [
            line for line in text.splitlines() if not line.startswith("From:")
        ]
    assert git(synthetic.tree, "log", "-1", "--format=%ae", "series") == "author@example.com"  # branch unchanged
    assert _drift(synthetic) == []  # git am keeps that author, so a fresh export is the same


def test_export_refuses_a_placeholder_author_and_writes_nothing(synthetic, monkeypatch):
    before = {p.name: p.read_bytes() for p in synthetic.ws.patches.glob("*")}
    git(synthetic.tree, "commit", "-q", "--amend", "--no-edit", "--author=Series <series@invalid>")
    export = ("export", "--tree", str(synthetic.tree))

    by_default = synthetic.run(*export)
    given = synthetic.run(*export, "--author", "Someone <someone@tests.invalid>")
    malformed = synthetic.run(*export, "--author", "no address")
    after_refusals = {p.name: p.read_bytes() for p in synthetic.ws.patches.glob("*")}
    monkeypatch.setenv("PATCHSERIES_AUTHOR", "Env Author <env@example.com>")
    from_env = synthetic.run(*export)

    assert by_default.returncode == 2
    assert "placeholder author Series <series@invalid>; pass --author" in by_default.stderr
    assert given.returncode == malformed.returncode == 2
    assert "@invalid placeholder" in given.stderr
    assert "is not an identity of the form 'Name <email>'" in malformed.stderr
    assert from_env.returncode == 0, from_env.stderr
    assert _authors(synthetic.ws.patches) == {"From: Env Author <env@example.com>"}
    assert after_refusals == before


def _stop_a_rebase_at_edit(tree):
    """``git rebase -i`` stopped at ``edit`` of the first commit, which is reworded: branch series has not moved."""
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": "sed -i 1s/^pick/edit/", "GIT_EDITOR": "true"}
    subprocess.run(["git", "rebase", "-q", "-i", "base"], cwd=tree, env=env, check=True, capture_output=True)
    git(tree, "commit", "-q", "--amend", "-m", "Fix the answer, reworded")


@pytest.mark.parametrize("stop", [_stop_a_rebase_at_edit, lambda tree: git(tree, "bisect", "start")])
def test_export_refuses_a_rebase_or_bisect_in_progress(synthetic, stop):
    """With a ``git rebase -i`` stopped in the tree, ``export`` refuses instead of exporting the old series."""
    before = {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()}
    stop(synthetic.tree)

    proc = synthetic.run("export", "--drop-missing", "--tree", str(synthetic.tree))

    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(f"error: a git rebase is in progress in {synthetic.tree}; finish it") or (
        proc.stderr.startswith(f"error: a git bisect is in progress in {synthetic.tree}; finish it")
    )
    assert proc.stdout == ""
    assert {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()} == before


def test_checks_remedy_runs_as_printed_where_no_edit_tree_exists_yet(synthetic, upstream_series, tmp_path):
    pin = synthetic.ws.pin_file  # `edit --git` clones the pinned git_url: here the upstream clone
    pin.write_text(pin.read_text().replace("https://git.invalid/fakelib.git", str(upstream_series)))
    patch = synthetic.ws.patches / "0003-Add-a-docstring-and-document-it.patch"
    exported = patch.read_bytes()
    core = exported.decode().split("diff --git a/src/fakelib/core.py", 1)[1]
    index = next(line for line in core.splitlines() if line.startswith("index "))  # one hunk's index line changed
    old, new = index.split()[1].split("..")
    patch.write_bytes(exported.replace(index.encode(), index.replace(new, "deadbee"[: len(new)]).encode(), 1))
    options = ("--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "fresh"))  # no edit tree there

    checked = cli("check", *options)

    assert checked.returncode == 1, checked.stdout + checked.stderr
    drift = [line for line in checked.stdout.splitlines() if line.startswith("drift:")]
    assert len(drift) == 2, checked.stdout  # the patch, and the command that writes the series again
    remedy = drift[1].split("`")[1]
    assert f"{TOOL} edit --git" in remedy
    rerun = subprocess.run(remedy, shell=True, capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, f"{remedy}\n{rerun.stdout}{rerun.stderr}"
    assert patch.read_bytes() == exported
    again = cli("check", *options)
    assert again.returncode == 0, again.stdout + again.stderr


OTHER_BASE = "a" * 40


def test_export_into_a_series_of_another_base_is_refused_and_its_remedy_runs(synthetic, tmp_path):
    forward = tmp_path / "forward"  # a series pinned to an upstream commit (as patches/master is), with one patch
    forward.mkdir()
    pin = 'name = "fakelib"\nversion = "master"\ngit_url = "https://git.invalid/f.git"\n'
    (forward / "base.toml").write_text(f'[base]\n{pin}commit = "{OTHER_BASE}"\n')
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    shutil.copy(first, forward / first.name)
    (forward / "series").write_text(f"{first.name}\n")
    before = files_of(forward)

    proc = cli(
        "export", "--patches", str(forward), "--workdir", str(synthetic.ws.workdir), "--tree", str(synthetic.tree)
    )

    error = one_error(proc)
    assert f"pins fakelib {OTHER_BASE}" in error
    assert "nothing was written" in error
    assert files_of(forward) == before
    commit(synthetic.tree, {CORE: "def answer():\n    return 43\n"}, "Change the answer\n\nUpstream-Status: Pending")
    command = between(error, f"{TOOL} export")
    assert shlex.split(command)[:3] == [sys.executable, "-m", "patchseries"], command
    remedy = shell(command)
    assert remedy.returncode == 0, remedy.stderr
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3


def _linked_worktree_on_series(synthetic: Synthetic, tmp_path: Path) -> Path:
    linked = tmp_path / "linked"
    git(synthetic.tree, "checkout", "-q", "--detach")
    git(synthetic.tree, "worktree", "add", "-q", str(linked), "series")
    return linked


def test_export_refuses_a_rebase_stopped_in_a_linked_worktree(synthetic, tmp_path):
    linked = _linked_worktree_on_series(synthetic, tmp_path)
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": "sed -i 1s/^pick/edit/"}
    rebase = ["git", "-c", "user.name=P", "-c", "user.email=p@example.com", "rebase", "-q", "-i", "base"]
    subprocess.run(rebase, cwd=linked, env=env, capture_output=True, check=True)
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export"))

    assert f"a git rebase is in progress in {linked}" in error
    assert files_of(synthetic.ws.patches) == before


def test_export_refuses_uncommitted_edits_in_a_linked_worktree(synthetic, tmp_path):
    linked = _linked_worktree_on_series(synthetic, tmp_path)
    (linked / CORE).write_text("def answer():\n    return 44\n")

    error = one_error(synthetic.run("export"))

    assert f"{linked} has uncommitted changes ({CORE})" in error


@pytest.mark.parametrize("checkout", [["-b", "wip"], ["--detach"], ["--detach", "series~1"]])
def test_export_refuses_commits_at_head_not_on_the_branch_and_its_remedies_run(synthetic, checkout):
    git(synthetic.tree, "checkout", "-q", *checkout)  # on top of series, or off it (a fix for its first patch)
    commit(synthetic.tree, {"src/fakelib/more.py": "X = 1\n"}, "More work\n\nUpstream-Status: Pending")
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export"))

    assert "1 commit(s) on" in error
    assert "which export would leave out" in error
    assert files_of(synthetic.ws.patches) == before
    assert shell(between(error, "git -C ")).returncode == 0  # the remedy, as printed
    if "series~1" in checkout:  # replayed on series: now on top of it, the next refusal's remedy moves series there
        assert shell(between(one_error(synthetic.run("export")), "git -C ")).returncode == 0
    assert synthetic.run("export").returncode == 0
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3


@pytest.mark.parametrize("checkout", [["--detach"], ["-c", "fix"]])
def test_commits_forked_off_the_branch_in_the_tree_exported_can_be_kept_apart(synthetic, checkout):
    git(synthetic.tree, "switch", "-q", *checkout, "series~1")
    commit(synthetic.tree, {"src/fakelib/more.py": "X = 1\n"}, "Work kept apart")
    mine = git(synthetic.tree, "rev-parse", "HEAD")

    error = one_error(synthetic.run("export"))

    assert shell(between(error, "keep them apart (")[len("keep them apart (") :]).returncode == 0  # as printed
    assert synthetic.run("export").returncode == 0
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 2
    assert git(synthetic.tree, "branch", "--contains", mine)  # on a branch


def test_a_branch_forked_off_the_series_in_another_worktree_is_not_refused(synthetic, tmp_path):
    git(synthetic.tree, "worktree", "add", "-q", "-b", "test", str(tmp_path / "stale"), "series~1")  # a stale checkout
    commit(tmp_path / "stale", {"src/fakelib/more.py": "X = 1\n"}, "Try something")

    assert synthetic.run("export").returncode == 0


def test_commits_on_a_branch_of_a_linked_worktree_while_series_is_checked_out_are_refused_and_the_remedy_runs(
    synthetic, tmp_path
):
    linked = tmp_path / "wip"
    git(synthetic.tree, "worktree", "add", "-q", "-b", "wip", str(linked), "series")
    commit(linked, {CORE: "def answer():\n    return 45\n"}, "More work\n\nUpstream-Status: Pending")

    error = one_error(synthetic.run("export"))

    assert shell(between(error, "git -C ")).returncode == 0  # as printed: series moves where it is checked out
    assert synthetic.run("export").returncode == 0
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3


@pytest.mark.parametrize("moved", [True, False])
def test_a_worktree_git_cannot_find_is_refused_and_the_remedy_runs(synthetic, tmp_path, moved):
    git(synthetic.tree, "checkout", "-q", "-b", "wip")
    linked = tmp_path / "linked"
    git(synthetic.tree, "worktree", "add", "-q", str(linked), "series")
    commit(linked, {CORE: "def answer():\n    return 45\n"}, "More work\n\nUpstream-Status: Pending")
    if moved:  # a worktree moved with mv: its commits and checkout must not go unseen, nor be pruned by a remedy
        linked.rename(tmp_path / "moved")
    else:
        shutil.rmtree(linked)

    error = one_error(synthetic.run("export"))

    assert f"has a worktree git cannot find at {linked}: if you moved it, `git worktree repair` in it" in error
    remedy = shell("git worktree repair", cwd=tmp_path / "moved") if moved else shell(between(error, "git -C ", "`"))
    assert remedy.returncode == 0, remedy.stderr
    assert synthetic.run("export").returncode == 0
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3
    assert not moved or git(tmp_path / "moved", "log", "-1", "--format=%s") == "More work"


def test_a_worktree_whose_path_holds_a_unicode_line_separator_is_found(synthetic, tmp_path):
    """git ends its lines with "\n" alone: a U+2028 in a path (a name a person may paste) is no line end."""
    git(synthetic.tree, "checkout", "-q", "-b", "wip")
    git(synthetic.tree, "worktree", "add", "-q", str(tmp_path / "linked\u2028copy"), "series")

    assert synthetic.run("export").returncode == 0


def test_a_persons_git_configuration_never_changes_the_patches(synthetic, tmp_path, monkeypatch):
    config = tmp_path / "gitconfig"
    config.write_text("[format]\n\tsignOff = true\n[diff]\n\tcontext = 5\n\talgorithm = histogram\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    git(synthetic.tree, "config", "format.signOff", "true")  # the edit tree's own configuration too
    git(synthetic.tree, "config", "diff.context", "6")
    git(synthetic.tree, "config", "core.bigFileThreshold", "1")  # every file a binary patch
    (tmp_path / "xdg" / "git").mkdir(parents=True)
    (tmp_path / "xdg" / "git" / "attributes").write_text("*.py -diff\n")  # the person's default attributes file
    (synthetic.tree / ".git" / "info" / "attributes").write_text("* -diff\n")  # and the tree's own
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    before = files_of(synthetic.ws.patches)

    exported = synthetic.run("export")
    checked = synthetic.run("check")

    assert exported.returncode == 0, exported.stderr
    assert files_of(synthetic.ws.patches) == before
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_diff_attribute_the_series_commits_writes_text_patches_that_check_agrees_with(synthetic):
    commit(
        synthetic.tree,
        {".gitattributes": "*.py -diff\n", "src/fakelib/core.py": "def answer():\n    return 43\n"},
        "Mark",
    )

    exported = synthetic.run("export")
    checked = synthetic.run("check")

    assert exported.returncode == 0, exported.stderr
    assert "+    return 43" in (synthetic.ws.patches / "0003-Mark.patch").read_text()
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("message", "read"),
    [
        *(
            (f"Subject\n\nBody\n{line}\nafter\n", "message")
            for line in ("---", "--- more", "diff --git a/x b/x", "Index: x")
        ),
        ("[fabric] Keep the kwargs\n", "subject"),
        ("Re: the answer\n", "subject"),
        ("Credit\n\nFrom: Alice <alice@example.com>\nreported it\n", "author and message"),
        ("Credit\n\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nreported it\n", "message"),
        ("A subject\nover two lines\n", "subject and message"),  # its file is named by the first line
        ("  Guard the toggle\n", "subject"),  # git am strips the spaces: check would drift for good
        ("Quote the log\n\nFrom runner-7 at Tue Jan  2 10:12:30 2024 the step hangs.\n", "message"),  # a new mail
    ],
)
def test_export_refuses_a_commit_that_git_am_would_read_otherwise_from_its_patch(synthetic, message, read):
    commit(synthetic.tree, {CORE: "def answer():\n    return 46\n"}, message)
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export"))

    assert f"`git am` would read its patch's {read} otherwise" in error
    assert files_of(synthetic.ws.patches) == before


@pytest.mark.parametrize(
    ("message", "encoding"),
    [(b"Guard the toggle\r\n\r\nBody.\r\n", "UTF-8"), (b"Guard caf\xe9\n\nBody caf\xe9.\n", "cp-1252")],
)  # CRs git am drops; an encoding iconv does not know, whose bytes git am's commit takes as Latin-1
def test_a_message_git_am_would_commit_as_other_bytes_is_refused(synthetic, message, encoding):
    (synthetic.tree / CORE).write_text("def answer():\n    return 46\n")
    git(synthetic.tree, "add", CORE)
    command = ["git", "-c", f"i18n.commitEncoding={encoding}", "commit", "-q", "--cleanup=verbatim", "-F", "-"]
    subprocess.run(command, cwd=synthetic.tree, input=message, check=True)

    assert "`git am` would read its patch's subject and message otherwise" in one_error(synthetic.run("export"))


@pytest.mark.parametrize(
    "message", [b"Squash-merged\n\nBody without a final newline", b"Guard the toggle\xe2\x80\xa8twice\n\nBody.\n"]
)  # as GitHub's squash merges write it; a U+2028 in the subject (no line break for git)
def test_a_message_git_am_gives_back_as_it_is_is_exported(synthetic, message):
    (synthetic.tree / CORE).write_text("def answer():\n    return 46\n")
    git(synthetic.tree, "add", CORE)
    subprocess.run(
        ["git", "commit", "-q", "--cleanup=verbatim", "-F", "-"], cwd=synthetic.tree, input=message, check=True
    )

    exported = synthetic.run("export")

    assert exported.returncode == 0, exported.stderr
    assert synthetic.run("check").returncode == 0


def test_a_cr_inside_a_message_line_is_kept_under_another_author(synthetic):
    (synthetic.tree / CORE).write_text("def answer():\n    return 46\n")
    git(synthetic.tree, "commit", "-qam", "Guard the toggle\n\nEpoch 0:  50%\rEpoch 0: 100%")  # a pasted progress bar

    assert synthetic.run("export", "--author", "Bob Example <bob@example.com>").returncode == 0
    assert b"Epoch 0:  50%\rEpoch 0: 100%" in sorted(synthetic.ws.patches.glob("*.patch"))[-1].read_bytes()
    assert synthetic.run("check").returncode == 0


def test_a_mode_change_the_trees_own_settings_ignore_is_not_called_uncommitted(synthetic):
    git(synthetic.tree, "config", "core.fileMode", "false")  # as on a shared drive: git status shows nothing
    (synthetic.tree / CORE).chmod(0o755)

    assert synthetic.run("export").returncode == 0


def test_an_author_git_am_reads_otherwise_is_refused_and_another_author_exports(synthetic):
    (synthetic.tree / CORE).write_text("def answer():\n    return 46\n")
    git(synthetic.tree, "-c", 'user.name=Jürgen "JD" Doe', "commit", "-qam", "Quote the author")

    error = one_error(synthetic.run("export"))

    assert "`git am` would read its patch's author otherwise" in error
    assert "(--author or PATCHSERIES_AUTHOR, or amend the commit's)" in error
    assert synthetic.run("export", "--author", "Jürgen Doe <jd@example.com>").returncode == 0


def test_an_author_git_would_store_otherwise_is_refused(synthetic):
    error = one_error(synthetic.run("export", "--author", "Bob Smith Jr. <bob@example.com>"))  # git drops the "."

    assert "`git am` would read its patch's author otherwise ('Bob Smith Jr <bob@example.com>'" in error


def test_an_author_given_for_a_commit_labelled_latin1_is_written_as_given(synthetic):
    (synthetic.tree / CORE).write_text("def answer():\n    return 46\n")
    git(synthetic.tree, "-c", "i18n.commitEncoding=ISO-8859-1", "commit", "-qam", "Guard the toggle")

    assert synthetic.run("export", "--author", "José Müller <jose@example.com>").returncode == 0
    assert "From: =?UTF-8?q?Jos=C3=A9=20M=C3=BCller?=" in sorted(synthetic.ws.patches.glob("*.patch"))[-1].read_text()


def test_a_non_ascii_author_and_subject_come_back_whatever_encoding_the_tree_sets(synthetic):
    (synthetic.tree / CORE).write_text("def answer():\n    return 46\n")
    git(synthetic.tree, "-c", "user.name=Zoë Ünïcode", "commit", "-qam", "Fix “quoted” naïve\n\nBody: text\n")
    git(synthetic.tree, "config", "i18n.commitEncoding", "ISO-8859-1")  # the tree's own configuration

    assert synthetic.run("export").returncode == 0
    assert "charset=UTF-8" in sorted(synthetic.ws.patches.glob("*.patch"))[-1].read_text()
    assert synthetic.run("check").returncode == 0


def test_an_edit_tree_of_a_checkout_exports_after_the_checkout_moved(synthetic, upstream_clone, tmp_path):
    shutil.rmtree(synthetic.tree.parent)
    made = synthetic.run("edit", "--checkout", str(upstream_clone))
    assert made.returncode == 0, made.stderr
    tree = Path(made.stdout.strip())
    commit(tree, {CORE: "def answer():\n    return 47\n"}, "Change\n\nUpstream-Status: Pending")
    upstream_clone.rename(tmp_path / "moved")

    proc = synthetic.run("export", "--tree", str(tree))

    assert proc.returncode == 0, proc.stderr
    assert "exported 3 patches" in proc.stdout


def test_an_author_from_the_environment_is_named_as_such(synthetic, monkeypatch):
    monkeypatch.setenv("PATCHSERIES_AUTHOR", "x")

    error = one_error(synthetic.run("export"))

    assert "PATCHSERIES_AUTHOR='x' is not an identity" in error
    assert "--author" not in error


def test_export_refuses_an_author_with_a_control_character(synthetic):
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export", "--author", "Eve\nBcc: x <eve@example.com>"))

    assert "is not an identity" in error
    assert files_of(synthetic.ws.patches) == before


def test_export_over_a_series_naming_a_missing_patch_says_how_to_fix_it(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    data = first.read_bytes()
    first.unlink()

    error = one_error(synthetic.run("export"))

    assert error.endswith(f"does not exist; restore that file, or remove line 2 from {synthetic.ws.patches / 'series'}")
    first.write_bytes(data)
    assert synthetic.run("export").returncode == 0  # the remedy, then the export


def test_export_of_a_branch_not_built_on_base_is_refused(synthetic):
    git(synthetic.tree, "checkout", "-q", "--orphan", "other")
    git(synthetic.tree, "commit", "-q", "-m", "Another history")
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export", "--branch", "other"))

    assert "is not built on 'base'" in error
    assert "nothing was written" in error
    assert files_of(synthetic.ws.patches) == before


def test_export_refuses_a_branch_that_is_a_revision_expression(synthetic):
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export", "--branch", "series^"))

    assert "--branch 'series^' is not a branch name" in error
    assert files_of(synthetic.ws.patches) == before


def test_export_refuses_an_empty_commit_naming_it(synthetic):
    git(synthetic.tree, "commit", "-q", "--allow-empty", "-m", "Nothing in it")
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export"))

    assert "(Nothing in it) changes no file" in error
    assert f"git -C {synthetic.tree} rebase -i base" in error
    assert files_of(synthetic.ws.patches) == before
    git(synthetic.tree, "reset", "-q", "--hard", "HEAD~1")  # what `drop` does
    assert synthetic.run("export").returncode == 0


def test_export_over_a_dangling_link_says_how_to_make_a_tree(synthetic):
    default = synthetic.tree
    shutil.rmtree(default)
    default.symlink_to(default.parent / "gone")

    error = one_error(synthetic.run("export"))

    assert f"there is no tree to export at {default}" in error
    assert shell(between(error, "mv ")).returncode == 0
    made = shell(between(error, f"{TOOL} edit", "`"))
    assert made.returncode == 0, made.stderr
    assert (default / ".git").is_dir()


def test_export_from_a_tree_that_does_not_exist_says_so(synthetic, tmp_path):
    missing = tmp_path / "nonexist"

    error = one_error(synthetic.run("export", "--tree", str(missing)))

    assert error.startswith(f"error: --tree {missing} does not exist;"), error
    assert "or pass --tree" not in error


def test_a_files_crlf_line_endings_survive_export_and_apply(synthetic):
    (synthetic.tree / "src/fakelib/win.bat").write_bytes(b"a\r\nb\r\n")
    with (synthetic.tree / CORE).open("ab") as core:
        core.write(b"x = 1\r\n")
    git(synthetic.tree, "add", "-A")
    git(synthetic.tree, "commit", "-q", "-m", "Lines ending in CR\n\nUpstream-Status: Pending")

    assert synthetic.run("export").returncode == 0
    checked = synthetic.run("check")
    applied = synthetic.run("apply")

    assert checked.returncode == 0, checked.stdout
    assert applied.returncode == 0, applied.stderr
    tree = synthetic.ws.trees / "sdist-1.0"
    assert (tree / "src/fakelib/win.bat").read_bytes() == b"a\r\nb\r\n"
    assert (tree / CORE).read_bytes() == (synthetic.tree / CORE).read_bytes()


def _in_git(patches):
    """patches/ committed in a git repository, as the project holds it."""
    git(patches, "init", "-q")
    git(patches, "add", "-A")
    git(patches, "commit", "-q", "-m", "The series")


def _mine(patches, change):
    """A change of the person's in patches/ that an export of the tree would lose."""
    first, second = sorted(patches.glob("0*.patch"))
    if change == "a patch of theirs listed in series":
        (patches / "0003-my-own.patch").write_bytes(second.read_bytes())  # a byte copy under a name of their own
        (patches / "series").write_text((patches / "series").read_text() + "0003-my-own.patch\n")
        return patches / "0003-my-own.patch"
    if change == "a hand edit":
        first.write_text(first.read_text().replace("+    return 42", "+    return 43"))
        return first
    if change == "a changed series file":
        (patches / "series").write_text((patches / "series").read_text() + "# my note\n")
        return patches / "series"
    mine = patches / "0003-Bump-the-version.patch"  # a file series does not list, at a name export writes
    mine.write_text("my own notes\n")
    return mine


CHANGES = ["a patch of theirs listed in series", "a hand edit", "a changed series file", "an unlisted file overwritten"]


@pytest.mark.parametrize(
    "in_git", [True, False, "ignored", "*.patch"], ids=["in_git", "not_in_git", "in_a_repo_that_ignores_it", "*.patch"]
)
@pytest.mark.parametrize("change", CHANGES)
def test_export_refuses_to_lose_a_change_git_does_not_hold_and_its_remedy_commits_it(synthetic, change, in_git):
    patches = synthetic.ws.patches
    if in_git == "ignored":
        git(patches.parent, "init", "-q")
        (patches.parent / ".gitignore").write_text(f"{patches.name}/\n{synthetic.ws.workdir.name}/\n")
    elif in_git:
        _in_git(patches)
    if in_git == "*.patch":  # a global or the repository's ignore rule, common for *.patch
        (patches / ".gitignore").write_text("*.patch\n")
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    mine = _mine(patches, change)
    data, before = mine.read_bytes(), files_of(patches)

    error = one_error(synthetic.run("export"))

    assert f"export would overwrite or remove {mine}" in error
    assert "changes of yours that git does not hold" in error
    assert error.endswith("and re-run; nothing was written")
    assert files_of(patches) == before
    committed = shell(error.split("`")[1])
    assert committed.returncode == 0, committed.stderr
    exported = synthetic.run("export")
    assert exported.returncode == 0, exported.stderr
    assert git(patches, "show", f"HEAD:{mine.name}") == data.decode().rstrip("\n")  # git holds their bytes


def test_a_link_to_a_hand_edited_patch_is_no_copy_of_it(synthetic):
    """A link in patches/ to the patch at stake holds no bytes of its own: the hand edit is still refused, and kept."""
    patches = synthetic.ws.patches
    _in_git(patches)
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    edited = _mine(patches, "a hand edit")
    (patches / "current.patch").symlink_to(edited.name)
    data = edited.read_bytes()

    error = one_error(synthetic.run("export"))

    assert f"export would overwrite or remove {edited}" in error
    assert edited.read_bytes() == data


def test_export_replaces_what_the_last_export_wrote_and_what_git_holds(synthetic):
    patches = synthetic.ws.patches
    _in_git(patches)
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    assert synthetic.run("export").returncode == 0  # over the committed series
    git(synthetic.tree, "commit", "-q", "--amend", "-m", "Bump the version, reworded")

    proc = synthetic.run("export")  # over its own uncommitted output

    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in patches.glob("*.patch"))[-1] == "0003-Bump-the-version-reworded.patch"


@pytest.mark.parametrize("remedy_index", [0, 1], ids=["convert_back", "reexport"])
@pytest.mark.parametrize("converted", ["series", "patch"])
def test_checks_drift_remedies_run_as_written_with_the_runs_options(synthetic, tmp_path, converted, remedy_index):
    """Both remedies of a CRLF drift work as written in a person's shell: converting the file back (which needs no
    edit tree) and re-exporting with the run's own options."""
    env, here = without_the_tool(tmp_path)
    target = synthetic.ws.series_file if converted == "series" else sorted(synthetic.ws.patches.glob("*.patch"))[0]
    exported = target.read_bytes()
    target.write_bytes(exported.replace(b"\n", b"\r\n"))  # an editor's or git's autocrlf conversion

    checked = synthetic.run("check")

    assert checked.returncode == 1, checked.stdout + checked.stderr
    drift = [line for line in checked.stdout.splitlines() if line.startswith("drift:")]
    assert len(drift) == 2, checked.stdout
    convert, reexport = (line.split("`")[1] for line in drift)
    assert str(target) in convert, convert
    # its own series and work directory (run without them, it would act on the project's patches/)
    assert f"--patches {synthetic.ws.patches}" in reexport, reexport
    assert f"--workdir {synthetic.ws.workdir}" in reexport, reexport
    remedy = (convert, reexport)[remedy_index]
    rerun = shell(remedy, cwd=here, env=env)
    assert rerun.returncode == 0, f"{remedy}\n{rerun.stderr}"
    assert target.read_bytes() == exported
    again = synthetic.run("check")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "ok: 2 patches equal a fresh export" in again.stdout


def _hand_edit(patches: Path, change: str) -> list[Path]:
    """What a person changes by hand in patches/: the files changed."""
    first, second = sorted(patches.glob("*.patch"))
    if change == "the series file":
        (patches / "series").write_text((patches / "series").read_text() + "# my note\n")
        return [patches / "series"]
    if change == "a subject line":
        change_patches(patches)
        return [second]
    first.write_text(first.read_text().replace("+    return 42", "+    return 43"))
    second.write_text(second.read_text().replace("+- Fixed the answer", "+- Fixed the answer!"))
    return [first, second]


@pytest.mark.parametrize("change", ["the series file", "two patches", "a subject line"])
def test_checks_one_remedy_fixes_all_it_found_as_printed_and_keeps_the_hand_edits(synthetic, change):
    changed = _hand_edit(synthetic.ws.patches, change)
    edits = {path: path.read_bytes() for path in changed}

    checked = synthetic.run("check")

    assert checked.returncode == 1, checked.stdout + checked.stderr
    *found, fix = [line for line in checked.stdout.splitlines() if line.startswith("drift:")]
    assert found, checked.stdout
    remedy = shell(fix.split("`")[1])
    assert remedy.returncode == 0, f"{fix}\n{remedy.stderr}"
    assert {path: path.with_name(f"{path.name}.mine").read_bytes() for path in changed} == edits
    again = synthetic.run("check")
    assert again.returncode == 0, again.stdout + again.stderr


def test_export_from_a_tree_older_than_the_committed_series_says_what_it_removed_and_how_to_restore_it(
    synthetic, tmp_path
):
    patches, tree, colleague = synthetic.ws.patches, synthetic.tree, tmp_path / "colleague"
    git(tmp_path, "clone", "-q", "-b", "series", str(tree), str(colleague))  # a colleague's tree, not made by edit
    git(colleague, "branch", "base", "origin/base")
    commit(colleague, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    _in_git(patches)  # what the tree exported
    export_series(colleague, patches, branch="series")
    git(patches, "add", "-A")
    git(
        patches, "commit", "-q", "-m", "Bump"
    )  # the series as committed: three patches, the third one the tree never held
    commit(tree, {CORE: "def answer():\n    return 43\n"}, "My change")

    exported, again = synthetic.run("export"), synthetic.run("export")

    assert exported.returncode == 0, exported.stderr
    (note,) = [line for line in exported.stdout.splitlines() if line.startswith("note:")]
    assert note.startswith("note: replaced or removed 0003-Bump-the-version.patch, series, which the tree"), note
    assert again.returncode == 0, again.stderr
    assert "note:" not in again.stdout, again.stdout  # the series is what the tree wrote: nothing to say
    restored = shell(note.split("`")[1])
    assert restored.returncode == 0, restored.stderr
    assert git(patches, "diff", "--stat", "HEAD", "--", "series", "*.patch") == ""  # the series as committed
    assert synthetic.run("check").returncode == 0


@pytest.mark.parametrize("change", ["a changed patch", "a dropped patch", "a reverted export"])
def test_export_from_a_tree_older_than_a_committed_change_names_what_it_undoes(synthetic, change):
    """A colleague's change to the series, pulled after the tree last held it, is not in the tree: export says it
    undid it, and the command it prints puts the change back."""
    patches = synthetic.ws.patches
    fix, entry = sorted(patches.glob("*.patch"))
    _in_git(patches)
    if change == "a reverted export":  # the tree's own export, committed, then reverted by a colleague
        commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
        assert synthetic.run("export").returncode == 0
        git(patches, "add", "-A")
        git(patches, "commit", "-q", "-m", "Bump")
        git(patches, "revert", "--no-edit", "HEAD")
        undone = "series"
    elif change == "a changed patch":
        fix.write_text(fix.read_text().replace("+    return 42", "+    return 42  # the answer"))
        git(patches, "commit", "-q", "-am", "A colleague's change")
        undone = fix.name
    else:
        git(patches, "rm", "-q", entry.name)
        (patches / "series").write_text((patches / "series").read_text().replace(f"{entry.name}\n", ""))
        git(patches, "commit", "-q", "-am", "Upstream took it")
        undone = "series"
    committed = {name: data for name, data in files_of(patches).items() if not name.startswith(".")}

    exported = synthetic.run("export")

    assert exported.returncode == 0, exported.stderr
    (note,) = [line for line in exported.stdout.splitlines() if line.startswith("note:")]
    assert undone in note.partition(", which")[0], note
    assert shell(note.split("`")[1]).returncode == 0
    assert {n: b for n, b in files_of(patches).items() if n in committed} == committed


def test_export_refuses_a_status_line_git_does_not_read_as_the_one_trailer(synthetic):
    """status, forward and the wheels would refuse the patch: export refuses it first, where it can be reworded."""
    before = files_of(synthetic.ws.patches)
    message = "Change the answer\n\nUpstream-Status: Pending\n\nUpstream-Status: Inappropriate [release only]"
    commit(synthetic.tree, {CORE: "def answer():\n    return 43\n"}, message)

    proc = synthetic.run("export", "--tree", str(synthetic.tree))

    assert one_error(proc).endswith(
        "(Change the answer): git reads 1 of its 2 Upstream-Status lines as a trailer; keep one, in the last "
        "paragraph, which holds trailers only"
    )
    assert files_of(synthetic.ws.patches) == before


def test_export_from_another_tree_keeps_what_a_removed_tree_exported_and_nobody_committed(synthetic, tmp_path):
    """The bytes an export wrote are kept by its tree: once that tree is gone, another tree's export may not replace
    them (the last export's record does not hold them for it)."""
    patches = synthetic.ws.patches
    _in_git(patches)
    other = tmp_path / "other"
    assert cli("edit", "--patches", str(patches), "--workdir", str(other)).returncode == 0  # a second tree
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    assert synthetic.run("export").returncode == 0  # not committed
    shutil.rmtree(synthetic.tree)
    mine = files_of(patches)
    (second,) = (other / "edit").iterdir()
    commit(second, {CORE: "def answer():\n    return 43\n"}, "Another change\n\nUpstream-Status: Pending")

    error = one_error(synthetic.run("export", "--tree", str(second)))

    assert error.startswith("error: export would overwrite or remove "), error
    assert files_of(patches) == mine


@pytest.mark.parametrize("when", ["not committed", "committed", "committed, then reset"])
def test_a_hand_edit_git_am_drops_is_not_held_by_a_tree_made_from_it(synthetic, when):
    """A note below a patch's `---`: a tree made from the series does not hold it (git am drops it), so export refuses
    to replace it while git does not hold it, and says it replaced it where git does."""
    patches = synthetic.ws.patches
    _in_git(patches)
    fix = patches / "0001-Fix-the-answer.patch"
    fix.write_text(fix.read_text().replace("\n---\n", "\n---\nNOTE TO SELF: benchmark this first\n", 1))
    if when != "not committed":
        git(patches, "commit", "-q", "-am", "A note")
    shutil.rmtree(synthetic.tree)
    assert synthetic.run("edit").returncode == 0
    if when == "committed, then reset":
        git(patches, "reset", "-q", "HEAD~1")

    exported = synthetic.run("export")

    if when == "committed":
        assert exported.returncode == 0, exported.stderr
        assert f"note: replaced or removed {fix.name}" in exported.stdout
    else:
        assert one_error(exported).startswith(f"error: export would overwrite or remove {fix}")
        assert "NOTE TO SELF" in fix.read_text()


@pytest.mark.parametrize("made_by", ["an older tool", "git clone"])
def test_a_tree_without_a_record_of_what_it_holds_replaces_only_its_own_last_export(synthetic, tmp_path, made_by):
    """A tree the tool did not record (an older tool's, a clone) holds what it last exported there, not another's."""
    patches, old = synthetic.ws.patches, tmp_path / "old"
    _in_git(patches)
    if made_by == "git clone":
        git(tmp_path, "clone", "-q", "--branch", "series", str(synthetic.tree), str(old))
        git(old, "branch", "base", "origin/base")
        git(old, "tag", load_pin(synthetic.ws.pin_file).tag, "base")  # as the refusal of another base says
    else:
        shutil.copytree(synthetic.tree, old, symlinks=True)
        record = old / ".git" / "patchseries-base"
        record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "seen"}))
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Bump the version")
    assert synthetic.run("export").returncode == 0  # not committed
    mine = files_of(patches)
    commit(old, {CORE: "def answer():\n    return 43\n"}, "Another change\n\nUpstream-Status: Pending")

    refused = synthetic.run("export", "--tree", str(old))
    git(patches, "add", "-A")
    git(patches, "commit", "-q", "-m", "Bump")
    first = synthetic.run("export", "--tree", str(old))  # not committed
    commit(old, {CORE: "def answer():\n    return 44\n"}, "A third change\n\nUpstream-Status: Pending")
    again = synthetic.run("export", "--tree", str(old))

    assert one_error(refused).startswith("error: export would overwrite or remove "), refused.stderr
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    assert "return 44" in (patches / "0004-A-third-change.patch").read_text()
    assert mine != files_of(patches)


def test_checks_remedy_keeps_another_trees_export_that_the_tree_it_names_does_not_hold(synthetic, tmp_path):
    patches, other = synthetic.ws.patches, tmp_path / "other"
    assert cli("edit", "--patches", str(patches), "--workdir", str(other)).returncode == 0  # a second tree
    (second,) = (other / "edit").iterdir()
    commit(second, {CORE: "def answer():\n    return 43\n"}, "Another change\n\nUpstream-Status: Pending")
    assert synthetic.run("export", "--tree", str(second)).returncode == 0  # not committed
    (patches / "series").write_text((patches / "series").read_text() + "# my note\n")

    checked = synthetic.run("check")
    fix = [line for line in checked.stdout.splitlines() if line.startswith("drift:")][-1]
    remedy = shell(fix.split("`")[1])  # an export of the first tree

    assert remedy.returncode == 0, f"{fix}\n{remedy.stderr}"
    assert "return 43" in (patches / "0003-Another-change.patch.mine").read_text()


@pytest.mark.parametrize(
    "other",
    ["made again at its path", "a --shared clone of it", "a clone that fetched it", "a clone that looked at it"],
)
def test_a_tree_without_a_record_does_not_hold_another_trees_export_of_commits_its_refs_do_not_reach(
    synthetic, tmp_path, other
):
    """A tree holds only what its own record says it exported: not another tree's export, whatever commits it can
    read or reach (alternates, a fetch, a look at it), nor the export of a tree once at its path."""
    patches, first, second = synthetic.ws.patches, tmp_path / "first", tmp_path / "second"
    _in_git(patches)

    def cloned(tree: Path, answer: int, source: Path = synthetic.tree, *options: str) -> None:  # no record of it
        git(tmp_path, "clone", "-q", *options, "--branch", "series", str(source), str(tree))
        git(tree, "branch", "-f", "base", "origin/base")
        git(tree, "tag", "-f", load_pin(synthetic.ws.pin_file).tag, "base")
        commit(tree, {CORE: f"def answer():\n    return {answer}\n"}, f"Answer {answer}\n\nUpstream-Status: Pending")

    if other == "a --shared clone of it":  # made before the first tree's commit, reading its objects
        git(tmp_path, "clone", "-q", "--branch", "series", str(synthetic.tree), str(first))
        git(first, "branch", "base", "origin/base")
        git(first, "tag", load_pin(synthetic.ws.pin_file).tag, "base")
        cloned(second, 44, first, "--shared")
        commit(first, {CORE: "def answer():\n    return 43\n"}, "Answer 43\n\nUpstream-Status: Pending")
    else:
        cloned(first, 43)
    if other in ("a clone that fetched it", "a clone that looked at it"):
        cloned(second, 44)
        git(second, "fetch", "-q", str(first), "series")  # FETCH_HEAD only
    if other == "a clone that looked at it":  # HEAD's reflog, a stash and a remote branch reach it now
        git(second, "checkout", "-q", "FETCH_HEAD")
        (second / "README.md").write_text("a look\n")
        git(second, "stash", "-q", "--include-untracked")
        git(second, "checkout", "-q", "series")
        git(second, "remote", "add", "first", str(first))
        git(second, "fetch", "-q", "first")
    assert synthetic.run("export", "--tree", str(first)).returncode == 0  # not committed
    mine = files_of(patches)
    if other == "made again at its path":
        shutil.rmtree(first)
        cloned(second := first, 44)

    error = one_error(synthetic.run("export", "--tree", str(second)))

    assert error.startswith("error: export would overwrite or remove "), error
    assert files_of(patches) == mine


def test_a_tree_whose_path_holds_a_colon_exports(synthetic, tmp_path):
    shutil.copytree(synthetic.tree, tree := tmp_path / "a:b" / "tree", symlinks=True)
    commit(tree, {CORE: "def answer():\n    return 43\n"}, "Colon\n\nUpstream-Status: Pending")

    exported = synthetic.run("export", "--tree", str(tree))

    assert exported.returncode == 0, exported.stderr
    assert "+    return 43" in (synthetic.ws.patches / "0003-Colon.patch").read_text()


def test_checks_remedy_keeps_an_unlisted_file_at_a_name_the_export_writes(synthetic):
    patches = synthetic.ws.patches
    commit(synthetic.tree, {CORE: "def answer():\n    return 43\n"}, "Add foo\n\nUpstream-Status: Pending")
    (mailed := patches / "0003-Add-foo.patch").write_text("From: a colleague\nSubject: [PATCH] Add foo\n\nmine\n")
    (patches / "series").write_text((patches / "series").read_text() + "# my note\n")  # drift

    checked = synthetic.run("check")
    fix = [line for line in checked.stdout.splitlines() if line.startswith("drift:")][-1]
    remedy = shell(fix.split("`")[1])

    assert remedy.returncode == 0, f"{fix}\n{remedy.stderr}"
    assert mailed.with_name(f"{mailed.name}.mine").read_text().endswith("mine\n")


def test_a_tree_whose_record_an_older_tool_wrote_as_a_map_holds_what_it_lists(synthetic):
    """The record's first form: ``{"seen": {name: blob}}``; export reads it, then writes the pairs."""
    record = synthetic.tree / ".git" / "patchseries-base"
    fields = json.loads(record.read_text())
    record.write_text(json.dumps({**fields, "seen": dict(fields["seen"])}))
    commit(synthetic.tree, {CORE: "def answer():\n    return 43\n"}, "Another change\n\nUpstream-Status: Pending")

    exported = synthetic.run("export")

    assert exported.returncode == 0, exported.stderr
    assert "note:" not in exported.stdout
