"""``patchseries wheels``: the release series built into wheels of ``lightning`` and its standalone packages.

Each wheel is built from its pinned sdist (sha256 checked on every build, a kept download too), unpacked as it is (its
``*.egg-info/SOURCES.txt`` says which data files the wheel carries), with the series applied: for the unified
package, the diff of the tool's tree (branch ``base`` to ``series``; a tree that is not exactly as the tool built it
is refused, :func:`patchseries.apply.tool_tree`); for a standalone package, each patch mapped onto its paths and
imports (:mod:`patchseries.standalone`), and the result compared with the tree's files mapped the same way. Its
``version.info`` gets the local version (``2.6.6+series.6``) and its ``.egg-info`` the record of the series
(:data:`RECORD_NAME`), which the build copies into the wheel's ``.dist-info``. The package's own build backend then
builds it (``uv build --wheel``: its ``pyproject.toml``'s setuptools, in an isolated environment).

Everything is built and checked in a scratch folder of the work directory first; only then do the wheels go into
``dist/``, all of them or none (:mod:`patchseries.wheeldist`, which also refuses, before any build, anything of a
person's at a wheel's name). A refusal or a failed build writes nothing to ``dist/``, and an interrupt leaves no
partial wheel there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from patchseries.environment import find_uv
from patchseries.errors import SeriesError
from patchseries.gitcmd import git, out
from patchseries.interrupts import stage
from patchseries.lock import Lock
from patchseries.paths import Workspace
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.series import Patch, crlf_problem, fingerprint, has_crlf
from patchseries.standalone import MappedPatch, PackageMapping, WheelPin, map_patch
from patchseries.trees import BASE_REF, download_sdist, resolve_source, safe_extract, tool_tree
from patchseries.wheeldist import (
    PROJECT,
    RECORD_NAME,
    check_targets,
    move_into,
    wheel_prefix,
    writing,
)

SERIES_REF = "refs/heads/series"
# the installer's own summary of a failed build, after the backend's output (uv, then pip's)
_INSTALLER_SUMMARY = ("error: Failed to build", "note: This error originates from a subprocess")
# the last line of a traceback: the exception's class (dotted, capitalized, not an all-caps WARNING:) and message
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*: ")


@dataclass(frozen=True)
class Source:
    """One package's pinned sdist."""

    package: str
    filename: str
    sha256: str
    root: str
    archive: Path


@dataclass(frozen=True)
class BuiltWheel:
    package: str
    path: Path
    patches: tuple[str, ...]  # the series' patches with a change in this package


def build_wheels(ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], dist: Path, log: Log) -> list[BuiltWheel]:
    """Build every package's wheel (see the module docstring) and move them into ``dist``; what was moved there."""
    with writing(dist) as lock:  # dist/'s lock, held from the check of what is there until the wheels are in
        return _build_wheels(ws, wheel_pin, patches, dist, log, lock)


def _build_wheels(
    ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], dist: Path, log: Log, lock: Lock
) -> list[BuiltWheel]:
    pin = wheel_pin.pin
    # what is in dist/ at the wheels' names first: a person's is refused before anything is downloaded or built
    check_targets(dist, wheel_pin.packages, wheel_pin.local_version, wheel_pin.series)
    for patch in patches:  # as `check` names it: the mapping below reads the diff's lines, which end in CR there
        if has_crlf(patch.path):
            raise SeriesError(crlf_problem(ws.patches / patch.name, ws.command("export")))
    # every patch mapped onto every standalone package first: one without a counterpart is refused before a download
    mapped = {s.name: [map_patch(p, wheel_pin.mapping(s.name), pin.sdist_lacks) for p in patches] for s in
              wheel_pin.standalones}  # fmt: skip
    sources = _sources(ws, wheel_pin, log)  # every sha256 checked before anything is built
    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree, _ = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)
    changed = out("diff", "--name-only", "--no-renames", BASE_REF, SERIES_REF, cwd=tree.path).splitlines()
    # a file the series deletes (or renames away) is one the wheel must not have
    deleted = set(out("diff", "--name-only", "--no-renames", "--diff-filter=D", BASE_REF, SERIES_REF,
                      cwd=tree.path).splitlines())  # fmt: skip
    ws.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheels-") as scratch:
        built: list[tuple[BuiltWheel, Path]] = []
        for source in sources:
            work = Path(scratch) / source.package
            tree_dir = _unpack(source, work / "sdist")
            mapping = wheel_pin.mapping(source.package)
            if source.package == pin.name:
                _apply_tree_diff(tree.path, tree_dir)
                in_package = [patch.name for patch in patches if _in_unified(patch, pin)]
            else:
                in_package = _apply_mapped(source, mapped[source.package], tree_dir, log)
                _compare_with_tree(tree.path, changed, deleted, mapping, tree_dir)
            # one list for the record, the log and the summary: they never disagree on what is in the wheel
            record = _record(wheel_pin, source, patches, in_package)
            _stamp(tree_dir, source, wheel_pin.local_version, record)
            log(f"building the {source.package} wheel ({len(in_package)} of {len(patches)} patches in it)")
            wheel = _build(tree_dir, work / "out", source.package, pin)
            in_wheel = {target: path in deleted for path in changed if (target := mapping.path(path))}
            _verify(wheel, source, wheel_pin.local_version, record, tree_dir, in_wheel)
            built.append((BuiltWheel(source.package, dist / wheel.name, tuple(in_package)), wheel))
        stage("wheels-built")
        move_into(dist, [wheel for _, wheel in built], wheel_pin.packages, wheel_pin.series, lock)
    return [wheel for wheel, _ in built]


