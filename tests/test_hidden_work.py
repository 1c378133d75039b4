"""A person's work that `git status` does not show is still theirs: the tool's tree holding it is left as it is.

`git status` hides an edit to a file marked ``git update-index --assume-unchanged`` or ``--skip-worktree``, and an
untracked file that the person's global gitignore matches. A tree the tool replaced on the next `git pull` of
patches/ went with that work (found by the hostile pass of issue #31).
"""

from __future__ import annotations

import os

import pytest
from test_safety import _change_patches, _snapshot

from conftest import cli, git

CORE = "src/fakelib/core.py"


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_an_edit_git_status_is_told_not_to_show_is_refused_and_kept(synthetic, flag):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    git(tree, "update-index", flag, CORE)
    (tree / CORE).write_text("def answer():\n    return 42  # my edit, hidden from git status\n")
    before = _snapshot(tree)
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == proc.stderr.splitlines()[-1:]
    assert f"is not as the tool built it (1 file marked assume-unchanged or skip-worktree ({CORE}))" in proc.stderr
    assert _snapshot(tree) == before


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
    before = _snapshot(tree)
    _change_patches(synthetic)

    proc = cli(*args, env=env)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is not as the tool built it (1 uncommitted file (notes.local))" in proc.stderr.splitlines()[-1]
    assert _snapshot(tree) == before


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
