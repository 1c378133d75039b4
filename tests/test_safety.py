"""The tool writes only what it made: a tree it cannot show it built unchanged is left byte for byte as it is.

Each case changes the tool's tree as a person (or an interrupted tool of an older version) might, then changes
patches/ (a `git pull`) and runs `apply`: one `error:` line that names the tree, exit 2, and every file of the tree,
`.git` included, as it was.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
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
    make_sdist,
    one_error,
    shell,
    snapshot,
    without_the_tool,
    write_pin,
)
from patchseries.export import export_series
from patchseries.paths import Workspace

CORE = "src/fakelib/core.py"
DOCS = "docs/index.rst"


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
    "another branch checked out": (_other_branch, "its refs changed (HEAD, refs/heads/mine)"),
    "series-wip of a person's": (_branch_named_like_the_tools_work_branch, "its refs changed (refs/heads/series-wip)"),
    "tag named series": (_tag_named_series, "its refs changed (refs/tags/series)"),
    "stash": (_stash, "its refs changed (refs/stash)"),
    "rebase stopped at edit": (_rebase_stopped, "its refs changed (HEAD)"),
    "HEAD emptied": (_head_emptied, ""),
    ".git moved away": (_git_moved_away, "it has no readable record of what the tool built"),
    "gitdir file": (_gitdir_file, "it has no readable record of what the tool built"),
    "record removed": (_record_removed, "it has no readable record of what the tool built"),
    "series in a linked worktree": (_series_in_a_linked_worktree, "its refs changed (HEAD)"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_tree_the_tool_cannot_show_it_built_unchanged_is_refused_and_left_byte_for_byte(synthetic, change):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    make, why = CHANGES[change]
    make(tree)
    before = snapshot(tree)
    change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors == proc.stderr.splitlines()[-1:]
    assert errors[0].startswith(f"error: {tree} is not as the tool built it ("), errors[0]
    assert why in errors[0]
    assert "nothing was changed" in errors[0]
    assert snapshot(tree) == before
    assert sorted(path.name for path in synthetic.ws.trees.iterdir()) == ["sdist-1.0"]  # nothing half-made beside


def test_an_unchanged_tree_is_reused_for_the_same_series_and_replaced_for_another(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    head = git(tree, "rev-parse", "series")

    again = synthetic.run("apply")
    change_patches(synthetic.ws.patches)
    replaced = synthetic.run("apply")

    assert "reusing it" in again.stderr
    assert replaced.returncode == 0, replaced.stderr
    assert "unchanged since the tool built it: building a fresh one" in replaced.stderr
    assert git(tree, "rev-parse", "series") != head
    assert git(tree, "log", "-1", "--format=%s", "series") == "Add the CHANGELOG entry"


def _rebase_stopped_beside(beside: Path) -> None:
    _commit(beside)
    _rebase_stopped(beside)


@pytest.mark.parametrize("make", [_edit, _commit, _rebase_stopped_beside], ids=["edit", "commit", "rebase stopped"])
def test_a_linked_worktree_with_an_edit_a_commit_or_a_rebase_stopped_is_refused_and_kept(synthetic, make):
    """A linked worktree of the tool's tree is a person's (the tool's own worktrees live in its scratch folder)."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    beside = synthetic.ws.trees / "sdist-1.0-base"
    git(tree, "worktree", "add", "-q", "--detach", str(beside), "base")
    make(beside)
    before = snapshot(beside)
    change_patches(synthetic.ws.patches)

    error = one_error(synthetic.run("apply"))

    assert f"(a linked worktree, {beside})" in error
    assert snapshot(beside) == before
    moved = shell(between(error, "mv "))  # the remedy as printed: the tree moved, its linked worktree still works
    assert moved.returncode == 0, moved.stderr
    assert git(beside, "rev-parse", "--git-common-dir").startswith(str(tree.with_name("sdist-1.0.mine")))
    assert synthetic.run("apply").returncode == 0


@pytest.mark.parametrize("leave", [["reset", "-q", "--hard", "HEAD~1"], ["checkout", "-q", "series"]])
def test_a_commit_only_in_the_tools_trees_reflog_is_refused_and_kept(synthetic, leave):
    """A commit reset away, or made on a detached HEAD and left: git keeps it in the reflog, so the tree is refused."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    if leave[0] == "checkout":
        git(tree, "checkout", "-q", "--detach")
    commit(tree, {CORE: "def answer():\n    return 7  # mine\n"}, "Mine")
    mine = git(tree, "rev-parse", "HEAD")
    git(tree, *leave)
    change_patches(synthetic.ws.patches)

    error = one_error(synthetic.run("apply"))

    assert f"only in its reflog ({mine[:12]})" in error
    assert git(tree, "cat-file", "-t", mine) == "commit"


def test_the_edit_tree_is_the_persons_and_never_written_again(synthetic):
    """`edit` makes a tree once; `apply`, `test` and `edit` itself never write it; `export` reads it."""
    _edit(synthetic.tree)
    before = snapshot(synthetic.tree)

    again = synthetic.run("edit")
    applied = synthetic.run("apply")

    assert again.returncode == 2
    assert again.stderr.splitlines()[-1].startswith(f"error: {synthetic.tree} exists, and it is yours")
    assert applied.returncode == 0, applied.stderr
    assert snapshot(synthetic.tree) == before


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
    """Git must not fall through to a repository above the tree (the project's own checkout)."""
    assert synthetic.run("apply").returncode == 0
    git(tmp_path, "init", "-q")  # the folder around patches/ and the work directory is a checkout, as the project is
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "the person's checkout")
    before = git(tmp_path, "for-each-ref")
    _head_emptied(synthetic.ws.trees / "sdist-1.0")
    change_patches(synthetic.ws.patches)

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
    change_patches(synthetic.ws.patches)
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
    """A file hidden by a line of `.git/info/exclude`, or a changed acceptance copy or harness file (which the tool
    excludes), is invisible to `git status`: the tree holding it is not replaced."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    make(tree)
    before = snapshot(tree)
    change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "uncommitted file" in proc.stderr.splitlines()[-1]
    assert snapshot(tree) == before


@pytest.mark.parametrize(
    "name", ["sdist-1.0.old", "sdist-1.0.partial", "sdist-1.0.partial.unpack", "sdist-1.0.partial.patchseries-scratch"]
)
@pytest.mark.parametrize("command", ["apply", "edit"])
def test_a_persons_folder_beside_a_tree_is_never_touched(synthetic, command, name):
    """The tool builds in its scratch folder and renames into place: a folder of anyone's beside a tree (under a name
    older versions used, a refused tree moved away) is left as it is, with or without a tree there yet."""
    if command == "apply":
        assert synthetic.run("apply").returncode == 0
    else:
        shutil.rmtree(synthetic.tree)  # so that `edit` makes a tree again, beside the person's folder
    folder = (synthetic.ws.trees if command == "apply" else synthetic.tree.parent) / name
    folder.mkdir(parents=True)
    (folder / "mine.py").write_text("a person's work\n")
    change_patches(synthetic.ws.patches)

    proc = synthetic.run(command)

    assert proc.returncode == 0, proc.stderr
    assert snapshot(folder) == {"mine.py": hashlib.sha256(b"a person's work\n").hexdigest()}


def _subjects(patches: Path) -> list[str]:
    return [
        next(line for line in p.read_text().splitlines() if line.startswith("Subject: "))
        for p in sorted(patches.glob("*.patch"))
    ]


def _pull_a_changed_series(patches: Path) -> None:
    """A changed series, committed in patches/ as a pull leaves it."""
    change_patches(patches)
    for step in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "Pulled")):
        git(patches, *step)


def test_apply_refusals_remedies_run_as_written_from_any_directory(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    commit(tree, {CORE: "def answer():\n    return 48\n"}, "Mine\n\nUpstream-Status: Pending")
    _pull_a_changed_series(synthetic.ws.patches)

    error = one_error(synthetic.run("apply"))

    move = error.split("(mv ", 1)[1].split(")", 1)[0]
    subprocess.run(["mv", *shlex.split(move)], check=True)
    command = between(error, f"{TOOL} export")
    assert shlex.split(command)[:3] == [sys.executable, "-m", "patchseries"], command
    exported = shell(command, cwd=Path("/"))
    assert exported.returncode == 0, exported.stderr
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3
    assert synthetic.run("apply").returncode == 0


def test_a_remedy_naming_a_path_with_a_space_runs_as_written(synthetic, tmp_path):
    spaced = tmp_path / "my work's dir"
    shutil.copytree(synthetic.ws.patches, spaced / "patches")
    args = ("--patches", str(spaced / "patches"), "--workdir", str(spaced / "work dir"))
    assert cli("apply", *args).returncode == 0
    tree = spaced / "work dir" / "trees" / "sdist-1.0"
    commit(tree, {CORE: "def answer():\n    return 51\n"}, "Mine\n\nUpstream-Status: Pending")
    _pull_a_changed_series(spaced / "patches")

    error = one_error(cli("apply", *args))

    assert shell(between(error, "mv ")).returncode == 0
    exported = shell(between(error, f"{TOOL} export"))
    assert exported.returncode == 0, exported.stderr
    assert git(tree.with_name("sdist-1.0.mine"), "log", "-1", "--format=%s") == "Mine"
    assert len(list((spaced / "patches").glob("*.patch"))) == 3


def test_a_second_refusals_move_names_a_free_folder(synthetic):
    trees = synthetic.ws.trees
    tree = trees / "sdist-1.0"
    assert synthetic.run("apply").returncode == 0
    commit(tree, {CORE: "def answer():\n    return 51\n"}, "Mine, first\n\nUpstream-Status: Pending")
    first = one_error(synthetic.run("apply"))
    assert shell(between(first, "mv ")).returncode == 0
    assert synthetic.run("apply").returncode == 0  # a fresh tree
    commit(tree, {CORE: "def answer():\n    return 52\n"}, "Mine, second\n\nUpstream-Status: Pending")

    second = one_error(synthetic.run("apply"))

    assert f"{tree}.mine-2" in second
    assert shell(between(second, "mv ")).returncode == 0
    assert git(tree.with_name("sdist-1.0.mine"), "log", "-1", "--format=%s") == "Mine, first"
    assert git(tree.with_name("sdist-1.0.mine-2"), "log", "-1", "--format=%s") == "Mine, second"
    exported = shell(between(second, f"{TOOL} export"))
    assert exported.returncode == 0, exported.stderr
    assert _subjects(synthetic.ws.patches)[-1] == "Subject: [PATCH] Mine, second"


def test_a_printed_remedy_runs_in_a_shell_whose_python_is_not_the_tools(synthetic, tmp_path):
    env, here = without_the_tool(tmp_path)
    tree = synthetic.ws.trees / "sdist-1.0"
    assert synthetic.run("apply").returncode == 0
    commit(tree, {CORE: "def answer():\n    return 51\n"}, "Mine\n\nUpstream-Status: Pending")

    error = one_error(synthetic.run("apply"))

    moved = shell(between(error, "mv "), cwd=here, env=env)
    assert moved.returncode == 0, moved.stderr
    export = error.split("export your commits from there (", 1)[1].split(")", 1)[0]
    exported = shell(export, cwd=here, env=env)
    assert exported.returncode == 0, f"{export}\n{exported.stderr}"
    assert _subjects(synthetic.ws.patches)[-1] == "Subject: [PATCH] Mine"
    # an option's refusal names the help as a command too
    refused = cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", "")
    helped = shell(one_error(refused).split("; see ", 1)[1], cwd=here, env=env)
    assert helped.returncode == 0, helped.stderr
    assert "--checkout" in helped.stdout


@pytest.fixture
def upstream_synthetic(tmp_path: Path) -> Synthetic:
    """A synthetic release whose series changes a file its sdist lacks (``docs/``), as Lightning's does: the pin's
    ``git_url`` is an upstream repository with that file at the tag, where the series was made."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q")
    commit(upstream, {**RELEASE_FILES, DOCS: "Fakelib\n"}, "release")
    git(upstream, "tag", "1.0")
    sdist = make_sdist(tmp_path, RELEASE_FILES)
    ws_patches, workdir = tmp_path / "patches", tmp_path / "work"
    write_pin(ws_patches, sdist, git_url=str(upstream))
    git(upstream, "checkout", "-q", "-b", "base")
    git(upstream, "checkout", "-q", "-b", "series")
    commit(upstream, {CORE: "def answer():\n    return 42\n"}, "Fix the answer\n\nUpstream-Status: Pending")
    commit(upstream, {CORE: 'def answer():\n    """The answer."""\n    return 42\n', DOCS: "Fakelib\n\nanswer()\n"},
           "Document the answer\n\nUpstream-Status: Pending")  # fmt: skip
    export_series(upstream, ws_patches, branch="series")
    return Synthetic(ws=Workspace(patches=ws_patches, workdir=workdir), sdist=sdist, tree=upstream)


