"""Rewriting files so that an interrupt leaves the old state or the new one, never a mix.

One file is written beside itself and renamed over the old one (:func:`write_file`). Several files of one folder (an
export of the series: patches and ``series``) are staged in ``<folder>/export.partial/`` first. Writing the commit
record there is the one step that makes the new files the folder's; every reader of the folder first carries out a
committed rewrite that an interrupt left half-done (:func:`finish_rewrite`), so it sees the old files or the new ones,
and a re-run completes the rewrite. A staged rewrite without its record is ignored, and discarded by the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.interrupts import stage
from patchseries.paths import remove

STAGING = "export.partial"
_RECORD = ".commit"
_MARK = ".patchseries-staging"  # in the staging folder: made by an export, not a person's folder of that name


def write_file(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one rename; the text is written as it is (no newline translation).

    A write that fails (a full disk, an interrupt) leaves ``path`` as it was and removes the half-written copy. The
    copy has a fresh name of its own (``<name>.<random>.partial``): whatever is at any other name beside ``path``, a
    person's file or a link, is never removed or written through.
    """
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".partial")
    os.close(fd)
    staged = Path(name)
    try:
        staged.write_bytes(text.encode())
        staged.chmod(0o644)
        stage(f"write-{path.name}")
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


def start_rewrite(folder: Path) -> Path:
    """A fresh staging folder inside ``folder``, after completing a committed rewrite an interrupt left."""
    finish_rewrite(folder)
    staging = folder / STAGING
    if staging.exists() or staging.is_symlink():
        if not _is_staging(staging):
            raise SeriesError(
                f"{staging} is in the way: export stages a series under that name and did not make what is there, "
                "which may be yours; move it away and re-run; nothing was changed"
            )
        remove(staging)  # an uncommitted rewrite: the folder still holds the old files
    staging.mkdir(parents=True)  # the folder too, if this is its first export
    (staging / _MARK).write_text("")
    return staging


def commit_rewrite(folder: Path, written: list[str], removed: list[str]) -> None:
    """Make the staged files ``written`` the folder's, and remove its files ``removed``: record, then carry out."""
    write_file(folder / STAGING / _RECORD, json.dumps({"write": written, "remove": removed}))
    finish_rewrite(folder)


def discard_uncommitted(folder: Path) -> None:
    """Remove a staged rewrite that was not committed (after a refusal or an error); a committed one is kept."""
    staging = folder / STAGING
    if _is_staging(staging) and not (staging / _RECORD).is_file():
        remove(staging)


def _is_staging(staging: Path) -> bool:
    """Whether ``staging`` is a folder an export made: marked, or empty (an export killed before it marked it)."""
    if staging.is_symlink() or not staging.is_dir():
        return False
    return (staging / _MARK).is_file() or not any(staging.iterdir())


def finish_rewrite(folder: Path) -> bool:
    """Carry out the committed rewrite staged in ``folder``, if any; whether there was one.

    Each step may have run already (an interrupted earlier attempt, or another reader at the same time), so each is
    one that can run twice: a staged file already moved is skipped, a file already removed stays removed.
    """
    staging = folder / STAGING
    try:
        record = json.loads((staging / _RECORD).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return False
    for name in record["write"]:
        with contextlib.suppress(FileNotFoundError):  # moved by an earlier attempt
            os.replace(staging / name, folder / name)
    for name in record["remove"]:
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError):  # removed by another reader
        remove(staging)
    return True
