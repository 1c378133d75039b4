"""Issue 39, the tool's third hostile pass: one test per row of the issue's table (``row_N``) and per case the second
pass's change left (``left_N``). Each: nothing of a person's is removed, no exit 0 for what did not happen, and one
``error:`` line whose remedy, run exactly as written, works."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TOOL, Synthetic, cli, commit, git
from patchseries import matrix, scratch
from patchseries.cli import main
from patchseries.interrupts import SIGNAL_AT_ENV
from patchseries.matrix import TABLE_END, TABLE_START, Row, to_json

CORE = "src/fakelib/core.py"
OTHER_BASE = "a" * 40


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    return errors[0]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _run_remedy(command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a remedy's command of the tool exactly as the error line writes it, by a shell."""
    assert shlex.split(command)[:3] == [sys.executable, "-m", "patchseries"], command
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=False, cwd=cwd)


def _remedy(error: str, start: str = f"{TOOL} ") -> str:
    return start + error.split(start, 1)[1].split(")", 1)[0]


def _signalled(synthetic: Synthetic, signals: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, SIGNAL_AT_ENV: signals}
    command = [sys.executable, "-m", "patchseries", *args, "--patches", str(synthetic.ws.patches)]
    command += ["--workdir", str(synthetic.ws.workdir)]
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env)


def _change_patches(synthetic: Synthetic) -> None:
    second = sorted(synthetic.ws.patches.glob("*.patch"))[1]
    second.write_text(second.read_text().replace("Subject: [PATCH] Add a", "Subject: [PATCH] Add the"))


def _forward_series(synthetic: Synthetic, tmp_path: Path) -> Path:
    """A series pinned to an upstream commit (as patches/master is), with one patch."""
    forward = tmp_path / "forward"
    forward.mkdir()
    pin = 'name = "fakelib"\nversion = "master"\ngit_url = "https://git.invalid/f.git"\n'
    (forward / "base.toml").write_text(f'[base]\n{pin}commit = "{OTHER_BASE}"\n')
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    shutil.copy(first, forward / first.name)
    (forward / "series").write_text(f"{first.name}\n")
    return forward


def test_row_1_export_writes_only_into_a_series_of_the_trees_base(synthetic, tmp_path):
    forward = _forward_series(synthetic, tmp_path)
    before = _files(forward)

    proc = cli(
        "export", "--patches", str(forward), "--workdir", str(synthetic.ws.workdir), "--tree", str(synthetic.tree)
    )

    error = _error(proc)
    assert f"pins fakelib {OTHER_BASE}" in error
    assert "nothing was written" in error
    assert _files(forward) == before
    commit(synthetic.tree, {CORE: "def answer():\n    return 43\n"}, "Change the answer\n\nUpstream-Status: Pending")
    remedy = _run_remedy(_remedy(error, f"{TOOL} export"))
    assert remedy.returncode == 0, remedy.stderr
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3


@pytest.mark.parametrize("name", ["build/mine.txt", ".coverage.mine", "src/fakelib/__pycache__/mine.pyc"])
def test_row_2_a_persons_file_the_trees_ignore_rules_hide_is_kept(synthetic, name):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    mine = tree / name
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("mine\n")
    _change_patches(synthetic)

    error = _error(synthetic.run("apply"))

    assert "the tool did not make" in error
    assert name in error
    assert mine.read_text() == "mine\n"
    assert synthetic.run("apply").returncode == 2  # and again: never blessed by a refused run


