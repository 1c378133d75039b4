"""The tool's one lock: an exclusive ``flock``, taken at once or refused at once, naming the run that holds it.

Three things are locked with it: a work directory (its file ``patchseries.lock``, which names the run), a series
folder that ``export`` or ``forward`` rewrites, and a ``dist`` folder that ``wheels`` writes (each folder's own
``flock``, so that runs from every work directory share it and no file is added to the folder). The kernel releases
a lock when the process ends, however it ends.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.gitcmd import git

LOCK_NAME = "patchseries.lock"
# what the tool writes in a work directory (paths.Workspace, apply.EDIT_DIR, hooks)
WORKDIR_NAMES = ("downloads", "trees", "venvs", "reports", "edit", "hook-envs", LOCK_NAME, "tmp")


class Lock:
    """The ``flock`` of ``path``: a folder, or (``file``) a lock file made at it; held from :meth:`acquire` until
    :meth:`release`. A second holder is refused with ``refusal(holder)``: ``holder`` is the text the lock file holds,
    or for a folder ``pid N`` (read from ``/proc/locks``), or ``""`` where it is not known."""

    def __init__(self, path: Path, refusal: Callable[[str], str], *, file: bool = False) -> None:
        self.path = path
        self.refusal = refusal
        self.file = file
        self.fd: int | None = None

    def acquire(self, make: bool = False) -> None:
        """Hold the lock; ``make``: make the folder (for a lock file, the folder it is in) first if it is missing,
        else a missing folder is not locked yet."""
        folder = self.path.parent if self.file else self.path
        while self.fd is None:
            if make:
                folder.mkdir(parents=True, exist_ok=True)
            try:
                fd = self._open()
            except FileNotFoundError:
                if make:
                    continue  # removed between the two calls: made again
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() if self.file else _holder(fd)
                os.close(fd)
                raise SeriesError(self.refusal(holder)) from None
            # what is locked must be what is at the path: a run that held it may have removed it since
            if _same(os.fstat(fd), self.path):
                self.fd = fd
            else:
                os.close(fd)
                if not make:
                    return

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _open(self) -> int:
        if not self.file:
            return os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:  # never through a link: opened as it is, its target (a file of anyone's) would be truncated
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise SeriesError(
                f"{self.path} is a link, not the tool's lock file; move it away (the tool makes its own there) and "
                "re-run"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo or a device: "Invalid argument", naming nothing
            os.close(fd)
            raise SeriesError(f"{self.path} is not a file, not the tool's lock file; move it away and re-run")
        return fd


@contextmanager
def hold(path: Path, refusal: Callable[[str], str], *, file: bool = False, make: bool = False) -> Iterator[Lock]:
    """:class:`Lock` of ``path``, acquired now (``make``: see :meth:`Lock.acquire`) and released on leaving."""
    lock = Lock(path, refusal, file=file)
    try:
        lock.acquire(make)
        yield lock
    finally:
        lock.release()


@contextmanager
def workdir_lock(workdir: Path, what: str, given_as: str = "--workdir") -> Iterator[None]:
    """Hold the work directory's lock (one run at a time in it), writing ``what`` into it for a second run's refusal;
    a work directory in a git tree that does not ignore it is refused before it is made (:func:`refuse_unless_ignored`).
    ``given_as``: where the work directory came from (``--workdir``, or the variable ``PATCHSERIES_WORKDIR``)."""
    refuse_unless_ignored(workdir, given_as)
    path = workdir / LOCK_NAME

    def refusal(holder: str) -> str:
        return (
            f"another patchseries run ({holder or 'pid unknown'}) holds {path}; wait for it to end and re-run, "
            "or pass another --workdir"
        )

    with hold(path, refusal, file=True, make=True) as lock:
        assert lock.fd is not None
        os.ftruncate(lock.fd, 0)
        os.write(lock.fd, f"pid {os.getpid()}: {what}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        yield


@contextmanager
def series_lock(folder: Path) -> Iterator[None]:
    """Hold the lock of a series folder that ``export`` or ``forward`` rewrites, or refuse at once: two runs from two
    work directories into one ``patches/`` would each discard the other's staged export."""
    refusal = f"another patchseries export or forward is writing {folder}; wait for it to end and re-run"
    with hold(folder, lambda _: refusal):
        yield


def _same(status: os.stat_result, path: Path) -> bool:
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (status.st_dev, status.st_ino)


def _holder(fd: int) -> str:
    """``pid N``: the process that holds the ``flock`` of ``fd``'s file, read from ``/proc/locks`` (Linux); ``""``
    where it is not known."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return ""
    status = os.fstat(fd)
    wanted = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields:
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == wanted:
                return f"pid {int(fields[4])}"
        except ValueError:
            continue
    return ""


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
