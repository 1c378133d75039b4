"""A contributor's work in the tree is never lost: refused without --discard, backed up with it, named when tested."""

from __future__ import annotations

from conftest import cli, commit, git, write_pin
from patchseries import pipeline, testrun
from patchseries.pipeline import BaseChoice
from patchseries.progress import quiet

CORE = "src/fakelib/core.py"


def _change_patches(synthetic, new_subject="Add the CHANGELOG entry"):
    """What a `git pull` that brings a changed patch does to patches/."""
    second = sorted(synthetic.ws.patches.glob("*.patch"))[1]
    text = second.read_text()
    old_subject = text.split("Subject: [PATCH] ", 1)[1].splitlines()[0]
    second.write_text(text.replace(f"Subject: [PATCH] {old_subject}", f"Subject: [PATCH] {new_subject}"))


def _edit(synthetic, text="def answer():\n    return 42  # my edit\n"):
    (synthetic.tree / CORE).write_text(text)


def test_uncommitted_edit_is_not_overwritten_when_patches_change(synthetic):
    assert synthetic.run("apply").returncode == 0
    _edit(synthetic)
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(f"error: {synthetic.tree} has 1 uncommitted file ({CORE})")
    assert "--discard" in proc.stderr.splitlines()[-1]
    assert "my edit" in (synthetic.tree / CORE).read_text()


def test_discard_keeps_each_runs_uncommitted_edits_as_its_own_stash_entry(synthetic):
    assert synthetic.run("apply").returncode == 0
    for number, subject in enumerate(["First change", "Second change"], 1):
        _edit(synthetic, f"def answer():\n    return 42  # edit {number}\n")
        _change_patches(synthetic, subject)

        proc = synthetic.run("apply", "--discard")

        assert proc.returncode == 0, proc.stderr
        assert "backed up uncommitted changes: git stash entry" in proc.stderr
        assert "edit" not in (synthetic.tree / CORE).read_text()
    stashes = git(synthetic.tree, "stash", "list").splitlines()
    assert len(stashes) == 2
    assert all("patchseries backup" in line for line in stashes)
    assert "# edit 2" in git(synthetic.tree, "stash", "show", "-p", "stash@{0}")
    assert "# edit 1" in git(synthetic.tree, "stash", "show", "-p", "stash@{1}")


def test_unexported_commit_survives_a_moved_sdist_base(synthetic):
    write_pin(synthetic.ws.patches, synthetic.sdist, base_commit=git(synthetic.tree, "rev-parse", "base"))
    assert synthetic.run("apply").returncode == 0
    commit(synthetic.tree, {CORE: "def answer():\n    return 42  # unexported\n"}, "My unexported work")
    mine = git(synthetic.tree, "rev-parse", "HEAD")
    git(synthetic.tree, "branch", "-f", "base", "series~1")  # the base branch moved away from the pinned commit

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert "moved branch base" in proc.stderr
    assert git(synthetic.tree, "rev-parse", "series") == mine
    assert "tree: local changes, not patches/ (1 commit not in patches/)" in proc.stderr


def test_unexported_commit_survives_a_checkout_at_a_new_commit(synthetic, upstream_clone):
    checkout = ("--checkout", str(upstream_clone))
    assert synthetic.run("apply", *checkout).returncode == 0
    tree = next(synthetic.ws.trees.glob("checkout-*"))
    commit(tree, {CORE: "def answer():\n    return 42  # unexported\n"}, "My unexported work")
    mine = git(tree, "rev-parse", "HEAD")
    commit(upstream_clone, {"README": "later\n"}, "A later upstream commit")

    refused = synthetic.run("apply", *checkout, "--force-base")

    assert refused.returncode == 2
    assert "1 commit not in patches/, which re-applying patches/ would lose" in refused.stderr
    assert git(tree, "rev-parse", "series") == mine
    assert git(tree, "rev-parse", "base") == git(upstream_clone, "rev-parse", "HEAD")

    forced = synthetic.run("apply", *checkout, "--force-base", "--discard")

    assert forced.returncode == 0, forced.stderr
    backups = git(tree, "for-each-ref", "--format=%(refname) %(objectname)", "refs/patchseries/backup/")
    assert backups.split()[1] == mine
    assert f"series: {backups.split()[0]}" in forced.stderr


def test_runs_with_other_patches_keep_a_backup_each(synthetic):
    other = synthetic.ws.patches.parent / "other-patches"
    other.mkdir()
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    (other / first.name).write_bytes(first.read_bytes())
    (other / "series").write_text(f"{first.name}\n")
    (other / "base.toml").write_bytes(synthetic.ws.pin_file.read_bytes())
    assert synthetic.run("apply").returncode == 0
    mine = []
    for number, patches in enumerate([other, synthetic.ws.patches], 1):
        commit(synthetic.tree, {f"src/fakelib/mine{number}.py": "X = 1\n"}, f"My work {number}")
        mine.append(git(synthetic.tree, "rev-parse", "HEAD"))
        workdir = ("--workdir", str(synthetic.ws.workdir))
        assert cli("apply", "--patches", str(patches), *workdir).returncode == 2  # refused without --discard

        proc = cli("apply", "--discard", "--patches", str(patches), *workdir)

        assert proc.returncode == 0, proc.stderr
    kept = git(synthetic.tree, "for-each-ref", "--format=%(objectname)", "refs/patchseries/backup/").split()
    assert sorted(kept) == sorted(mine)