def test_row_2_what_the_tools_own_runs_make_is_the_tools(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    from patchseries.trees import recording

    with recording(tree):  # as the main job's stages: installing and testing write ignored files
        (tree / "build").mkdir()
        (tree / "build" / "lib.txt").write_text("built\n")
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert "building a fresh one" in proc.stderr


def _linked_worktree_on_series(synthetic: Synthetic, tmp_path: Path) -> Path:
    linked = tmp_path / "linked"
    git(synthetic.tree, "checkout", "-q", "--detach")
    git(synthetic.tree, "worktree", "add", "-q", str(linked), "series")
    return linked


def test_row_3_a_rebase_stopped_in_a_linked_worktree_is_refused(synthetic, tmp_path):
    linked = _linked_worktree_on_series(synthetic, tmp_path)
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": "sed -i 1s/^pick/edit/"}
    rebase = ["git", "-c", "user.name=P", "-c", "user.email=p@example.com", "rebase", "-q", "-i", "base"]
    subprocess.run(rebase, cwd=linked, env=env, capture_output=True, check=True)
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export"))

    assert f"a git rebase is in progress in {linked}" in error
    assert _files(synthetic.ws.patches) == before


def test_row_3_uncommitted_edits_in_a_linked_worktree_are_refused(synthetic, tmp_path):
    linked = _linked_worktree_on_series(synthetic, tmp_path)
    (linked / CORE).write_text("def answer():\n    return 44\n")

    error = _error(synthetic.run("export"))

    assert f"{linked} has uncommitted changes ({CORE})" in error


@pytest.mark.parametrize("checkout", [["-b", "wip"], ["--detach"]])
def test_row_4_commits_at_head_beyond_the_exported_branch_are_refused(synthetic, checkout):
    git(synthetic.tree, "checkout", "-q", *checkout)
    commit(synthetic.tree, {CORE: "def answer():\n    return 45\n"}, "More work\n\nUpstream-Status: Pending")
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export"))

    assert "1 commit(s) on" in error
    assert "which export would leave out" in error
    assert _files(synthetic.ws.patches) == before
    fix = error.split("(git -C ", 1)[1].split(")", 1)[0]
    git(synthetic.tree, *shlex.split(fix)[1:])  # the remedy, from the tree it names
    assert synthetic.run("export").returncode == 0
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3


def test_row_5_a_persons_git_configuration_never_changes_the_patches(synthetic, tmp_path, monkeypatch):
    config = tmp_path / "gitconfig"
    config.write_text("[format]\n\tsignOff = true\n[diff]\n\tcontext = 5\n\talgorithm = histogram\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    git(synthetic.tree, "config", "format.signOff", "true")  # the edit tree's own configuration too
    git(synthetic.tree, "config", "diff.context", "6")
    before = _files(synthetic.ws.patches)

    exported = synthetic.run("export")
    checked = synthetic.run("check")

    assert exported.returncode == 0, exported.stderr
    assert _files(synthetic.ws.patches) == before
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("line", ["---", "--- more", "diff --git a/x b/x", "Index: x"])
def test_row_6_a_message_line_where_git_am_ends_a_message_is_refused(synthetic, line):
    commit(synthetic.tree, {CORE: "def answer():\n    return 46\n"}, f"Subject\n\nBody\n{line}\nafter\n")
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("export"))

    assert f"has the line {line!r} in its message, where `git am` ends a message" in error
    assert _files(synthetic.ws.patches) == before


def test_row_7_a_series_file_that_is_not_utf8_is_one_error_line_for_export(synthetic):
    with (synthetic.ws.patches / "series").open("ab") as series:
        series.write(b"# caf\xe9\n")

    error = _error(synthetic.run("export"))

    assert "is not UTF-8 text" in error
    assert "Traceback" not in synthetic.run("export").stderr


def test_row_8_a_series_line_spelled_with_dot_slash_is_the_patch_it_names(synthetic):
    series = synthetic.ws.patches / "series"
    names = [line for line in series.read_text().splitlines() if line.endswith(".patch")]
    series.write_text("".join(f"./{name}\n" for name in names))
    git(synthetic.tree, "commit", "-q", "--amend", "-m", "Add a CHANGELOG entry\n\nUpstream-Status: Accepted")

    proc = synthetic.run("export")

    assert proc.returncode == 0, proc.stderr
    assert [line for line in series.read_text().splitlines() if line.endswith(".patch")] == names
    assert synthetic.run("apply").returncode == 0


def test_row_9_an_edit_tree_of_a_checkout_outlives_moving_the_checkout(synthetic, upstream_clone, tmp_path):
    shutil.rmtree(synthetic.tree.parent)
    made = synthetic.run("edit", "--checkout", str(upstream_clone))
    assert made.returncode == 0, made.stderr
    tree = Path(made.stdout.strip())
    commit(tree, {CORE: "def answer():\n    return 47\n"}, "Change\n\nUpstream-Status: Pending")
    upstream_clone.rename(tmp_path / "moved")

    proc = synthetic.run("export", "--tree", str(tree))

    assert proc.returncode == 0, proc.stderr
    assert "exported 3 patches" in proc.stdout


def test_row_10_the_refusals_remedies_run_as_written_work(synthetic):
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    commit(tree, {CORE: "def answer():\n    return 48\n"}, "Mine\n\nUpstream-Status: Pending")
    _change_patches(synthetic)
    for step in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "Pulled")):  # committed, as a pull changes it
        git(synthetic.ws.patches, *step)

    error = _error(synthetic.run("apply"))

    move = error.split("(mv ", 1)[1].split(")", 1)[0]
    subprocess.run(["mv", *shlex.split(move)], check=True)
    exported = _run_remedy(_remedy(error, f"{TOOL} export"), cwd=Path("/"))
    assert exported.returncode == 0, exported.stderr
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 3
    assert synthetic.run("apply").returncode == 0


