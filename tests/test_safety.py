"""The tool writes only what it made: a tree it cannot show it built unchanged is left byte for byte as it is.

Each case changes the tool's tree as a person (or an interrupted tool of an older version) might, then changes
patches/ (a `git pull`) and runs `apply`: one `error:` line that names the tree, exit 2, and every file of the tree,
`.git` included, as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import cli, commit, git
from patchseries import scratch

CORE = "src/fakelib/core.py"


def _change_patches(synthetic, new_subject="Add the CHANGELOG entry"):
    """What a `git pull` that brings a changed patch does to patches/."""
    second = sorted(synthetic.ws.patches.glob("*.patch"))[1]
    text = second.read_text()
    old_subject = text.split("Subject: [PATCH] ", 1)[1].splitlines()[0]
    second.write_text(text.replace(f"Subject: [PATCH] {old_subject}", f"Subject: [PATCH] {new_subject}"))


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file and link under ``folder`` (``.git`` included) with a digest of its content or target."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            key = str(path.relative_to(folder))
            if path.is_symlink():
                found[key] = f"-> {os.readlink(path)}"
            elif path.is_file():
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _edit(tree: Path) -> None:
    (tree / CORE).write_text("def answer():\n    return 42  # my edit\n")


def _untracked(tree: Path) -> None:
    (tree / "my-notes.txt").write_text("mine\n")


def _commit(tree: Path) -> None:
    commit(tree, {CORE: "def answer():\n    return 42  # my commit\n"}, "My unexported work")


def _other_branch(tree: Path) -> None:
    git(tree, "checkout", "-q", "-b", "mine", "base")


def _branch_named_like_the_tools_work_branch(tree: Path) -> None:
    git(tree, "branch", "series-wip")


def _tag_named_series(tree: Path) -> None:
    git(tree, "tag", "series", "base")


def _stash(tree: Path) -> None:
    _edit(tree)
    git(tree, "stash", "-q")


def _rebase_stopped(tree: Path) -> None:
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": "sed -i 1s/^pick/edit/"}
    rebase = ["git", "-c", "user.name=P", "-c", "user.email=p@invalid", "rebase", "-q", "-i", "base"]
    subprocess.run(rebase, cwd=tree, env=env, capture_output=True, check=True)


def _head_emptied(tree: Path) -> None:
    (tree / ".git" / "HEAD").write_text("")


def _git_moved_away(tree: Path) -> None:
    (tree / ".git").rename(tree.parent.parent / "moved-git")
    _untracked(tree)


def _gitdir_file(tree: Path) -> None:
    (tree / ".git").rename(tree.parent.parent / "moved-git")
    (tree / ".git").write_text(f"gitdir: {tree.parent.parent / 'moved-git'}\n")


def _record_removed(tree: Path) -> None:
    (tree / ".git" / "patchseries-tree").unlink()


def _series_in_a_linked_worktree(tree: Path) -> None:
    git(tree, "checkout", "-q", "--detach")
    git(tree, "worktree", "add", "-q", str(tree.parent.parent.parent / "linked"), "series")


CHANGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "uncommitted edit": (_edit, f"1 uncommitted file ({CORE})"),
    "untracked file": (_untracked, "1 uncommitted file (my-notes.txt)"),
    "commit on series": (_commit, "its refs changed (refs/heads/series)"),
    "another branch checked out": (_other_branch, "its refs changed (refs/heads/mine)"),
    "series-wip of a person's": (_branch_named_like_the_tools_work_branch, "its refs changed (refs/heads/series-wip)"),
    "tag named series": (_tag_named_series, "its refs changed (refs/tags/series)"),
    "stash": (_stash, "its refs changed (refs/stash)"),
    "rebase stopped at edit": (_rebase_stopped, "is in progress"),
    "HEAD emptied": (_head_emptied, ""),
    ".git moved away": (_git_moved_away, "its .git is missing or is not a directory"),
    "gitdir file": (_gitdir_file, "its .git is missing or is not a directory"),
    "record removed": (_record_removed, "it has no readable record of what the tool built"),
    "series in a linked worktree": (_series_in_a_linked_worktree, "HEAD is detached"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_tree_the_tool_cannot_show_it_built_unchanged_is_refused_and_left_byte_for_byte(synthetic, change):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    make, why = CHANGES[change]
    make(tree)
    before = _snapshot(tree)
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors == proc.stderr.splitlines()[-1:]
    assert errors[0].startswith(f"error: {tree} is not as the tool built it ("), errors[0]
    assert why in errors[0]
    assert "nothing was changed" in errors[0]
    assert _snapshot(tree) == before
    assert sorted(path.name for path in synthetic.ws.trees.iterdir()) == ["sdist-1.0"]  # nothing half-made beside


def test_an_unchanged_tree_is_reused_for_the_same_series_and_replaced_for_another(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    head = git(tree, "rev-parse", "series")

    again = synthetic.run("apply")
    _change_patches(synthetic)
    replaced = synthetic.run("apply")

    assert "reusing it" in again.stderr
    assert replaced.returncode == 0, replaced.stderr
    assert "unchanged since the tool built it: building a fresh one" in replaced.stderr
    assert git(tree, "rev-parse", "series") != head
    assert git(tree, "log", "-1", "--format=%s", "series") == "Add the CHANGELOG entry"


def test_the_tools_base_worktree_with_an_edit_is_refused(synthetic):
    """The worktrees the tool checks its base out in beside a tree are its own only while clean."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    beside = synthetic.ws.trees / "sdist-1.0-base"
    git(tree, "worktree", "add", "-q", "--detach", str(beside), "base")
    _edit(beside)
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2
    assert f"its worktree {beside} has uncommitted files" in proc.stderr.splitlines()[-1]
    assert "my edit" in (beside / CORE).read_text()


