"""Issue 39, the tool's fourth hostile pass: one test per defect it found (``row_N``, listed in the issue's note). Each:
nothing of a person's is removed, no exit 0 for what did not happen, one ``error:`` line whose remedy, run exactly as
written, works, and the tool's git output independent of the person's environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import RELEASE_FILES, TOOL, Synthetic, cli, commit, git, make_sdist, write_pin
from patchseries import gitcmd

CORE = "src/fakelib/core.py"


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return errors[0]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    """Run a remedy's command line exactly as the error line writes it, by a shell."""
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=False)


def _between(error: str, start: str, end: str = ")") -> str:
    return start + error.split(start, 1)[1].split(end, 1)[0]


def _change_patches(patches: Path) -> None:
    second = sorted(patches.glob("*.patch"))[1]
    second.write_text(second.read_text().replace("Subject: [PATCH] Add a", "Subject: [PATCH] Add the"))


def test_row_1_a_remedy_naming_a_path_with_a_space_runs_as_written(synthetic, tmp_path):
    spaced = tmp_path / "my work's dir"
    shutil.copytree(synthetic.ws.patches, spaced / "patches")
    args = ("--patches", str(spaced / "patches"), "--workdir", str(spaced / "work dir"))
    assert cli("apply", *args).returncode == 0
    tree = spaced / "work dir" / "trees" / "sdist-1.0"
    commit(tree, {CORE: "def answer():\n    return 51\n"}, "Mine\n\nUpstream-Status: Pending")
    _change_patches(spaced / "patches")
    for step in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "Pulled")):  # committed, as a pull changes it
        git(spaced / "patches", *step)

    error = _error(cli("apply", *args))

    assert _shell(_between(error, "mv ")).returncode == 0
    exported = _shell(_between(error, f"{TOOL} export"))
    assert exported.returncode == 0, exported.stderr
    assert git(tree.with_name("sdist-1.0.mine"), "log", "-1", "--format=%s") == "Mine"
    assert len(list((spaced / "patches").glob("*.patch"))) == 3


@pytest.mark.parametrize(
    "variable", ["GIT_TEMPLATE_DIR", "GIT_DEFAULT_HASH", "GIT_DIFF_OPTS", "GIT_DIR", "GIT_INDEX_FILE"]
)
def test_row_2_the_callers_git_variables_never_change_what_the_tool_makes(synthetic, tmp_path, variable):
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
    before = _files(synthetic.ws.patches)

    applied = cli("apply", *options, env=env)
    exported = cli("export", *options, env=env)
    checked = cli("check", *options, env=env)

    assert applied.returncode == 0, applied.stderr
    assert exported.returncode == 0, exported.stderr
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert _files(synthetic.ws.patches) == before
    assert not ran.exists()
    assert not (synthetic.ws.trees / "sdist-1.0" / ".git" / "hooks" / "post-commit").exists()


def test_row_3_a_branch_not_built_on_base_is_refused(synthetic):
    git(synthetic.tree, "checkout", "-q", "--orphan", "other")
    git(synthetic.tree, "commit", "-q", "-m", "Another history")
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export", "--branch", "other"))

    assert "is not built on 'base'" in error
    assert "nothing was written" in error
    assert _files(synthetic.ws.patches) == before


@pytest.mark.parametrize("leave", ["reset", "checkout"])
def test_row_4_a_commit_only_in_a_tool_trees_reflog_is_kept(synthetic, leave):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    if leave == "checkout":
        git(tree, "checkout", "-q", "--detach")
    commit(tree, {CORE: "def answer():\n    return 52\n"}, "Mine, then left")
    mine = git(tree, "rev-parse", "HEAD")
    git(tree, *(["reset", "-q", "--hard", "HEAD~1"] if leave == "reset" else ["checkout", "-q", "series"]))
    _change_patches(synthetic.ws.patches)

    error = _error(synthetic.run("apply"))

    assert "commit(s) only in its reflog" in error
    assert git(tree, "cat-file", "-t", mine) == "commit"


def test_row_4_a_tree_cloned_at_a_pinned_commit_is_reused(synthetic, upstream_clone, tmp_path):
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


def test_row_5_an_empty_commit_is_refused_naming_it(synthetic):
    git(synthetic.tree, "commit", "-q", "--allow-empty", "-m", "Nothing in it")
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export"))

    assert "(Nothing in it) changes no file" in error
    assert f"git -C {synthetic.tree} rebase -i base" in error
    assert _files(synthetic.ws.patches) == before
    git(synthetic.tree, "reset", "-q", "--hard", "HEAD~1")  # what `drop` does
    assert synthetic.run("export").returncode == 0


def test_row_6_a_control_character_in_a_series_line_is_one_error_line(synthetic):
    series = synthetic.ws.patches / "series"
    series.write_bytes(series.read_bytes() + b"0003\x00x.patch\n")

    for command in ("status", "check", "apply"):
        assert "is not a file name: '0003\\x00x.patch'" in _error(synthetic.run(command))


