"""A person's work that `git status` does not show is still theirs: the tool's tree holding it is left as it is.

`git status` hides an edit to a file marked ``git update-index --assume-unchanged`` or ``--skip-worktree``, an
untracked file that the person's global gitignore matches, and one the tree's own ignore rules hide (unless the tool's
own runs made it). A tree holding such work is refused, never replaced on the next `git pull` of patches/.
"""

from __future__ import annotations

import os

import pytest

from conftest import change_patches, cli, git, one_error, snapshot
from patchseries.trees import recording

CORE = "src/fakelib/core.py"


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_an_edit_git_status_is_told_not_to_show_is_refused_and_kept(synthetic, flag):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    git(tree, "update-index", flag, CORE)
    (tree / CORE).write_text("def answer():\n    return 42  # my edit, hidden from git status\n")
    before = snapshot(tree)
    change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == proc.stderr.splitlines()[-1:]
    assert f"is not as the tool built it (1 uncommitted file ({CORE}))" in proc.stderr
    assert snapshot(tree) == before


def test_a_file_the_persons_global_gitignore_hides_is_refused_and_kept(synthetic, tmp_path):
    ignore = tmp_path / "global-ignore"
    ignore.write_text("*.local\n")
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\texcludesFile = {ignore}\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(config)}
    args = ("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir))
    assert cli(*args, env=env).returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    (tree / "notes.local").write_text("mine\n")
    before = snapshot(tree)
    change_patches(synthetic.ws.patches)

    proc = cli(*args, env=env)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is not as the tool built it (1 uncommitted file (notes.local))" in proc.stderr.splitlines()[-1]
    assert snapshot(tree) == before


def test_the_persons_global_gitignore_still_applies_to_export(synthetic, tmp_path):
    """Only the check of the tool's trees ignores it: export leaves a person's ignored editor files out, as git does."""
    ignore = tmp_path / "global-ignore"
    ignore.write_text("*.local\n")
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\texcludesFile = {ignore}\n")
    (synthetic.tree / "notes.local").write_text("mine\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(config)}

    proc = cli("export", "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir), env=env)

    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["build/mine.txt", ".coverage.mine", "src/fakelib/__pycache__/mine.pyc"])
def test_a_file_the_trees_ignore_rules_hide_is_refused_and_kept(synthetic, name):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    mine = tree / name
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("mine\n")
    change_patches(synthetic.ws.patches)

    error = one_error(synthetic.run("apply"))

    assert f"(1 uncommitted file ({name}))" in error
    assert mine.read_text() == "mine\n"
    assert synthetic.run("apply").returncode == 2  # and again: never blessed by a refused run


def test_ignored_files_the_tools_own_runs_make_are_the_tools(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    with recording(tree):  # as the main job's stages: installing and testing write ignored files
        (tree / "build").mkdir()
        (tree / "build" / "lib.txt").write_text("built\n")
    change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert "building a fresh one" in proc.stderr


@pytest.mark.parametrize(("name", "theirs"), [("tests/copy.py", True), ("build/lib.txt", False)])
def test_a_copy_edited_while_the_tool_tests_is_the_persons_and_a_rebuilt_artifact_the_tools(synthetic, name, theirs):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    (tree / name).parent.mkdir(parents=True, exist_ok=True)
    with recording(tree, copies=True):  # as `prepare` writes the acceptance suite's copies
        (tree / name).write_text("the tool's\n")
    with recording(tree):  # the tests run a long time: a person edits the copy meanwhile, a build rewrites build/
        (tree / name).write_text("mine\n")
    change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == (2 if theirs else 0), proc.stderr
    assert (tree / name).read_text() == "mine\n" if theirs else "building a fresh one" in proc.stderr


@pytest.mark.parametrize(
    ("name", "theirs"),
    [
        (".vscode/settings.json", True),
        (".coveragerc", True),
        ("docs/build/notes.md", True),
        ("src/fakelib/__pycache__/x.pyc", False),
    ],
)
def test_a_file_made_while_the_tool_tests_is_the_persons_unless_a_build_artifact(synthetic, name, theirs):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    with (tree / ".git" / "info" / "exclude").open("a") as rules:
        rules.write(".vscode/\n")  # as upstream's .gitignore in a tree of a checkout
    with recording(tree):  # the tests run a long time: an editor writes its settings into the tree meanwhile
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("mine\n")
    change_patches(synthetic.ws.patches)

    proc = synthetic.run("apply")

    assert proc.returncode == (2 if theirs else 0), proc.stderr
    assert (tree / name).read_text() == "mine\n" if theirs else "building a fresh one" in proc.stderr
