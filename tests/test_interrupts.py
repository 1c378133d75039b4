"""SIGTERM is handled as Ctrl-C: a run signalled at a chosen stage exits 130 and leaves none of its scratch folders.

Each run signals itself at a named stage (``PATCHSERIES_SIGNAL_AT``, see :mod:`patchseries.interrupts`), with the
system's temporary folder pointed at an empty folder of the test's, so that whatever the run left there is seen.
"""

from __future__ import annotations

import pytest

from conftest import INTERRUPTED, commit, files_of, git, run_signalled


@pytest.mark.parametrize("stage", ["fetch-download", "fetch-unpacked"])
def test_sigterm_while_fetching_leaves_no_scratch_folder_and_a_rerun_completes(synthetic, tmp_path, stage):
    """A SIGTERM during ``fetch`` leaves no ``W/tmp*/``, no half-made tree or download."""
    fresh = tmp_path / "fresh"

    proc = run_signalled(synthetic, tmp_path, stage, "fetch", "--workdir", str(fresh))

    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.splitlines()[-1] == INTERRUPTED
    assert list((tmp_path / "system-tmp").iterdir()) == []
    assert sorted(p.name for p in fresh.iterdir()) == ["downloads", "patchseries.lock"]  # no tmp*/, no trees/
    assert [p.name for p in (fresh / "downloads").iterdir()] in ([], [synthetic.sdist.name])  # no .partial
    rerun = synthetic.run("fetch")
    assert rerun.returncode == 0, rerun.stderr


def test_sigterm_while_exporting_leaves_the_old_series_and_no_staging(synthetic, tmp_path):
    """No ``patches/export.partial/`` and no scratch clone in the system's temporary folder are left."""
    commit(synthetic.tree, {"src/fakelib/__init__.py": "VERSION = '1.0.1'\n"}, "Fix the version")
    before = files_of(synthetic.ws.patches)

    proc = run_signalled(
        synthetic, tmp_path, "export-staged", "export", "--author", "A U Thor <a@example.com>", "--workdir",
        str(synthetic.ws.workdir),
    )  # fmt: skip

    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.splitlines() == [INTERRUPTED]
    assert files_of(synthetic.ws.patches) == before
    assert list((tmp_path / "system-tmp").iterdir()) == []
    assert sorted(p.name for p in synthetic.ws.workdir.iterdir()) == ["downloads", "edit", "patchseries.lock"]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGHUP"])
def test_sigint_sighup_and_sigterm_are_the_same_interrupt(synthetic, tmp_path, signame):
    proc = run_signalled(
        synthetic, tmp_path, f"export-staged:{signame}", "export", "--workdir", str(synthetic.ws.workdir)
    )

    assert proc.returncode == 130
    assert proc.stderr.splitlines() == [INTERRUPTED]
    assert not (synthetic.ws.patches / "export.partial").exists()


def test_sigterm_while_recording_the_applied_series_leaves_the_old_tree_whole(synthetic, tmp_path):
    """The record of what the tool applied is written in one rename into the fresh tree, which then replaces the old
    one: never an empty record, under which the tool's own commits would read as a person's."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    record = tree / ".git" / "patchseries-tree"
    recorded = record.read_text()
    second = sorted(synthetic.ws.patches.glob("*.patch"))[1]
    second.write_text(second.read_text().replace("Subject: [PATCH] ", "Subject: [PATCH] Reworded: ", 1))

    proc = run_signalled(synthetic, tmp_path, "write-patchseries-tree", "apply", "--workdir", str(synthetic.ws.workdir))

    assert proc.returncode == 130, proc.stderr
    assert record.read_text() == recorded  # the old tree and its record, whole
    assert sorted(path.name for path in synthetic.ws.trees.iterdir()) == ["sdist-1.0"]  # no half-made tree
    rerun = synthetic.run("apply")
    assert rerun.returncode == 0, rerun.stderr
    assert "building a fresh one" in rerun.stderr
    assert record.read_text() != recorded


@pytest.mark.parametrize("stage", ["fetch-unpacked", "replace-between-renames", "write-patchseries-tree"])
def test_sigkill_at_any_stage_of_a_build_is_cleaned_by_the_next_run(synthetic, tmp_path, stage):
    """A SIGKILL runs no clean-up: what it leaves (a half-built tree, the unpacked sdist, an old tree between two
    renames) is in the run's scratch folder, which the next run removes, and completes."""
    assert synthetic.run("apply").returncode == 0
    second = sorted(synthetic.ws.patches.glob("*.patch"))[1]
    second.write_text(second.read_text().replace("Subject: [PATCH] ", "Subject: [PATCH] Reworded: ", 1))

    killed = run_signalled(synthetic, tmp_path, f"{stage}:SIGKILL", "apply", "--workdir", str(synthetic.ws.workdir))
    rerun = synthetic.run("apply")

    assert killed.returncode == -9
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(path.name for path in synthetic.ws.trees.iterdir()) == ["sdist-1.0"]
    assert sorted(path.name for path in synthetic.ws.workdir.iterdir()) == [
        "downloads", "edit", "patchseries.lock", "trees"
    ]  # fmt: skip
    tree = synthetic.ws.trees / "sdist-1.0"
    assert git(tree, "log", "-1", "--format=%s", "series") == "Reworded: Add a CHANGELOG entry"


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_an_interrupt_between_the_two_renames_puts_the_old_tree_back(synthetic, tmp_path, signame):
    """Never the old tree left as `<tree>.old` with no tree in place."""
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    head = git(tree, "rev-parse", "series")
    second = sorted(synthetic.ws.patches.glob("*.patch"))[1]
    second.write_text(second.read_text().replace("Subject: [PATCH] ", "Subject: [PATCH] Reworded: ", 1))

    proc = run_signalled(
        synthetic, tmp_path, f"replace-between-renames:{signame}", "apply", "--workdir", str(synthetic.ws.workdir)
    )

    assert proc.returncode == 130, proc.stderr
    assert sorted(path.name for path in synthetic.ws.trees.iterdir()) == ["sdist-1.0"]
    assert git(tree, "rev-parse", "series") == head


def test_a_signal_after_the_work_is_done_changes_nothing(synthetic, tmp_path):
    commit(
        synthetic.tree, {"src/fakelib/core.py": "def answer():\n    return 49\n"}, "Change\n\nUpstream-Status: Pending"
    )

    proc = run_signalled(synthetic, tmp_path, "command-done", "export", "--workdir", str(synthetic.ws.workdir))

    assert proc.returncode == 0, proc.stderr
    assert "exported 3 patches" in proc.stdout