def test_the_sdist_trees_refusal_keeps_the_persons_commits_it_cannot_export(upstream_synthetic):
    """The sdist lacks a file the series changes: an export from the sdist tree would drop its hunks, so the refusal
    names no export, and the commits stay in the tree moved away."""
    synthetic = upstream_synthetic
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    commit(tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Mine\n\nUpstream-Status: Pending")
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("apply"))

    assert "cherry-pick them onto an edit tree of upstream's tag" in error
    assert f"{TOOL} export" not in error
    assert shell(between(error, "mv ")).returncode == 0
    assert git(tree.with_name("sdist-1.0.mine"), "log", "-1", "--format=%s") == "Mine"
    assert files_of(synthetic.ws.patches) == before
    assert synthetic.run("apply").returncode == 0


@pytest.mark.parametrize("inside", [False, True])
def test_the_remedies_of_edit_over_an_existing_tree_run_as_written(synthetic: Synthetic, tmp_path, inside):
    """Its linked worktree (beside it, or inside it) keeps working once the tree is moved as printed."""
    commit(synthetic.tree, {CORE: "def answer():\n    return 53\n"}, "Change\n\nUpstream-Status: Pending")
    linked = synthetic.tree / "wt" if inside else tmp_path / "linked"
    git(synthetic.tree, "worktree", "add", "-q", "--detach", str(linked), "base")
    (synthetic.tree / ".git/info/exclude").write_text("wt/\n")  # as its owner would, so that export runs

    error = one_error(synthetic.run("edit"))

    exported = shell(between(error, f"{TOOL} export"))
    assert exported.returncode == 0, exported.stderr
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3
    assert shell(between(error, "mv ")).returncode == 0
    moved = synthetic.tree.with_name(f"{synthetic.tree.name}.mine") / "wt" if inside else linked
    assert git(moved, "status", "--short") == ""
    assert synthetic.run("edit").returncode == 0


