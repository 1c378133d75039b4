"""The tool's scratch names beside a tree, claimed before use: the tool removes only what it made there.

Before it makes ``<tree>.partial``, ``<tree>.partial.unpack`` or ``<tree>.old``, the tool writes a claim file beside the
name (``<name>.patchseries-scratch``), and once the folder there is its own (made by it, or its tree renamed there) the
claim records that folder's identity (device and inode; a rename keeps them). What is at such a name is removed only
when its claim names that very folder, or when it is an empty folder under a claim (a run killed between making it
and recording it). Anything else there, or at a claim's name, may be a person's (a refused tree moved to
``<tree>.old``): it is left as it is, and a run that needs the name stops, naming it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from patchseries.atomic import write_file
from patchseries.errors import SeriesError
from patchseries.interrupts import stage
from patchseries.paths import remove as remove_path

HEADER = "patchseries scratch claim: what is beside this file was made by the tool\n"
SUFFIX = ".patchseries-scratch"
MARK = ".patchseries-scratch"  # inside a marked folder: the token its claim records


def claim(path: Path, moving_here: Path | None = None) -> Path:
    """Claim ``path`` before anything is made there, removing the tool's own leftover at it first.

    ``moving_here``: the tool's folder that is about to be renamed to ``path``, whose identity is recorded now.
    """
    remove(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _record(path, _identity(moving_here) if moving_here is not None else "")
    return path


def make_dir(path: Path, marked: bool = False) -> Path:
    """Make the folder ``path``, claimed by :func:`claim`, and record it as the tool's.

    ``marked``: a folder whose content is never used as a whole (the unpacked sdist) also gets a random token inside,
    kept in the claim too: after a SIGKILL, a person's folder that reuses the freed inode is not taken for it.
    """
    path.mkdir()
    token = ""
    if marked:
        token = secrets.token_hex(16)
        (path / MARK).write_text(token)
    _record(path, f"{_identity(path)} {token}".strip())
    return path


def own(path: Path) -> None:
    """Record the folder the tool just put at ``path`` (made there, or moved there) as its own."""
    _record(path, _identity(path))


def remove(path: Path) -> None:
    """Remove the tool's folder at ``path`` and its claim; anything at ``path`` the claim does not name is refused."""
    recorded = _recorded(path)
    if path.exists() or path.is_symlink():
        if not _is_claimed(path, recorded):
            raise SeriesError(
                f"{path} is in the way: the tool works under that name and did not make what is there, which may be"
                " yours; move it away and re-run; nothing was changed"
            )
        stage("scratch-remove")
        remove_path(path)
    release(path)


def remove_leftover(path: Path) -> None:
    """Remove what a killed run of the tool left at ``path``; leave anything else there (it is refused only when the
    name is needed, by :func:`claim`)."""
    try:
        recorded = _recorded(path)
    except SeriesError:
        return
    if not (path.exists() or path.is_symlink()) or _is_claimed(path, recorded):
        remove(path)


def owned(path: Path) -> bool:
    """Whether what is at ``path`` is the tool's folder its claim names (what :func:`remove` removes)."""
    return _is_claimed(path, _recorded(path))


def move_out(path: Path, dest: Path) -> None:
    """Rename the tool's folder ``path`` to ``dest``, its claim dropped first: a claim left by a SIGKILL must never
    name the folder that moved away, which is the tree (a person's, for ``edit``) from then on."""
    _recorded(path)  # refuses what is at the claim's name if it is not a claim
    _claim_file(path).unlink(missing_ok=True)
    try:
        path.rename(dest)
    except BaseException:
        if path.exists():
            own(path)  # still the tool's: the caller removes it
        raise
    stage("scratch-moved")


def release(path: Path) -> None:
    """Drop the claim of ``path`` once nothing of the tool's is there (renamed into place, or removed)."""
    if not (path.exists() or path.is_symlink()) and _recorded(path) is not None:
        _claim_file(path).unlink()


def _is_claimed(path: Path, recorded: str | None) -> bool:
    if recorded is None:
        return False
    identity, _, token = recorded.partition(" ")
    if identity == _identity(path):
        return not token or _mark(path) == token
    return recorded == "" and path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _mark(path: Path) -> str:
    mark = path / MARK
    try:
        return mark.read_text() if mark.is_file() and not mark.is_symlink() else ""
    except (OSError, ValueError):
        return ""


def _identity(path: Path) -> str:
    status = os.lstat(path)
    return f"{status.st_dev}:{status.st_ino}"


def _claim_file(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def _record(path: Path, identity: str) -> None:
    _recorded(path)  # refuses what is at the claim's name if it is not a claim
    write_file(_claim_file(path), f"{HEADER}{identity}\n")


def _recorded(path: Path) -> str | None:
    """The identity the claim of ``path`` records ("" before the folder is made), or None when unclaimed."""
    claim_file = _claim_file(path)
    if not (claim_file.exists() or claim_file.is_symlink()):
        return None
    text = "" if claim_file.is_symlink() or not claim_file.is_file() else claim_file.read_text(errors="replace")
    if not text.startswith(HEADER):
        raise SeriesError(
            f"{claim_file} is in the way: the tool keeps its claims under that name and did not write what is there;"
            " move it away and re-run; nothing was changed"
        )
    return text[len(HEADER) :].strip()
