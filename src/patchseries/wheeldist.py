"""``dist/``, where ``patchseries wheels`` puts the wheels: all in one step or none, nothing of a person's touched.

Every place a wheel goes is checked before anything is built (:func:`check_dist`, :func:`check_targets`): a ``--dist``
that is a file or lies in the work directory is refused, and so is anything at a
wheel's name that is not a wheel exactly as the tool built it (:func:`wheel_problem`: every member listed in its
``RECORD`` with its sha256 and size, nothing listed missing, and the tool's record in its ``.dist-info``).

A run holds the lock of ``dist`` (:mod:`patchseries.lock`) from that check until its wheels are in: a second run into
the same ``dist`` is refused at once, so no run ever sees another's staging folder half-way. The built wheels are
copied into a claimed staging folder inside ``dist`` (:mod:`patchseries.scratch`) and renamed into place one by one; a
failure or an interrupt on the way undoes the renames already done, putting back the tool's earlier wheels they
replaced (kept as hard links, so the very same files). A staging folder found under the lock is what a killed run
left (:func:`_leftover`): it is removed only when all of it is the tool's, after each wheel it kept aside is put back
(the only copy, once the killed run renamed its new wheel over it); anything else in it is refused by name.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path

from patchseries import scratch
from patchseries.errors import SeriesError
from patchseries.interrupts import stage
from patchseries.lock import Lock, hold
from patchseries.paths import Workspace, kept_path, shell

RECORD_NAME = "patch-series.json"  # in each wheel's .dist-info: importlib.metadata reads it without importing torch
PROJECT = "lightning-compile-series"  # the record's "project": what marks a wheel as the tool's
STAGING = ".patchseries-wheels.partial"  # in dist: the finished wheels are copied here before any is renamed in
REPLACED = "replaced"  # in the staging folder: the tool's earlier wheels the new ones replace, until all are in


def default_dist(ws: Workspace) -> Path:
    """``dist/`` of the project (beside ``patches/``)."""
    return (ws.project or ws.patches.parent) / "dist"


def wheel_prefix(package: str, local_version: str) -> str:
    """How a wheel of ``package`` at ``local_version`` is named, up to its tags."""
    return f"{package}-{local_version}-"


def check_dist(dist: Path, ws: Workspace, writes: bool) -> None:
    """Refuse a ``--dist`` that cannot hold the wheels, before anything is made: a file, or (for ``writes``, the
    build) a folder in the work directory, whose trees the tool refuses once changed and whose other folders it
    removes and rebuilds."""
    if dist.exists() and not dist.is_dir():
        raise SeriesError(f"--dist {dist} is a file; pass the folder of the wheels")
    if writes and (dist == ws.workdir or ws.workdir in dist.parents):
        raise SeriesError(
            f"--dist {dist} is inside the work directory {ws.workdir}, whose trees the tool refuses once changed "
            "and whose other folders it rebuilds; pass a folder outside it"
        )


def writing(dist: Path) -> contextlib.AbstractContextManager[Lock]:
    """The lock of ``dist`` for a run that writes wheels into it: taken now if ``dist`` exists (so that what is there
    is checked and stays so until the wheels are in), else by :func:`move_into` once it makes ``dist``."""

    def refusal(holder: str) -> str:
        return (
            f"another patchseries run{f' ({holder})' if holder else ''} is writing wheels into {dist} (it holds that "
            "folder's lock); wait for it to end and re-run, or pass another --dist; nothing was written to dist/"
        )

    return hold(dist, refusal)


def check_targets(dist: Path, packages: Iterable[str], local_version: str, series: str) -> None:
    """Refuse anything in ``dist`` named as a wheel the run makes (``<package>-<local_version>-*.whl``) that is not a
    wheel as the tool built it from ``series`` (a fingerprint), and a staging folder a killed run left that holds
    anything not the tool's."""
    if not dist.is_dir():
        return
    packages = tuple(packages)
    _leftover(dist / STAGING, dist, packages)  # refuses; puts nothing back yet
    for package in packages:
        for path in sorted(dist.glob(f"{wheel_prefix(package, local_version)}*.whl")):
            check_target(path, series)