def test_row_7_a_fifo_at_the_locks_path_is_named(synthetic):
    synthetic.ws.workdir.mkdir(parents=True, exist_ok=True)
    lock = synthetic.ws.workdir / "patchseries.lock"
    os.mkfifo(lock)

    error = _error(synthetic.run("fetch"))

    assert f"{lock} is not a file" in error
    lock.unlink()  # the remedy
    assert synthetic.run("fetch").returncode == 0


def test_row_8_a_git_url_that_looks_like_an_option_is_a_url(synthetic, tmp_path):
    pin = synthetic.ws.pin_file
    pin.write_text(pin.read_text().replace('git_url = "https://git.invalid/fakelib.git"', 'git_url = "--bare"'))

    error = _error(synthetic.run("fetch", "--git"))

    assert "cannot clone --bare" in error
    assert ".partial' does not exist" not in error  # the folder it was cloning into, taken for the repository
    assert not (synthetic.ws.trees / "git-1.0").exists()


def test_row_9_a_failed_git_command_is_named_by_its_subcommand():
    assert gitcmd._short(["-c", "a.b=c", "-c", "d.e=f", "format-patch", "--zero-commit", "x", "y"]) == (
        "format-patch --zero-commit x"
    )


def test_row_10_an_author_with_a_control_character_is_refused(synthetic):
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export", "--author", "Eve\nBcc: x <eve@example.com>"))

    assert "is not an identity" in error
    assert _files(synthetic.ws.patches) == before


def test_row_11_a_pin_file_with_a_byte_order_mark_is_read(synthetic):
    synthetic.ws.pin_file.write_bytes(b"\xef\xbb\xbf" + synthetic.ws.pin_file.read_bytes())

    assert synthetic.run("fetch").returncode == 0
    assert synthetic.run("check").returncode == 0


def test_row_12_the_remedy_of_edit_over_an_existing_tree_runs_as_written(synthetic: Synthetic):
    commit(synthetic.tree, {CORE: "def answer():\n    return 53\n"}, "Change\n\nUpstream-Status: Pending")

    error = _error(synthetic.run("edit"))

    exported = _shell(_between(error, f"{TOOL} export"))
    assert exported.returncode == 0, exported.stderr
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3
    assert _shell(_between(error, "mv ")).returncode == 0
    assert synthetic.run("edit").returncode == 0


def test_row_13_export_over_a_dangling_link_says_how_to_make_a_tree(synthetic):
    default = synthetic.tree
    shutil.rmtree(default)
    default.symlink_to(default.parent / "gone")

    error = _error(synthetic.run("export"))

    assert f"there is no tree to export at {default}" in error
    assert _shell(_between(error, "mv ")).returncode == 0
    made = _shell(_between(error, f"{TOOL} edit", "`"))
    assert made.returncode == 0, made.stderr
    assert (default / ".git").is_dir()


def test_row_14_a_series_line_naming_a_folder_says_it_is_not_a_file(synthetic):
    (synthetic.ws.patches / "sub").mkdir()
    series = synthetic.ws.patches / "series"
    series.write_text(series.read_text() + "sub\n")

    assert f"{synthetic.ws.patches / 'sub'} is not a file" in _error(synthetic.run("status"))


def test_row_15_a_branch_that_is_a_revision_expression_is_refused(synthetic):
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export", "--branch", "series^"))

    assert "--branch 'series^' is not a branch name" in error
    assert _files(synthetic.ws.patches) == before


def test_row_16_a_files_crlf_line_endings_survive_export_and_apply(synthetic):
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


def test_row_17_a_patch_file_holding_two_patches_is_refused(synthetic):
    first, second = sorted(synthetic.ws.patches.glob("*.patch"))
    first.write_text(first.read_text() + second.read_text())
    (synthetic.ws.patches / "series").write_text(f"{first.name}\n")

    for command in ("status", "apply"):
        assert f"{first.name} holds 2 patches" in _error(synthetic.run(command))


def test_row_18_a_patch_git_am_cannot_read_is_refused_with_git_ams_reason(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.write_bytes(b"\xef\xbb\xbf" + first.read_bytes())  # a byte order mark an editor wrote

    error = _error(synthetic.run("apply"))

    assert "does not apply: Patch format detection failed;" in error
    assert "see `git am` output" not in error


def test_row_19_an_sdist_that_ships_a_git_directory_is_refused(synthetic, tmp_path):
    ran = tmp_path / "ran"
    files = {
        **RELEASE_FILES, ".git/HEAD": "ref: refs/heads/main\n",
        ".git/config": f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {ran}; false\n",
    }  # fmt: skip
    (tmp_path / "evil").mkdir()
    write_pin(synthetic.ws.patches, make_sdist(tmp_path / "evil", files))
    fresh = tmp_path / "fresh"

    error = _error(cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)))

    assert "contains a git directory entry 'fakelib-1.0/.git/" in error
    assert not ran.exists()
    assert not (fresh / "trees" / "sdist-1.0").exists()