def _sources(ws: Workspace, wheel_pin: WheelPin, log: Log) -> list[Source]:
    pin = wheel_pin.pin
    pins = [(pin.name, pin)]
    for standalone in wheel_pin.standalones:
        pins.append((standalone.name, replace(pin, sdist_url=standalone.url, sdist_sha256=standalone.sha256,
                                              sdist_root=standalone.root)))  # fmt: skip
    sources = []
    for package, package_pin in pins:
        archive = download_sdist(ws, package_pin, log)  # the pinned sha256, on the kept download too
        sources.append(Source(package, package_pin.sdist_filename, package_pin.sdist_sha256, package_pin.sdist_root,
                              archive))  # fmt: skip
    return sources


def _unpack(source: Source, dest: Path) -> Path:
    dest.mkdir(parents=True)
    safe_extract(source.archive, dest)
    unpacked = dest / source.root
    if not unpacked.is_dir():
        raise SeriesError(f"{source.filename} has no top-level folder {source.root!r}; check its root in the pin")
    return unpacked


def _apply(patch_text: str, tree_dir: Path, what: str) -> None:
    """Apply a diff to the unpacked sdist, all of it or nothing (``git apply`` checks every hunk first)."""
    with tempfile.NamedTemporaryFile("w", suffix=".patch", dir=tree_dir.parent, delete=False,
                                     errors="surrogateescape") as handle:  # fmt: skip
        handle.write(patch_text)
    try:
        proc = git("apply", "--whitespace=nowarn", handle.name, cwd=tree_dir, check=False)
    finally:
        Path(handle.name).unlink()
    if proc.returncode != 0:
        causes = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        raise SeriesError(f"{what}: {'; '.join(causes) or proc.stderr.strip() or 'git apply failed'}")


def _apply_tree_diff(tree: Path, tree_dir: Path) -> None:
    diff = git("diff", "--binary", "--no-renames", "--full-index", BASE_REF, SERIES_REF, cwd=tree).stdout
    if diff:
        _apply(diff, tree_dir, f"the series of {tree} does not apply to the unpacked sdist")


def _apply_mapped(source: Source, mapped: list[MappedPatch], tree_dir: Path, log: Log) -> list[str]:
    applied = []
    for item in mapped:
        if not item.diff:
            continue
        _apply(item.diff, tree_dir, f"{item.patch.name} does not apply to {source.package} ({source.filename}) "
               "with its paths and imports mapped")  # fmt: skip
        applied.append(item.patch.name)
    log(f"{source.package}: applied {len(applied)} mapped patches ({', '.join(name[:4] for name in applied)})")
    return applied


def _compare_with_tree(
    tree: Path, changed: list[str], deleted: set[str], mapping: PackageMapping, tree_dir: Path
) -> None:
    """Every file the series changes in the package equals the tree's, mapped as upstream's mirror does; every file
    it deletes is gone."""
    for path in changed:
        target = mapping.path(path)
        if target is None:
            continue
        expected = None if path in deleted else mapping.text(path, git("show", f"{SERIES_REF}:{path}", cwd=tree).stdout)
        actual = (tree_dir / target).read_text(errors="surrogateescape") if (tree_dir / target).is_file() else None
        if actual != expected:
            raise SeriesError(
                f"{mapping.package}'s {target} with the series applied differs from the tree's {path} mapped as "
                "Lightning's mirror does; the standalone sdist is not the release's mirror"
            )