def test_row_11_the_kept_download_is_checked_on_every_run(synthetic):
    assert synthetic.run("apply").returncode == 0
    download = synthetic.ws.downloads / synthetic.sdist.name
    with download.open("ab") as handle:
        handle.write(b"x")

    for command in ("apply", "fetch", "check"):
        assert "sha256 mismatch" in _error(synthetic.run(command))
    download.unlink()  # the remedy: remove that file and re-run
    assert synthetic.run("apply").returncode == 0


def test_row_12_a_second_interrupt_never_cuts_the_first_ones_clean_up_short(synthetic):
    proc = _signalled(synthetic, "fetch-unpacked:SIGINT,scratch-remove:SIGINT", "apply")

    assert proc.returncode == 130, proc.stderr
    left = sorted(p.name for p in synthetic.ws.trees.iterdir()) if synthetic.ws.trees.exists() else []
    assert left == []  # no .partial, .partial.unpack, nor their claims


def test_row_13_write_docs_through_a_link_writes_the_page_it_names(synthetic, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{TABLE_START}\nold\n{TABLE_END}\nend\n")
    link = tmp_path / "link.md"
    link.symlink_to(page)
    saved = tmp_path / "matrix.json"
    row = Row("2.13.0", before={"t": "1 failed"}, after={"t": "1 passed"}, compile={"with": {"graphs": 2}})
    saved.write_text(to_json([row]))

    status = main(["matrix", "--from-json", str(saved), "--write-docs", str(link), "--patches",
                   str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)])  # fmt: skip

    assert status == 0
    assert link.is_symlink()
    assert "old" not in page.read_text()
    assert matrix.TABLE_START in page.read_text()
    assert str(page) in capsys.readouterr().out.splitlines()[-1]


def test_row_14_a_torch_newer_than_the_tool_knows_is_refused_before_any_work(synthetic, tmp_path):
    fresh = tmp_path / "fresh"

    error = _error(cli("test", "--torch", "9.9.9", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)))

    assert "torch 9.9.9 is newer than every release this tool knows" in error
    assert not fresh.exists()


def test_row_15_a_signal_after_the_work_is_done_changes_nothing(synthetic):
    commit(synthetic.tree, {CORE: "def answer():\n    return 49\n"}, "Change\n\nUpstream-Status: Pending")

    proc = _signalled(synthetic, "command-done", "export")

    assert proc.returncode == 0, proc.stderr
    assert "exported 3 patches" in proc.stdout


def test_row_16_the_docs_say_what_fetch_makes(synthetic):
    options = (Path(__file__).parents[1] / "docs" / "options.md").read_text()
    proc = synthetic.run("fetch")

    assert proc.returncode == 0
    assert proc.stdout.strip() == str(synthetic.ws.trees / "sdist-1.0")
    assert "`fetch` (the base only)" not in options
    assert "`fetch` (the base with the series applied" in options


def test_row_17_an_author_from_the_environment_is_named_as_such(synthetic, monkeypatch):
    monkeypatch.setenv("PATCHSERIES_AUTHOR", "x")

    error = _error(synthetic.run("export"))

    assert "PATCHSERIES_AUTHOR='x' is not an identity" in error
    assert "--author" not in error