def test_a_tree_left_by_an_older_version_is_replaced_only_while_unchanged(synthetic):
    """Trees made before the disposable design carry `.git/patchseries-applied`: unchanged, they are the tool's."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    record = tree / ".git" / "patchseries-tree"
    fields = json.loads(record.read_text())
    (tree / ".git" / "patchseries-applied").write_text(f"{fields['fingerprint']} {fields['base']} {fields['head']}\n")
    record.unlink()

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert "building a fresh one" in proc.stderr
    assert record.is_file()


def test_the_edit_tree_is_the_persons_and_never_written_again(synthetic):
    """`edit` makes a tree once; `apply`, `test` and `edit` itself never write it; `export` reads it."""
    _edit(synthetic.tree)
    before = _snapshot(synthetic.tree)

    again = synthetic.run("edit")
    applied = synthetic.run("apply")

    assert again.returncode == 2
    assert again.stderr.splitlines()[-1].startswith(f"error: {synthetic.tree} exists, and it is yours")
    assert applied.returncode == 0, applied.stderr
    assert _snapshot(synthetic.tree) == before


def test_export_reads_the_branch_even_where_a_tag_has_its_name(synthetic):
    """A tag named `series` (or `base`) in the person's tree is never read instead of the branch."""
    git(synthetic.tree, "tag", "series", "base")
    git(synthetic.tree, "tag", "base", "refs/heads/series~1")
    before = {path.name: path.read_bytes() for path in synthetic.ws.patches.iterdir() if path.is_file()}

    proc = synthetic.run("export")

    assert proc.returncode == 0, proc.stderr
    assert "exported 2 patches" in proc.stdout
    assert {path.name: path.read_bytes() for path in synthetic.ws.patches.iterdir() if path.is_file()} == before


def test_export_refuses_uncommitted_staged_and_untracked_changes(synthetic):
    (synthetic.tree / CORE).write_text("def answer():\n    return 43\n")
    (synthetic.tree / "src/fakelib/new.py").write_text("NEW = 1\n")
    git(synthetic.tree, "add", "src/fakelib/new.py")
    before = {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()}

    proc = synthetic.run("export")

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(
        f"error: {synthetic.tree} has uncommitted changes ({CORE}, src/fakelib/new.py), which export would leave out"
    )
    assert {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()} == before


def test_a_broken_tree_never_makes_git_write_the_checkout_around_it(synthetic, tmp_path):
    """Issue 31, row 7: git must not fall through to a repository above the tree (the project's own checkout)."""
    assert synthetic.run("apply").returncode == 0
    git(tmp_path, "init", "-q")  # the folder around patches/ and the work directory is a checkout, as the project is
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "the person's checkout")
    before = git(tmp_path, "for-each-ref")
    _head_emptied(synthetic.ws.trees / "sdist-1.0")
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert git(tmp_path, "for-each-ref") == before
    assert git(tmp_path, "status", "--porcelain", "--untracked-files=no") == ""