def check_target(target: Path, series: str) -> None:
    """``target`` is free, or a wheel exactly as the tool built it from ``series`` (replaced by the new one); anything
    else may be a person's (a wheel of theirs, one of the tool's they changed), or is another series' release under
    the same version, which a version never names twice."""
    if not (target.exists() or target.is_symlink()):
        return
    problem = wheel_problem(target)
    if not problem:
        refuse_another_series(target, series, "; nothing was written to dist/")
        return
    raise SeriesError(
        f"{target} is in the way: a wheel goes there, and what is there is not a wheel as the tool built it "
        f"({problem}), which may be yours; move it away ({shell('mv', target, kept_path(target))}) and re-run; "
        "nothing was written to dist/"
    )


def refuse_another_series(wheel: Path, series: str, then: str) -> None:
    """Refuse a wheel whose record names another series than ``series`` (a fingerprint) under the version ``series``
    builds: a version names one series."""
    record = None
    errors = (zipfile.BadZipFile, ValueError, OSError, StopIteration, AttributeError)
    with contextlib.suppress(*errors), zipfile.ZipFile(wheel) as archive:
        name = next(name for name in archive.namelist() if name.endswith(f".dist-info/{RECORD_NAME}"))
        record = json.loads(archive.read(name)).get("series")
    built_from = str(record.get("fingerprint", "none")) if isinstance(record, dict) else "none"
    if built_from != series:
        raise SeriesError(
            f"{wheel} was built from another series (fingerprint {built_from[:12]}, patches/ is {series[:12]}) under "
            "the same version, and a version names one series: raise series_version in [wheels] of base.toml and "
            f'set its fingerprint = "{series}"{then}'
        )


def wheel_problem(path: Path) -> str:
    """What makes ``path`` other than a wheel exactly as the tool built it, or ``""``.

    Such a wheel is a zip file whose every member (its ``.dist-info/RECORD`` aside) its ``RECORD`` lists with the
    member's sha256 and size, whose ``RECORD`` lists no member it lacks, and whose ``.dist-info`` carries the tool's
    record (:data:`RECORD_NAME`, naming :data:`PROJECT`): a member added, removed or changed after the build (``zip
    WHEEL MYNOTE.txt``) makes it a person's.
    """
    if path.is_symlink():
        return "a link"
    if path.is_dir():
        return "a folder"
    if not path.is_file():
        return "not a file"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if len(set(names)) != len(names):
                return "a member is in it twice"
            records = [name for name in names if name.count("/") == 1 and name.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                return "no .dist-info/RECORD" if not records else "more than one .dist-info/RECORD"
            record = records[0]
            listed = _record_rows(archive.read(record))
            for name in names:
                if name == record:
                    continue
                if name not in listed:
                    return f"its {name} is not in its RECORD"
                data = archive.read(name)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                if listed[name] != (f"sha256={digest}", str(len(data))):
                    return f"its {name} is not as its RECORD lists it"
            missing = sorted(set(listed) - set(names))
            if missing:
                return f"its RECORD lists {missing[0]}, which it lacks"
            ours = f"{record.rsplit('/', 1)[0]}/{RECORD_NAME}"
            series = json.loads(archive.read(ours)) if ours in names else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, csv.Error) as exc:
        return f"not a readable wheel: {exc}"
    if not isinstance(series, dict) or series.get("project") != PROJECT:
        return f"no {RECORD_NAME} of the tool's in it"
    return ""


def _record_rows(data: bytes) -> dict[str, tuple[str, str]]:
    """A wheel's ``RECORD``: each path with its hash and size (``""`` for the ``RECORD`` itself)."""
    rows: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(data.decode())):
        if not row:
            continue
        if len(row) != 3 or row[0] in rows:
            raise ValueError(f"its RECORD has a malformed line: {','.join(row)}")
        rows[row[0]] = (row[1], row[2])
    return rows