def test_row_17_an_export_over_a_series_naming_a_missing_patch_says_how_to_fix_it(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.unlink()

    error = _error(synthetic.run("export"))

    assert error.endswith(f"does not exist; restore that file, or remove line 2 from {synthetic.ws.patches / 'series'}")
    series = synthetic.ws.patches / "series"
    series.write_text("".join(line + "\n" for line in series.read_text().splitlines() if first.name not in line))
    assert synthetic.run("export").returncode == 0  # the remedy, then the export


def _claim_identity(path: Path) -> str:
    return (path.with_name(path.name + scratch.SUFFIX)).read_text().splitlines()[1]


def test_left_1_a_persons_folder_reusing_a_killed_unpacks_inode_is_kept(synthetic, tmp_path):
    fresh = tmp_path / "fresh"
    env = {**os.environ, SIGNAL_AT_ENV: "fetch-unpacked:SIGKILL"}
    command = [sys.executable, "-m", "patchseries", "apply", "--patches", str(synthetic.ws.patches)]
    killed = subprocess.run([*command, "--workdir", str(fresh)], env=env, capture_output=True, check=False)
    assert killed.returncode == -signal.SIGKILL
    unpack = fresh / "trees" / "sdist-1.0.partial.unpack"
    token = _claim_identity(unpack).split(" ", 1)[1]
    shutil.rmtree(unpack)
    unpack.mkdir()  # a person's folder, which the kernel may give the freed inode: say it did
    (unpack / "mine.txt").write_text("mine\n")
    status = os.lstat(unpack)
    claim = unpack.with_name(unpack.name + scratch.SUFFIX)
    claim.write_text(f"{scratch.HEADER}{status.st_dev}:{status.st_ino} {token}\n")

    subprocess.run([*command, "--workdir", str(fresh)], capture_output=True, check=False)

    assert (unpack / "mine.txt").read_text() == "mine\n"


def test_left_2_a_commit_in_a_killed_replaces_old_tree_is_kept(synthetic):
    assert synthetic.run("apply").returncode == 0
    _change_patches(synthetic)
    killed = _signalled(synthetic, "replace-between-renames:SIGKILL", "apply")
    assert killed.returncode == -signal.SIGKILL
    old = synthetic.ws.trees / "sdist-1.0.old"
    commit(old, {CORE: "def answer():\n    return 50\n"}, "Mine in old")

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert git(old, "log", "-1", "--format=%s") == "Mine in old"


def test_left_3_a_persons_folder_at_the_downloads_partial_name_is_kept(synthetic, tmp_path):
    fresh = tmp_path / "fresh"
    mine = fresh / "downloads" / f"{synthetic.sdist.name}.partial"
    mine.mkdir(parents=True)
    (mine / "mine.txt").write_text("mine\n")

    error = _error(cli("fetch", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)))

    assert f"{mine} is in the way" in error
    assert (mine / "mine.txt").read_text() == "mine\n"


def test_left_3_a_persons_folder_at_export_partial_is_kept(synthetic):
    mine = synthetic.ws.patches / "export.partial"
    mine.mkdir()
    (mine / "mine.txt").write_text("mine\n")

    error = _error(synthetic.run("export"))

    assert f"{mine} is in the way" in error
    assert (mine / "mine.txt").read_text() == "mine\n"


def test_left_4_a_link_at_the_locks_path_never_has_its_target_truncated(synthetic, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("precious\n")
    synthetic.ws.workdir.mkdir(parents=True, exist_ok=True)
    (synthetic.ws.workdir / "patchseries.lock").symlink_to(target)

    error = _error(synthetic.run("apply"))

    assert "is a link, not the tool's lock file" in error
    assert target.read_text() == "precious\n"


def test_left_5_a_file_at_a_claims_partial_name_is_kept(synthetic):
    synthetic.ws.trees.mkdir(parents=True, exist_ok=True)
    mine = synthetic.ws.trees / f"sdist-1.0.partial{scratch.SUFFIX}.partial"
    mine.write_text("mine\n")

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert mine.read_text() == "mine\n"


def test_left_6_a_persons_folder_at_old_with_no_tree_yet_is_kept_and_the_run_succeeds(synthetic):
    old = synthetic.ws.trees / "sdist-1.0.old"
    old.mkdir(parents=True)
    (old / "mine.txt").write_text("mine\n")

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert (old / "mine.txt").read_text() == "mine\n"
    assert (synthetic.ws.trees / "sdist-1.0" / ".git").is_dir()


def test_left_7_a_workdir_in_a_repository_that_ignores_only_downloads_is_refused(synthetic, tmp_path):
    repo = tmp_path / "mine"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("work/downloads/\n")

    error = _error(cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(repo / "work")))

    assert "does not ignore it" in error
    assert not (repo / "work").exists()


def test_left_8_a_sigkill_after_the_final_rename_leaves_no_claim_naming_the_tree(synthetic):
    killed = _signalled(synthetic, "scratch-moved:SIGKILL", "apply")
    assert killed.returncode == -signal.SIGKILL

    assert (synthetic.ws.trees / "sdist-1.0").is_dir()
    assert not (synthetic.ws.trees / f"sdist-1.0.partial{scratch.SUFFIX}").exists()
    assert synthetic.run("apply").returncode == 0


def test_the_tree_records_are_json(synthetic):
    assert synthetic.run("apply").returncode == 0
    files = synthetic.ws.trees / "sdist-1.0" / ".git" / "patchseries-files"
    assert isinstance(json.loads(files.read_text()), dict)