def test_git_variables_of_the_callers_shell_never_point_the_tool_at_another_repository(
    synthetic, tmp_path, monkeypatch
):
    """A shell with GIT_DIR/GIT_WORK_TREE set (a hook, a script) must not make `apply` write into that repository."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "README").write_text("mine\n")
    git(other, "add", "README")
    git(other, "commit", "-q", "-m", "the person's repository")
    (other / "README").write_text("mine, edited\n")
    refs = git(other, "for-each-ref")
    assert synthetic.run("apply").returncode == 0
    _change_patches(synthetic)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))

    proc = synthetic.run("apply")

    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert git(other, "for-each-ref") == refs
    assert (other / "README").read_text() == "mine, edited\n"


def test_a_failing_global_hook_does_not_stop_the_tools_commits(synthetic, tmp_path, monkeypatch):
    """A person's global core.hooksPath (a commit-msg linter) must not turn the series into "does not apply"."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("applypatch-msg", "pre-applypatch", "commit-msg", "pre-commit"):
        (hooks / name).write_text("#!/bin/sh\nexit 1\n")
        (hooks / name).chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hooks}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))

    proc = cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir))

    assert proc.returncode == 0, proc.stderr


def _hide_with_exclude(tree: Path) -> None:
    (tree / "my-notes.txt").write_text("mine\n")
    with (tree / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write("my-notes.txt\n")


def _edit_an_acceptance_copy(tree: Path) -> None:
    copy = next(path for path in sorted((tree / "tests").rglob("test_*.py")) if path.is_file())
    copy.write_text(copy.read_text() + "# mine\n")


def _edit_the_harness(tree: Path) -> None:
    runif = tree / "tests" / "tests_pytorch" / "helpers" / "runif.py"
    runif.write_text(runif.read_text() + "# mine, written by patchseries stays in the text\n")


@pytest.mark.parametrize(
    "make", [_hide_with_exclude, _edit_an_acceptance_copy, _edit_the_harness], ids=lambda make: make.__name__[1:]
)
def test_work_hidden_by_the_trees_own_excludes_is_refused_and_left(synthetic, make):
    """Found by the hostile pass: a file hidden by a line of `.git/info/exclude`, or a changed acceptance copy or
    harness file (which the tool excludes), is invisible to `git status`, and went with the replaced tree."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    make(tree)
    before = _snapshot(tree)
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the tool did not make" in proc.stderr.splitlines()[-1]
    assert _snapshot(tree) == before


def test_a_commit_in_the_tools_base_worktree_is_refused_and_kept(synthetic):
    """Found by the second hostile pass: a commit on the tool's detached `-base` worktree went with the worktree."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    beside = synthetic.ws.trees / "sdist-1.0-base"
    git(tree, "worktree", "add", "-q", "--detach", str(beside), "base")
    commit(beside, {CORE: "def answer():\n    return 42  # committed beside\n"}, "My work beside")
    mine = git(beside, "rev-parse", "HEAD")
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2
    assert f"its worktree {beside} is not detached at branch base" in proc.stderr.splitlines()[-1]
    assert git(beside, "rev-parse", "HEAD") == mine


@pytest.mark.parametrize(
    ("command", "scratch", "needed"),
    [
        ("apply", "sdist-1.0.old", True),  # the old tree is renamed there: the series changed
        ("apply", "sdist-1.0.partial", True),
        ("apply", "sdist-1.0.partial.unpack", True),
        ("edit", "sdist-1.0.partial", True),
        ("edit", "sdist-1.0.old", False),  # `edit` never replaces a tree
    ],
)
def test_a_persons_folder_under_one_of_the_tools_scratch_names_is_kept(synthetic, command, scratch, needed):
    """Left by issue #31: a person who moved a refused tree to ``<tree>.old`` lost it to the next run. A run that
    needs the name stops, naming it; one that does not leaves it."""
    assert synthetic.run("apply").returncode == 0
    folder = (synthetic.ws.trees if command == "apply" else synthetic.tree.parent) / scratch
    folder.mkdir()
    (folder / "mine.py").write_text("a person's work\n")
    if command == "edit":
        shutil.rmtree(synthetic.tree)  # so that `edit` makes a tree again, beside the person's folder
    _change_patches(synthetic)

    proc = synthetic.run(command)

    assert _snapshot(folder) == {"mine.py": hashlib.sha256(b"a person's work\n").hexdigest()}
    if not needed:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"error: {folder} is in the way: the tool works under that name and did not make what is there, which may be"
        " yours; move it away and re-run; nothing was changed"
    )


def test_a_claim_left_by_a_killed_run_never_removes_a_folder_moved_there_later(synthetic):
    """The claim names the folder the tool made; a person's folder moved to the name afterwards is another one."""
    assert synthetic.run("apply").returncode == 0
    old = synthetic.ws.trees / "sdist-1.0.old"
    scratch.claim(old, moving_here=synthetic.ws.trees / "sdist-1.0")  # a run killed right after claiming
    refused = synthetic.ws.trees / "mine"
    refused.mkdir()
    (refused / "mine.py").write_text("a person's work\n")
    refused.rename(old)
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(f"error: {old} is in the way")
    assert (old / "mine.py").read_text() == "a person's work\n"
