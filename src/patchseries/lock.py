"""One run at a time per work directory: an exclusive ``flock`` on ``<workdir>/patchseries.lock``.

Two runs in one work directory would rebuild the same trees, downloads and environments under each other. The lock
is held for the whole run and released by the kernel when the process ends, however it ends.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.gitcmd import git

LOCK_NAME = "patchseries.lock"
# what the tool writes in a work directory (paths.Workspace, apply.EDIT_DIR, hooks)
WORKDIR_NAMES = ("downloads", "trees", "venvs", "reports", "edit", "hook-envs", LOCK_NAME, "tmp")


@contextmanager
def workdir_lock(workdir: Path, what: str, given_as: str = "--workdir") -> Iterator[None]:
    """Hold the work directory's lock, or refuse at once, naming the run that holds it; a work directory in a git
    tree that does not ignore it is refused before it is made (:func:`refuse_unless_ignored`). ``given_as``: where
    the work directory came from (``--workdir``, or the variable ``PATCHSERIES_WORKDIR``), which a refusal names."""
    refuse_unless_ignored(workdir, given_as)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_NAME
    try:  # never through a link: opened as it is, its target (a file of anyone's) would be truncated
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise SeriesError(
            f"{path} is a link, not the tool's lock file; move it away (the tool makes its own there) and re-run"
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo or a device: "Invalid argument", naming nothing
            raise SeriesError(f"{path} is not a file, not the tool's lock file; move it away and re-run")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "pid unknown"
            raise SeriesError(
                f"another patchseries run ({holder}) holds {path}; wait for it to end and re-run, "
                "or pass another --workdir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {what}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        yield
    finally:
        os.close(fd)


@contextmanager
def series_lock(folder: Path) -> Iterator[None]:
    """Hold the lock of a series folder that ``export`` or ``forward`` rewrites, or refuse at once.

    Two runs from two work directories may write one ``patches/``; each would discard the other's staged export. The
    lock is the folder's own (``flock`` of the directory), so that it is shared by every work directory and writes no
    file into the series.
    """
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SeriesError(
                f"another patchseries export or forward is writing {folder}; wait for it to end and re-run"
            ) from None
        yield
    finally:
        os.close(fd)


def refuse_unless_ignored(workdir: Path, given_as: str = "--workdir") -> None:
    """Refuse a work directory inside a git tree that does not ignore it (``.work/edit/<base>``, a clone of yours,
    ``--workdir .`` in the project): the tool's downloads and trees would be written among that tree's files. The
    project's ``.work/`` and any folder outside a git tree are fine."""
    for folder in (workdir, *workdir.parents):
        if not (folder / ".git").exists():
            continue
        # paths inside the work directory: git tells a folder pattern (`/.work/`) only for a path below it; each of
        # the tool's, since a rule may ignore one of them only (`downloads`)
        paths = "".join(f"{workdir / name}\0" for name in WORKDIR_NAMES)
        ignored = git("check-ignore", "-z", "--stdin", cwd=folder, stdin=paths, check=False).stdout.split("\0")
        if len([path for path in ignored if path]) < len(WORKDIR_NAMES):
            remedy = "pass a --workdir outside it"
            if given_as != "--workdir":  # a variable: named, since no option on the command line says where it is
                remedy = f"it comes from {given_as}: set that to a folder outside it, or unset it"
            raise SeriesError(
                f"the work directory {workdir} is inside the git tree {folder}, which does not ignore it and may be "
                f"yours: the tool would write downloads/ and trees/ among its files; {remedy}"
            )
        return