def move_into(dist: Path, wheels: list[Path], packages: Iterable[str], series: str, lock: Lock) -> None:
    """Put ``wheels`` (built and checked) into ``dist``, all of them or none (module docstring), under ``lock``."""
    made = not dist.exists()
    lock.acquire(make=True)  # held from here on (if it was not already): no other run writes dist/ meanwhile
    staging = dist / STAGING
    try:
        restores = _leftover(staging, dist, tuple(packages))
        for wheel in wheels:
            check_target(dist / wheel.name, series)
        for backup, target in restores:  # a killed run's: its earlier wheels back where they were
            os.replace(backup, target)
            stage("wheel-restored")
        scratch.claim(staging)  # removes the killed run's leftover (checked above: all of it the tool's)
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


def _leftover(staging: Path, dist: Path, packages: tuple[str, ...]) -> list[tuple[Path, Path]]:
    """Check a staging folder a killed run left in ``dist`` (read under the lock of ``dist``, which no live run then
    holds); what to put back: each wheel it kept aside (``replaced/``) whose place in ``dist`` no longer holds it.

    It is removed only when it is the tool's (its claim names it) and every entry in it is one the tool makes there:
    its mark, wheels of ``packages``, and ``replaced/`` with such wheels. Anything else is refused by name, and so is
    anything but a wheel as the tool built it where a kept wheel goes back: nothing is changed then.
    """
    if not (staging.exists() or staging.is_symlink()):
        return []
    remedy = f"move it away ({shell('mv', staging, kept_path(staging))}) and re-run; nothing was written to dist/"
    if not scratch.owned(staging):
        raise SeriesError(
            f"{staging} is in the way: the tool stages its wheels under that name and did not make what is there, "
            f"which may be yours; {remedy}"
        )
    replaced = staging / REPLACED
    entries = [(entry, entry.name == REPLACED) for entry in sorted(staging.iterdir()) if entry.name != scratch.MARK]
    if replaced.is_dir() and not replaced.is_symlink():
        entries += [(entry, False) for entry in sorted(replaced.iterdir())]
    for entry, is_folder in entries:
        made = is_folder and entry.is_dir() and not entry.is_symlink()
        wheel = not is_folder and _is_wheel_name(entry.name, packages) and entry.is_file() and not entry.is_symlink()
        if not (made or wheel):
            raise SeriesError(
                f"{entry} is in the staging folder that a killed run of the tool left, and the tool did not make it, "
                f"which may be yours; so the folder is left as it is (with the wheels it kept aside): {remedy}"
            )
    restores = []
    for backup in sorted(replaced.iterdir()) if replaced.is_dir() else []:
        target = dist / backup.name
        if target.exists() and not target.is_symlink() and os.path.samefile(backup, target):
            continue  # a second name of the wheel that is still in place
        kept = wheel_problem(backup)
        if kept:
            raise SeriesError(
                f"{backup} is in the staging folder that a killed run of the tool left, and it is not a wheel as the "
                f"tool built it ({kept}), which may be yours; so the folder is left as it is: {remedy}"
            )
        problem = wheel_problem(target) if target.exists() or target.is_symlink() else ""
        if problem:
            raise SeriesError(
                f"{target} is in the way: a killed run of the tool replaced the wheel there, kept in {backup}, and "
                f"what is there now is not a wheel as the tool built it ({problem}), which may be yours; move it "
                f"away ({shell('mv', target, kept_path(target))}) and re-run; nothing was written to dist/"
            )
        restores.append((backup, target))
    return restores


def _is_wheel_name(name: str, packages: tuple[str, ...]) -> bool:
    return name.endswith(".whl") and any(name.startswith(f"{package}-") for package in packages)


def _rename_all(staging: Path, dist: Path, names: list[str]) -> None:
    """Rename each staged wheel into ``dist``; on any failure undo the renames done, the replaced wheels put back."""
    kept = staging / REPLACED
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
