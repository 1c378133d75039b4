"""One run at a time in a work directory: a second one is refused at once, naming the first, and changes nothing."""

from __future__ import annotations

import fcntl
import os

import pytest

from conftest import git
from patchseries.errors import SeriesError
from patchseries.lock import LOCK_NAME, workdir_lock


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