def _record(wheel_pin: WheelPin, source: Source, patches: list[Patch], in_package: list[str]) -> str:
    pin = wheel_pin.pin
    entries = []
    for patch in patches:
        status = dict(patch.trailers).get("Upstream-Status", "")
        entries.append({"name": patch.name, "upstream_status": status, "in_this_package": patch.name in in_package})
    record = {
        "project": PROJECT,
        "package": source.package,
        "version": wheel_pin.local_version,
        "release": f"{pin.name} {pin.version}",
        "sdist": {"file": source.filename, "sha256": source.sha256},
        "series": {"version": wheel_pin.series_version, "fingerprint": fingerprint(patches), "patches": entries},
        "note": "not an upstream release: Lightning with a patch series applied",
    }
    return json.dumps(record, indent=1) + "\n"


def _in_unified(patch: Patch, pin: Pin) -> bool:
    return any(not change.path.startswith(pin.sdist_lacks) for change in patch.changes)


def _stamp(tree_dir: Path, source: Source, local_version: str, record: str) -> None:
    """The local version into every ``version.info`` the build reads, the record into the ``.egg-info``."""
    top = tree_dir / "src" / "version.info"
    egg_info = tree_dir / "src" / f"{source.package}.egg-info"
    if not top.is_file() or not egg_info.is_dir():
        raise SeriesError(
            f"{source.filename} has no src/version.info or src/{source.package}.egg-info/: not a Lightning sdist"
        )
    for version_file in [top, *(tree_dir / "src").glob("*/version.info")]:
        version_file.write_text(f"{local_version}\n")
    (egg_info / RECORD_NAME).write_text(record)


def _build(tree_dir: Path, out_dir: Path, package: str, pin: Pin) -> Path:
    """``uv build --wheel`` (or ``pip wheel``) of ``tree_dir``: the sdist's own build backend, isolated."""
    uv = find_uv()
    if uv:
        command = [uv, "build", "--wheel", "--python", sys.executable, "--out-dir", str(out_dir), str(tree_dir)]
    else:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out_dir), str(tree_dir)]
    epoch = int(dt.datetime.combine(dt.date.fromisoformat(pin.release_date), dt.time(), dt.timezone.utc).timestamp())
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}  # the wheel's file dates: the release's
    proc = subprocess.run(command, cwd=tree_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)  # fmt: skip
    wheels = sorted(out_dir.glob("*.whl")) if out_dir.is_dir() else []
    if proc.returncode != 0 or len(wheels) != 1:
        raise SeriesError(
            f"building the {package} wheel failed ({Path(command[0]).name} exit status {proc.returncode}): "
            f"{build_cause(proc.stdout)}; nothing was written to dist/"
        )
    return wheels[0]


def build_cause(output: str) -> str:
    """The build backend's last error line in a failed build's output (``OSError: [Errno 27] File too large``), not
    the installer's summary after it (uv: ``Call to `backend.build_wheel` failed``), which names no cause."""
    lines = [line.strip(" ╰─▶×│") for line in output.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("hint:", "[notice]"))]
    summary = next((i for i, line in enumerate(lines) if line.startswith(_INSTALLER_SUMMARY)), len(lines))
    backend = lines[:summary] or lines
    raised = [line for line in backend if _RAISED.match(line)]
    errors = [line for line in backend if "error" in line.lower()]
    return (raised or errors or backend or ["no output"])[-1]


def _verify(
    wheel: Path, source: Source, local_version: str, record: str, tree_dir: Path, changed: dict[str, bool]
) -> None:
    """The wheel is the one asked for: its name and version, its record, and every file the series changed as built
    (``changed``: each path the series changes in the package, and whether the series deletes it)."""
    package = source.package
    problem = ""
    if not wheel.name.startswith(wheel_prefix(package, local_version)):
        problem = f"it is named {wheel.name}, not {wheel_prefix(package, local_version)}*.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = f"{wheel.name.split('-')[0]}-{local_version}.dist-info"
        metadata = archive.read(f"{dist_info}/METADATA").decode() if f"{dist_info}/METADATA" in names else ""
        if not problem and f"Version: {local_version}" not in metadata.splitlines():
            problem = f"its METADATA does not say Version: {local_version}"
        if not problem and (f"{dist_info}/{RECORD_NAME}" not in names or
                            archive.read(f"{dist_info}/{RECORD_NAME}").decode() != record):  # fmt: skip
            problem = f"it lacks the series' record {dist_info}/{RECORD_NAME}"
        version_info = f"{package}/version.info"
        if not problem and version_info in names and archive.read(version_info).decode().strip() != local_version:
            problem = f"its {version_info} is not {local_version}"
        for path, gone in changed.items():
            member = path.removeprefix("src/")
            if problem:
                break
            if gone and member in names:
                problem = f"it has {member}, which the series deletes"
            elif not gone and (member not in names or archive.read(member) != (tree_dir / path).read_bytes()):
                problem = f"its {member} is not the patched file"
    if problem:
        raise SeriesError(f"the {package} wheel the build made is not the series' ({problem}); nothing was written to "
                          "dist/")  # fmt: skip
