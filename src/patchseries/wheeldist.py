"""``dist/``, where ``patchseries wheels`` puts the wheels: all in one step or none, nothing of a person's touched.

Every place a wheel goes is checked before anything is built (:func:`check_dist`): a ``--dist`` that is a file or lies
in the work directory is refused, and so is anything at a wheel's name that is not a wheel the tool built (one whose
``.dist-info`` carries the tool's record). The built wheels are then copied into a claimed staging folder inside
``dist`` (:mod:`patchseries.scratch`: a person's folder of that name is refused, a killed run's is removed), and
renamed into place one by one; a failure or an interrupt on the way undoes the renames already done, putting back the
tool's earlier wheels they replaced (kept as hard links, so the very same files).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path

from patchseries import scratch
from patchseries.errors import SeriesError
from patchseries.interrupts import stage
from patchseries.paths import Workspace, kept_path, shell

RECORD_NAME = "patch-series.json"  # in each wheel's .dist-info: importlib.metadata reads it without importing torch
PROJECT = "lightning-compile-series"  # the record's "project": what marks a wheel as the tool's
STAGING = ".patchseries-wheels.partial"  # in dist: the finished wheels are copied here before any is renamed in


def default_dist(ws: Workspace) -> Path:
    """``dist/`` of the project (beside ``patches/``)."""
    return (ws.project or ws.patches.parent) / "dist"


def wheel_prefix(package: str, local_version: str) -> str:
    """How a wheel of ``package`` at ``local_version`` is named, up to its tags."""
    return f"{package}-{local_version}-"


def check_dist(dist: Path, ws: Workspace, writes: bool) -> None:
    """Refuse a ``--dist`` that cannot hold the wheels, before anything is made: a file, or (for ``writes``, the
    build) a folder in the work directory, whose trees the tool refuses once changed and whose other folders it
    removes and rebuilds (fifth hostile pass: a ``--dist`` in a tool's tree made every later run refuse the tree)."""
    if dist.exists() and not dist.is_dir():
        raise SeriesError(f"--dist {dist} is a file; pass the folder of the wheels")
    if writes and (dist == ws.workdir or ws.workdir in dist.parents):
        raise SeriesError(
            f"--dist {dist} is inside the work directory {ws.workdir}, whose trees the tool refuses once changed "
            "and whose other folders it rebuilds; pass a folder outside it"
        )


def check_targets(dist: Path, prefixes: Iterable[str]) -> None:
    """Refuse anything in ``dist`` named as a wheel the run makes (``<prefix>*.whl``) that the tool did not build."""
    if not dist.is_dir():
        return
    for prefix in prefixes:
        for path in sorted(dist.glob(f"{prefix}*.whl")):
            check_target(path)


def check_target(target: Path) -> None:
    """``target`` is free, or a wheel the tool built (replaced by the new one); anything else may be a person's."""
    if not (target.exists() or target.is_symlink()) or is_tool_wheel(target):
        return
    raise SeriesError(
        f"{target} is in the way: a wheel goes there, and what is there is not one the tool built (no {RECORD_NAME} "
        f"of the tool's in it), which may be yours; move it away ({shell('mv', target, kept_path(target))}) and "
        "re-run; nothing was written to dist/"
    )


def is_tool_wheel(path: Path) -> bool:
    """Whether ``path`` is a wheel file whose ``.dist-info`` carries the tool's record of the series."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(f".dist-info/{RECORD_NAME}")]
            record = json.loads(archive.read(names[0])) if len(names) == 1 else None
    except (zipfile.BadZipFile, ValueError, OSError, KeyError):
        return False
    return isinstance(record, dict) and record.get("project") == PROJECT


def move_into(dist: Path, wheels: list[Path]) -> None:
    """Put ``wheels`` (built and checked) into ``dist``, all of them or none (module docstring)."""
    made = not dist.exists()
    for wheel in wheels:
        check_target(dist / wheel.name)
    dist.mkdir(parents=True, exist_ok=True)
    staging = dist / STAGING
    try:
        scratch.claim(staging)  # a person's folder of that name is refused; a killed run's is removed
        try:
            scratch.make_dir(staging, marked=True)
            for wheel in wheels:
                shutil.copyfile(wheel, staging / wheel.name)
                stage("wheel-copied")
            _rename_all(staging, dist, [wheel.name for wheel in wheels])
        finally:
            scratch.remove(staging)
    finally:
        if made:
            with contextlib.suppress(OSError):
                dist.rmdir()  # only when empty: the run failed before a wheel went in


def _rename_all(staging: Path, dist: Path, names: list[str]) -> None:
    """Rename each staged wheel into ``dist``; on any failure undo the renames done, the replaced wheels put back."""
    kept = staging / "replaced"
    kept.mkdir()
    done: list[tuple[Path, Path | None]] = []
    try:
        for name in names:
            target = dist / name
            backup = None
            if target.exists():  # a wheel the tool built (check_target): kept until every rename is done
                backup = kept / name
                _keep(target, backup)
            os.replace(staging / name, target)
            done.append((target, backup))
            stage("wheel-renamed")
    except BaseException:
        for target, backup in reversed(done):
            if backup is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(backup, target)
        raise


def _keep(target: Path, backup: Path) -> None:
    """A second name for ``target``: a hard link (the very file), else a copy (a file system without links)."""
    try:
        os.link(target, backup)
    except OSError:
        shutil.copy2(target, backup)
