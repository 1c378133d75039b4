"""One run at a time in a work directory: a second one is refused at once, naming the first, and changes nothing."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

import pytest

from conftest import cli, commit, git, one_error
from patchseries.errors import SeriesError
from patchseries.interrupts import SIGNAL_AT_ENV
from patchseries.lock import LOCK_NAME, workdir_lock
from patchseries.series import read_series


def _hold(workdir, holder="pid 4242: patchseries test, since 2026-12-01 10:00:00"):
    fd = os.open(workdir / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, holder.encode())
    return fd


def test_second_run_in_a_workdir_is_refused_and_changes_nothing(synthetic):
    series_before = git(synthetic.tree, "rev-parse", "series")
    fd = _hold(synthetic.ws.workdir)
    try:
        proc = synthetic.run("apply", "--patches", str(synthetic.ws.patches))
    finally:
        os.close(fd)

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: another patchseries run (pid 4242: patchseries test, since 2026-12-01 10:00:00) holds "
        f"{synthetic.ws.workdir / LOCK_NAME}; wait for it to end and re-run, or pass another --workdir"
    ]
    assert git(synthetic.tree, "rev-parse", "series") == series_before
    assert synthetic.run("apply").returncode == 0  # released with the holder


def test_lock_names_its_holder_and_is_exclusive(tmp_path):
    with workdir_lock(tmp_path / "work", "patchseries apply"):
        assert (tmp_path / "work" / LOCK_NAME).read_text().startswith(f"pid {os.getpid()}: patchseries apply, since")
        second = workdir_lock(tmp_path / "work", "patchseries test")
        with pytest.raises(SeriesError, match=r"another patchseries run \(pid \d+: patchseries apply"), second:
            pass
    with workdir_lock(tmp_path / "work", "patchseries test"):
        pass


@pytest.mark.parametrize("second", ["export", "forward"])
def test_two_exports_into_one_series_folder_from_two_work_directories_do_not_interleave(synthetic, tmp_path, second):
    """Two ``export --drop-missing`` runs at once, from one tree into one ``patches/`` with two ``--workdir``s: the
    ``patches/`` lock keeps them from leaving a mixed series.

    The first run stops itself (SIGSTOP) once its export is staged, holding its locks; the second runs meanwhile.
    """
    for number in range(3):
        commit(synthetic.tree, {f"src/fakelib/m{number}.py": f"X = {number}\n"}, f"Add module {number}")
    env = {**os.environ, SIGNAL_AT_ENV: "export-staged:SIGSTOP"}
    command = [sys.executable, "-m", "patchseries", "export", "--drop-missing", "--tree", str(synthetic.tree),
               "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)]  # fmt: skip
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)  # returns once the first run has stopped itself
        assert os.WIFSTOPPED(status)
        git(synthetic.tree, "reset", "-q", "--hard", "series~4")  # the second run would export 1 patch
        if second == "forward":  # a forward series written into the release series' own folder
            args = ["forward", "--checkout", str(synthetic.tree), "--to", str(synthetic.ws.patches)]
        else:
            args = ["export", "--drop-missing", "--tree", str(synthetic.tree)]

        proc = cli(*args, "--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "other"))

        assert proc.returncode == 2
        assert proc.stderr.splitlines()[-1] == (
            f"error: another patchseries export or forward is writing {synthetic.ws.patches}; wait for it to end and "
            "re-run"
        )
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert out.startswith("exported 5 patches")
    assert len(read_series(synthetic.ws.series_file)) == 5
    assert len(list(synthetic.ws.patches.glob("*.patch"))) == 5


def test_a_link_at_the_locks_path_never_has_its_target_truncated(synthetic, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("precious\n")
    synthetic.ws.workdir.mkdir(parents=True, exist_ok=True)
    (synthetic.ws.workdir / LOCK_NAME).symlink_to(target)

    error = one_error(synthetic.run("apply"))

    assert str(synthetic.ws.workdir / LOCK_NAME) in error
    assert target.read_text() == "precious\n"


def test_a_killed_runs_lock_and_scratch_never_refuse_the_next_run(synthetic, tmp_path):
    """The kernel drops a killed run's lock; what it left in ``<workdir>/patchseries-tmp`` goes with the next run."""
    env = {**os.environ, SIGNAL_AT_ENV: "fetch-unpacked:SIGKILL"}
    options = ["--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)]
    killed = subprocess.run([sys.executable, "-m", "patchseries", "fetch", *options], env=env, check=False)
    assert killed.returncode == -signal.SIGKILL
    leftover = synthetic.ws.scratch / "run-killed"  # as a killed run's scratch folder is left
    leftover.mkdir(parents=True)
    (leftover / "half-built").write_text("left by a killed run\n")

    proc = cli("fetch", *options)

    assert proc.returncode == 0, proc.stderr
    assert not synthetic.ws.scratch.exists()


def test_a_link_at_the_scratch_folders_name_is_removed_never_followed(synthetic, tmp_path):
    theirs = tmp_path / "a-folder-of-theirs"
    (theirs / "important").mkdir(parents=True)
    assert synthetic.run("fetch").returncode == 0  # the scratch folder made, then removed
    synthetic.ws.scratch.symlink_to(theirs)

    for _ in range(2):
        assert synthetic.run("fetch").returncode == 0

    assert not synthetic.ws.scratch.is_symlink()
    assert [path.name for path in theirs.iterdir()] == ["important"]


def test_a_persons_tmp_folder_in_the_work_directory_is_kept(tmp_path):
    """A work directory may be a folder of the person's (``--workdir ~``): only the tool's scratch name is emptied."""
    mine = tmp_path / "home" / "tmp" / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine\n")

    with workdir_lock(tmp_path / "home", "patchseries check"):
        pass

    assert mine.read_text() == "mine\n"
