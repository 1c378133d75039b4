"""The tool's one lock: an exclusive ``flock``, taken or refused at once, held for the whole command, on a work
directory (``patchseries.lock`` names the run), a series or ``dist`` folder; the kernel drops it as its process ends."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.gitcmd import git
from patchseries.paths import SCRATCH, remove

LOCK_NAME = "patchseries.lock"
_WORKDIR_NAMES = ("downloads", "trees", "venvs", "reports", "edit", "hook-envs", LOCK_NAME, SCRATCH)  # what it writes


class Lock:  # the flock of the folder or lock file path; a second holder is refused with refusal(its lock file)
    held: set[Path] = set()  # folders this process holds: held again, not refused (`forward --to` the one it reads)

    def __init__(self, path: Path, refusal: Callable[[str], str], *, file: bool = False, make: bool = False) -> None:
        self.path, self.refusal, self.file, self.make = path, refusal, file, make
        self.fd: int | None = None

    def __enter__(self) -> Lock:  # held for the with block: acquired with ``make``, released however it ends
        self.acquire(self.make)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            Lock.held.discard(self.path.resolve())
            os.close(self.fd)
            self.fd = None

    def acquire(self, make: bool = False) -> None:
        """Hold the lock; ``make``: make the folder first, else a missing folder is not locked (yet)."""
        if self.fd is not None or self.path.resolve() in Lock.held:
            return
        if make:
            (self.path.parent if self.file else self.path).mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a link at the lock file's path is refused, its target never written
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW if self.file else os.O_RDONLY | os.O_DIRECTORY
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() if self.file else ""
            os.close(fd)
            raise SeriesError(self.refusal(holder)) from None
        self.fd = fd
        Lock.held |= set() if self.file else {self.path.resolve()}


@contextmanager
def workdir_lock(workdir: Path, what: str, given_as: str = "--workdir") -> Iterator[None]:
    """Hold the work directory's lock, naming the run; its holder owns the scratch folder, emptied on both ends."""
    # refused in a git tree that does not ignore it (``--workdir .`` in a clone, an edit tree)
    if (folder := next((f for f in (workdir, *workdir.parents) if (f / ".git").exists()), None)) is not None:
        # each: a rule may ignore some of them only
        paths = "".join(f"{workdir / name}\0" for name in _WORKDIR_NAMES)
        ignored = git("check-ignore", "-z", "--stdin", cwd=folder, stdin=paths, check=False).stdout.split("\0")
        if len([path for path in ignored if path]) < len(_WORKDIR_NAMES):
            remedy = "pass a --workdir outside it"
            if given_as != "--workdir":
                remedy = f"it comes from {given_as}: set that to a folder outside it, or unset it"
            raise SeriesError(f"the work directory {workdir} is inside the git tree {folder}, which does "
                              "not ignore it and may be yours: the tool would write downloads/ and trees/ "
                              f"among its files; {remedy}")  # fmt: skip
    path = workdir / LOCK_NAME
    refusal = "another patchseries run ({}) holds {}; wait for it to end and re-run, or pass another --workdir"
    with Lock(path, lambda holder: refusal.format(holder or "pid unknown", path), file=True, make=True) as lock:
        assert lock.fd is not None
        os.ftruncate(lock.fd, 0)
        os.write(lock.fd, f"pid {os.getpid()}: {what}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        _empty(workdir / SCRATCH)
        try:
            yield
        finally:
            _empty(workdir / SCRATCH)


def _empty(scratch: Path) -> None:  # best effort; a link there is removed, never followed
    with suppress(OSError):
        remove(scratch)


def series_lock(folder: Path) -> Lock:
    refusal = f"another patchseries export or forward is writing {folder}; wait for it to end and re-run"
    return Lock(folder, lambda _: refusal)