@pytest.mark.parametrize(
    "variable", ["GIT_TEMPLATE_DIR", "GIT_DEFAULT_HASH", "GIT_DIFF_OPTS", "GIT_DIR", "GIT_INDEX_FILE"]
)
def test_the_callers_git_variables_never_change_what_the_tool_makes(synthetic, tmp_path, variable):
    template = tmp_path / "template"
    (template / "hooks").mkdir(parents=True)
    ran = tmp_path / "hook-ran"
    (template / "hooks" / "post-commit").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (template / "hooks" / "post-commit").chmod(0o755)
    (template / "config").write_text("[format]\n\tsignOff = true\n")
    value = {
        "GIT_TEMPLATE_DIR": str(template), "GIT_DEFAULT_HASH": "sha256", "GIT_DIFF_OPTS": "--unified=9",
        "GIT_DIR": str(tmp_path / "nowhere" / ".git"), "GIT_INDEX_FILE": str(tmp_path / "index"),
    }[variable]  # fmt: skip
    env = {**os.environ, variable: value}
    options = ("--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir))
    before = files_of(synthetic.ws.patches)

    applied = cli("apply", *options, env=env)
    exported = cli("export", *options, env=env)
    checked = cli("check", *options, env=env)

    assert applied.returncode == 0, applied.stderr
    assert exported.returncode == 0, exported.stderr
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert files_of(synthetic.ws.patches) == before
    assert not ran.exists()
    assert not (synthetic.ws.trees / "sdist-1.0" / ".git" / "hooks" / "post-commit").exists()


def test_a_tree_cloned_at_a_pinned_commit_is_reused(synthetic, upstream_clone, tmp_path):
    """The clone's own HEAD (upstream's newer commit) is no commit of the tree's: its reflog is not a person's."""
    pinned = git(upstream_clone, "rev-parse", "HEAD")
    commit(upstream_clone, {"README": "newer\n"}, "Newer upstream commit")
    forward = tmp_path / "forward"
    forward.mkdir()
    pin = f'[base]\nname = "fakelib"\nversion = "master"\ngit_url = "{upstream_clone}"\ncommit = "{pinned}"\n'
    (forward / "base.toml").write_text(pin)
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    shutil.copy(first, forward / first.name)
    (forward / "series").write_text(f"{first.name}\n")
    options = ("--git", "--patches", str(forward), "--workdir", str(synthetic.ws.workdir))

    assert cli("apply", *options).returncode == 0
    again = cli("apply", *options)

    assert again.returncode == 0, again.stderr
    assert "reusing it" in again.stderr


def test_a_persons_folder_at_the_downloads_partial_name_is_kept(synthetic, tmp_path):
    fresh = tmp_path / "fresh"
    mine = fresh / "downloads" / f"{synthetic.sdist.name}.partial"
    mine.mkdir(parents=True)
    (mine / "mine.txt").write_text("mine\n")

    proc = cli("fetch", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh))

    assert proc.returncode == 0, proc.stderr
    assert (mine / "mine.txt").read_text() == "mine\n"