def _job(synthetic, monkeypatch):
    """The main job on the synthetic series, with the environment and pytest stubbed out: only the summary counts."""
    reports = synthetic.ws.reports
    outcome = testrun.TestOutcome(1, 0, 0, 0, None, reports / "junit.xml", None)
    monkeypatch.setattr(pipeline, "ensure_environment", lambda *args, **kwargs: None)
    monkeypatch.setattr(pipeline, "run_tests", lambda *args, **kwargs: outcome)
    return pipeline.summary(pipeline.run_main_job(synthetic.ws, BaseChoice(), "2.13.0", quiet))


def test_unchanged_tree_is_reported_as_the_series(synthetic, monkeypatch):
    _job(synthetic, monkeypatch)

    text = _job(synthetic, monkeypatch)

    assert "patches:   2 in series, already applied, reused" in text
    assert "local changes" not in text
    assert text.endswith("result:    OK")


def test_tree_with_an_edit_is_tested_but_not_called_the_series(synthetic, monkeypatch):
    _job(synthetic, monkeypatch)
    _edit(synthetic)

    text = _job(synthetic, monkeypatch)

    assert "reused" not in text
    assert "applied" not in text.split("patches:", 1)[1].splitlines()[0].replace("not applied", "")
    assert f"(branch series): local changes, not patches/ (1 uncommitted file ({CORE}))" in text
    assert text.endswith("result:    OK, for the tree's local changes, not for patches/")
    assert "my edit" in (synthetic.tree / CORE).read_text()


def test_tree_with_an_extra_commit_is_tested_but_not_called_the_series(synthetic, monkeypatch):
    _job(synthetic, monkeypatch)
    commit(synthetic.tree, {CORE: "def answer():\n    return 42  # extra\n"}, "Extra commit")

    text = _job(synthetic, monkeypatch)

    assert "local changes, not patches/ (1 commit not in patches/)" in text


def test_exported_work_is_re_applied_without_discard(synthetic):
    assert synthetic.run("apply").returncode == 0
    commit(synthetic.tree, {CORE: "def answer():\n    return 42  # exported\n"}, "Exported work")
    assert synthetic.run("export").returncode == 0

    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert "applied 0003-Exported-work.patch" in proc.stderr
    assert git(synthetic.tree, "for-each-ref", "refs/patchseries/backup/") == ""


def test_export_refuses_uncommitted_staged_and_untracked_changes(synthetic):
    assert synthetic.run("apply").returncode == 0
    before = {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()}
    _edit(synthetic)
    git(synthetic.tree, "add", CORE)
    (synthetic.tree / "src/fakelib/new.py").write_text("NEW = 1\n")

    proc = synthetic.run("export")

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(
        f"error: {synthetic.tree} has uncommitted changes ({CORE}, src/fakelib/new.py), which export would leave out"
    )
    assert {p.name: p.read_bytes() for p in synthetic.ws.patches.iterdir()} == before


def test_a_tree_whose_git_is_broken_is_refused_and_the_checkout_around_it_untouched(synthetic, tmp_path):
    """Issue 31, row 7: git must not fall through to a repository above the tree (the project's own checkout)."""
    assert synthetic.run("apply").returncode == 0
    git(tmp_path, "init", "-q")  # the folder around patches/ and the work directory is a checkout, as the project is
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "the person's checkout")
    before = git(tmp_path, "for-each-ref")
    (synthetic.tree / ".git" / "HEAD").write_text("")
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: ")
    assert git(tmp_path, "for-each-ref") == before
    assert git(tmp_path, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_persons_branch_named_like_the_tools_work_branch_is_never_reset(synthetic):
    """Issue 31, row 1: `series-wip` with a commit and an edit of a person's is not the tool's interrupted work."""
    assert synthetic.run("apply").returncode == 0
    git(synthetic.tree, "checkout", "-q", "-b", "series-wip")
    commit(synthetic.tree, {CORE: "def answer():\n    return 42  # my commit\n"}, "My work")
    mine = git(synthetic.tree, "rev-parse", "HEAD")
    _edit(synthetic, "def answer():\n    return 42  # my commit and my edit\n")

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "series-wip" in proc.stderr.splitlines()[-1]
    assert git(synthetic.tree, "rev-parse", "series-wip") == mine
    assert git(synthetic.tree, "symbolic-ref", "--short", "HEAD") == "series-wip"
    assert "my edit" in (synthetic.tree / CORE).read_text()


def test_a_tree_whose_git_was_moved_away_is_never_deleted_or_rebuilt(synthetic):
    """Issue 31, row 13: a tree folder without its `.git` may hold a person's files."""
    assert synthetic.run("apply").returncode == 0
    (synthetic.tree / ".git").rename(synthetic.tree.parent / "moved-git")
    (synthetic.tree / "my-notes.txt").write_text("mine\n")

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"error: {synthetic.tree} exists but is no git repository")
    assert (synthetic.tree / "my-notes.txt").read_text() == "mine\n"
    assert not (synthetic.tree / ".git").exists()


def test_series_checked_out_in_a_linked_worktree_is_refused_and_nothing_changes(synthetic, tmp_path):
    """Issue 31, row 12: `git branch -M` failed halfway, leaving the tree on the tool's work branch."""
    assert synthetic.run("apply").returncode == 0
    linked = tmp_path / "linked"
    git(synthetic.tree, "checkout", "-q", "--detach")
    git(synthetic.tree, "worktree", "add", "-q", str(linked), "series")
    (linked / CORE).write_text("def answer():\n    return 42  # edited in the linked worktree\n")
    head_before = git(synthetic.tree, "rev-parse", "HEAD")
    _change_patches(synthetic)

    proc = synthetic.run("apply")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "checked out in the linked worktree" in proc.stderr.splitlines()[-1]
    assert git(synthetic.tree, "rev-parse", "HEAD") == head_before
    assert "series-wip" not in git(synthetic.tree, "branch", "--list")
    assert "edited in the linked worktree" in (linked / CORE).read_text()


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
