"""Rewriting files so that an interrupt leaves the old state or the new one, never a mix.

One file is written under a fresh name beside itself and renamed over the old one (:func:`write_file`). The files of
one folder (an export: patches and ``series``) are staged in ``<folder>/export.partial/``; writing its record is the
one step that makes them the folder's, and every reader first completes a recorded rewrite (:func:`finish_rewrite`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from patchseries.interrupts import stage
from patchseries.paths import remove

STAGING = "export.partial"
_RECORD = ".commit"


def write_file(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (written as it is) in one rename; a failed write leaves ``path`` as it was."""
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
    """A fresh staging folder inside ``folder``, after completing a recorded rewrite an interrupt left."""
    finish_rewrite(folder)
    staging = folder / STAGING
    remove(staging)  # an unrecorded rewrite: the folder still holds the old files
    staging.mkdir(parents=True)
    return staging


def commit_rewrite(folder: Path, written: list[str], removed: list[str]) -> None:
    """Make the staged files ``written`` the folder's and remove its files ``removed``: record, then carry out."""
    write_file(folder / STAGING / _RECORD, json.dumps({"write": written, "remove": removed}))
    finish_rewrite(folder)


def discard_uncommitted(folder: Path) -> None:
    """Remove a staged rewrite that was not recorded (after a refusal or an error)."""
    if not (folder / STAGING / _RECORD).is_file():
        remove(folder / STAGING)


def finish_rewrite(folder: Path) -> bool:
    """Carry out the rewrite recorded in ``folder``, if any; whether there was one. Each step may run twice (an
    interrupted earlier attempt, another reader at the same time)."""
    staging = folder / STAGING
    try:
        record = json.loads((staging / _RECORD).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return False
    for name in record["write"]:
        with contextlib.suppress(FileNotFoundError):
            os.replace(staging / name, folder / name)
    for name in record["remove"]:
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError):
        remove(staging)
    return True