def test_export_writes_in_a_fresh_folder_and_leaves_a_persons_folders_in_patches_as_they_are(synthetic):
    mine = synthetic.ws.patches / "export.partial"
    mine.mkdir()
    (mine / "mine.txt").write_text("mine\n")

    proc = synthetic.run("export")

    assert proc.returncode == 0, proc.stderr
    assert files_of(mine) == {"mine.txt": b"mine\n"}
    assert sorted(p.name for p in synthetic.ws.patches.iterdir() if p.is_dir()) == ["export.partial"]


def _stopped_at_unpack(*args: str, ws: Workspace, at: str = "fetch-unpacked") -> subprocess.Popen[str]:
    """A run stopped (SIGSTOP) while it builds a tree: what a person does meanwhile happens between check and switch."""
    env = {**os.environ, "PATCHSERIES_SIGNAL_AT": f"{at}:SIGSTOP"}
    command = [sys.executable, "-m", "patchseries", *args, "--patches", str(ws.patches), "--workdir", str(ws.workdir)]
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while Path(f"/proc/{run.pid}/stat").read_text().split()[2] != "T":
        assert run.poll() is None, run.communicate()
    return run


def test_a_commit_made_in_the_tools_tree_while_it_is_rebuilt_is_kept(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    change_patches(synthetic.ws.patches)
    run = _stopped_at_unpack("fetch", ws=synthetic.ws)
    _commit(tree)
    mine = git(tree, "rev-parse", "HEAD")
    run.send_signal(signal.SIGCONT)
    _, err = run.communicate()

    assert run.returncode == 2, err
    assert "changed while the tool rebuilt it" in err
    assert git(tree, "rev-parse", "HEAD") == mine


@pytest.mark.parametrize("killed", [False, True], ids=["run ends", "run killed"])
def test_what_a_shell_working_in_the_tools_tree_writes_once_it_is_moved_aside_is_kept(synthetic, killed):
    assert synthetic.run("apply").returncode == 0
    change_patches(synthetic.ws.patches)
    run = _stopped_at_unpack("fetch", ws=synthetic.ws, at="replace-between-renames")
    aside = synthetic.ws.trees / ".sdist-1.0.replaced"  # where a shell whose directory was the tree now is
    _commit(aside)
    mine = git(aside, "rev-parse", "HEAD")
    if killed:
        run.kill()  # the next run finds it
        run.communicate()
        status, err = (proc := synthetic.run("fetch")).returncode, proc.stderr
    else:
        run.send_signal(signal.SIGCONT)
        err, status = run.communicate()[1], run.returncode

    assert status == 0, err
    kept = synthetic.ws.trees / "sdist-1.0.mine"
    assert f"kept as {kept}" in err
    assert git(kept, "rev-parse", "HEAD") == mine


def test_a_linked_worktree_made_in_a_tree_being_replaced_works_again_by_the_command_the_note_names(synthetic, tmp_path):
    assert synthetic.run("apply").returncode == 0
    change_patches(synthetic.ws.patches)
    run = _stopped_at_unpack("fetch", ws=synthetic.ws, at="replace-between-renames")
    linked = tmp_path / "linked"
    git(synthetic.ws.trees / ".sdist-1.0.replaced", "worktree", "add", "-q", "--detach", str(linked))
    run.send_signal(signal.SIGCONT)
    err = run.communicate()[1]

    assert run.returncode == 0, err
    assert shell(between(err, "(git -C")[1:]).returncode == 0  # the repair, as printed
    assert git(linked, "rev-parse", "--show-toplevel") == str(linked)


def test_a_tool_tree_that_is_a_link_is_replaced_again_and_again_and_its_target_left_as_it_is(synthetic, tmp_path):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    target = tree.rename(tmp_path / "elsewhere")
    tree.symlink_to(target)

    for subject in ("First rewording", "Second rewording"):
        change_patches(synthetic.ws.patches, subject)
        proc = synthetic.run("apply")
        assert proc.returncode == 0, proc.stderr

    assert git(target, "rev-parse", "--verify", "series")  # untouched: only the link went


def test_a_folder_that_appears_where_edit_makes_its_tree_is_kept(synthetic):
    theirs = synthetic.ws.workdir / "edit" / "sdist-1.0"
    shutil.rmtree(theirs, ignore_errors=True)
    run = _stopped_at_unpack("edit", ws=synthetic.ws)
    theirs.mkdir(parents=True)
    (theirs / "notes.txt").write_text("mine\n")
    run.send_signal(signal.SIGCONT)
    _, err = run.communicate()

    assert run.returncode == 2, err
    assert (theirs / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize(
    "then", ["rebase", "nothing", "stay on base", "series in a linked worktree", "--branch", "--branch refs/heads/"]
)
def test_a_commit_on_the_edit_trees_base_is_refused_and_the_remedy_exports_it_as_a_patch(synthetic, then, tmp_path):
    tree = synthetic.tree  # made by edit
    git(tree, "checkout", "-q", "base")
    commit(tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Oops, on base\n\nUpstream-Status: Pending")
    if then == "series in a linked worktree":
        git(tree, "worktree", "add", "-q", str(tmp_path / "linked"), "series")
    elif then != "stay on base":
        git(tree, "checkout", "-q", "series")
    if then == "rebase":
        git(tree, "rebase", "-q", "base")  # as a person would, to put their branch on top
    branch = ["--branch", then.removeprefix("--branch").strip() + "feature"] if then.startswith("--branch") else []
    if branch:
        git(tree, "checkout", "-q", "-b", "feature")
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export", *branch))

    assert "moved since the tool made the tree" in error
    assert files_of(synthetic.ws.patches) == before
    assert shell(between(error, "git -C ")).returncode == 0  # the remedy as printed
    assert synthetic.run("export", *branch).returncode == 0
    assert any("Oops" in path.name for path in synthetic.ws.patches.glob("*.patch"))


def test_a_tree_made_with_force_base_is_never_exported_into_the_series_of_the_pinned_base(synthetic, upstream_clone):
    commit(upstream_clone, {"src/fakelib/__init__.py": "VERSION = '1.0.1'\n"}, "After the release")
    made = synthetic.run("edit", "--checkout", str(upstream_clone), "--force-base")
    assert made.returncode == 0, made.stderr
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("export", "--tree", made.stdout.strip()))

    assert "(--force-base)" in error
    assert files_of(synthetic.ws.patches) == before
    copy = shutil.copytree(synthetic.ws.patches, synthetic.ws.patches.with_name("copy"))  # another series folder
    again = one_error(cli("export", "--tree", made.stdout.strip(), "--patches", str(copy)))
    assert "export it into that series" not in again  # a forced base has no series to go to
