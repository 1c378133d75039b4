"""Scratch folders: build in a fresh folder under ``<workdir>/tmp/``, then move the result into place with one rename.

The run that holds the work directory's lock owns ``tmp/`` (:func:`patchseries.lock.workdir_lock` empties it when
taken and when released): a killed run's scratch is left only there, and the next run removes it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from patchseries.interrupts import stage
from patchseries.paths import remove as remove_path


@contextmanager
def directory(workdir: Path, prefix: str = "run-") -> Iterator[Path]:
    """A fresh folder under ``<workdir>/tmp``, removed on leaving the block, also on an interrupt."""
    root = workdir / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=prefix, ignore_cleanup_errors=True) as name:
        yield Path(name)


# Transitional, for the callers that still build beside their target (`<tree>.partial`, `<tree>.old`, a download's
# `.partial`, dist's staging folder): a name the tool works under is the tool's, and what is there is removed.
# Remove these once those callers build under directory().
MARK = ".patchseries-scratch"


def claim(path: Path, moving_here: Path | None = None) -> Path:
    remove(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def make_dir(path: Path, marked: bool = False) -> Path:
    path.mkdir()
    return path


def remove(path: Path) -> None:
    if path.exists() or path.is_symlink():
        stage("scratch-remove")
        remove_path(path)


def move_out(path: Path, dest: Path) -> None:
    path.rename(dest)
    stage("scratch-moved")


def owned(path: Path) -> bool:
    return True


def own(path: Path) -> None:
    """Nothing to record (the claims are gone)."""


release = own
remove_leftover = remove
