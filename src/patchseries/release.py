"""``patchseries wheels``: wheels of each pinned sdist given the series' files, mapped as upstream mirrors them."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.version import Version

from patchseries.errors import SeriesError
from patchseries.gitcmd import git, out
from patchseries.interrupts import stage
from patchseries.lock import Lock
from patchseries.paths import Workspace, kept_path, shell
from patchseries.pin import Pin, Standalone
from patchseries.progress import Log
from patchseries.runner import find_uv
from patchseries.series import Patch, crlf_problem, fingerprint, has_crlf
from patchseries.trees import BASE_REF, download_sdist, resolve_source, safe_extract, tool_tree

RECORD_NAME = "patch-series.json"  # in each wheel's .dist-info: importlib.metadata reads it without importing torch
PROJECT = "lightning-compile-series"  # the record's "project": what marks a wheel as the tool's
STAGING = ".patchseries-wheels.partial"  # in dist/, the copies before their renames: only the dist/ lock's holder's
_INSTALLER_SUMMARY = "error: Failed to build"  # uv's own summary of a failed build, after the backend's output
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*: ")  # a traceback's last line: `OSError: ...`
Files = dict[str, bytes | None]  # what a wheel must hold: member -> bytes (None: no such member)


@dataclass(frozen=True)
class WheelPin:  # what the wheel commands build ([wheels] of the pin) and the fingerprint of the series built
    pin: Pin
    series_version: int
    standalones: tuple[Standalone, ...]
    recorded: str = ""  # [wheels] fingerprint: the series released as series_version
    series: str = ""  # the fingerprint of the series this run builds (:meth:`for_series`)

    def for_series(self, patches: list[Patch]) -> WheelPin:
        return replace(self, series=fingerprint(patches))

    @property
    def released(self) -> str:
        return f"{self.pin.version}+series.{self.series_version}"

    @property
    def is_released(self) -> bool:
        return self.series == self.recorded

    @property
    def local_version(self) -> str:
        # another series: 2.6.6+changed.7.<fingerprint>, below every 2.6.6+series.N (PEP 440): pip prefers a release
        if not self.series or self.is_released:
            return self.released
        # as the build spells it (a fingerprint of digits loses its leading zeros)
        return str(Version(f"{self.pin.version}+changed.{self.series_version}.{self.series[:12]}"))

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.pin.name, *(s.name for s in self.standalones))

    def standalone(self, name: str) -> Standalone | None:
        return next((s for s in self.standalones if s.name == name), None)

    def mapping(self, package: str) -> PackageMapping:
        base, standalone = self.pin.name, self.standalone(package)
        if standalone is None:
            return PackageMapping(base, {f"src/{base}/": f"src/{base}/"}, (), ())
        modules = {s.subpackage: s.name for s in self.standalones}
        prefixes = {f"src/{base}/{sub}/": f"src/{modules[sub]}/" for sub in standalone.ships}
        imports = tuple((f"{base}.{s.subpackage}", s.name) for s in self.standalones)
        others = tuple(f"src/{base}/{s.subpackage}/" for s in self.standalones if s.subpackage not in standalone.ships)
        return PackageMapping(base, prefixes, imports, others)


def load_wheel_pin(path: Path, pin: Pin) -> WheelPin:
    if pin.wheels is None:
        raise SeriesError(f"pin file {path} has no [wheels] table; the wheel commands need its series_version and the "
                          "standalone packages' sdists ([wheels.pytorch_lightning] with url, sha256, ...)")  # fmt: skip
    return WheelPin(pin, pin.wheels.series_version, pin.wheels.standalones, pin.wheels.fingerprint)


@dataclass(frozen=True)
class PackageMapping:  # the paths and imports of the unified package as one package has them
    base: str  # the unified package: lightning
    prefixes: dict[str, str]  # src/lightning/pytorch/ -> src/pytorch_lightning/
    imports: tuple[tuple[str, str], ...]  # (lightning.pytorch, pytorch_lightning), ... in upstream's order
    elsewhere: tuple[str, ...]  # the unified folders that another standalone package ships, not this one

    def path(self, path: str) -> str | None:  # None: the package does not ship it
        return next((new + path[len(old) :] for old, new in self.prefixes.items() if path.startswith(old)), None)

    def text(self, path: str, text: str) -> str:
        lightning_by = f"{self.base}.{path.removeprefix(f'src/{self.base}/').split('/', 1)[0]}"
        return "".join(replace_imports(text.splitlines(keepends=True), self.imports, lightning_by, self.base))

    def read(self, file: Path, path: str) -> bytes | None:  # ``file``, the unified ``path``, mapped; None: no file
        text = file.read_bytes().decode(errors="surrogateescape") if file.is_file() else None
        return None if text is None else self.text(path, text).encode(errors="surrogateescape")


def replace_imports(lines: list[str], mapping: tuple[tuple[str, str], ...], lightning_by: str = "",
                    base: str = "lightning") -> list[str]:  # fmt: skip
    """Upstream's ``_replace_imports`` (Lightning 2.6.6, ``.actions/assistant.py``), rule for rule."""
    out = lines[:]
    for source, target in mapping:
        for index, line in enumerate(out):
            line = re.sub(rf"([^_/@]|^){source}([^_\w/]|$)", rf"\g<1>{target}\g<2>", line)
            if lightning_by:
                line = line.replace(f"from {base} import ", f"from {lightning_by} import ")
                line = line.replace(f"import {base} ", f"import {lightning_by} ")
            out[index] = line
    return out


def patches_in(wheel_pin: WheelPin, patches: list[Patch]) -> dict[str, list[str]]:
    """The patches that change each package; a path with no counterpart in a package that ships its folder refuses."""
    found: dict[str, list[str]] = {}
    for package in wheel_pin.packages:
        mapping, found[package] = wheel_pin.mapping(package), []
        skipped = wheel_pin.pin.sdist_lacks + mapping.elsewhere
        for patch in patches:
            paths = [change.path for change in patch.changes if not change.path.startswith(skipped)]
            for path in (path for path in paths if mapping.path(path) is None):
                raise SeriesError(f"{patch.name} changes {path}, which has no counterpart in {package} (it ships "
                                  f"{', '.join(mapping.prefixes)} of {mapping.base}, mapped as Lightning's "
                                  ".actions/assistant.py does); move that change into a mapped folder or map the "
                                  "folder in [wheels] of base.toml")  # fmt: skip
            found[package] += [patch.name] if paths else []
    return found


def build_wheels(ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], dist: Path,
                 log: Log) -> tuple[dict[Path, list[str]], list[Path]]:  # fmt: skip
    """Build and check the wheels in a fresh folder, move new ones into ``dist``: each with its patches; the kept."""
    pin, version = wheel_pin.pin, wheel_pin.local_version
    busy = (f"another patchseries run{{}} is writing wheels into {dist} (it holds that folder's lock); wait for it to "
            "end and re-run, or pass another --dist; nothing was written to dist/")  # fmt: skip
    with Lock(dist, lambda holder: busy.format(f" ({holder})" if holder else "")) as lock:
        for target in sorted(dist.glob(f"*-{version}-*.whl")) if dist.is_dir() else ():
            if target.name.split("-")[0] in wheel_pin.packages:
                kept(target, wheel_pin.series)  # what is refused there is refused before anything is made
        if crlf := next((patch for patch in patches if has_crlf(patch.path)), None):  # as `check` names it
            raise SeriesError(crlf_problem(ws.patches / crlf.name))
        in_packages = patches_in(wheel_pin, patches)  # an unmapped path is refused before any download
        pins = [pin, *(replace(pin, sdist_url=s.url, sdist_sha256=s.sha256, sdist_root=s.root)
                       for s in wheel_pin.standalones)]  # fmt: skip
        archives = [download_sdist(ws, each, log) for each in pins]  # every sha256 checked before any build
        base, applied = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)
        built: dict[Path, Files] = {}  # each wheel with what it must hold
        with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheels-") as scratch:
            changed = series_snapshot(base.path, applied.head, series := Path(scratch) / "series")
            release = Path(scratch) / "release" / pin.sdist_root  # the unified sdist as released: what is mirrored
            safe_extract(archives[0], release.parent)
            for package, package_pin, archive in zip(wheel_pin.packages, pins, archives, strict=True):
                safe_extract(archive, work := Path(scratch) / package)
                if not (sdist := work / package_pin.sdist_root).is_dir():
                    raise SeriesError(f"{package_pin.sdist_filename} has no top-level folder "
                                      f"{package_pin.sdist_root!r}; check its root in the pin")  # fmt: skip
                files = _mirror(release, series, changed, sdist, wheel_pin.mapping(package), package_pin.sdist_filename)
                record = _record(wheel_pin, package, package_pin, patches, in_packages[package])
                for version_file in [*(sdist / "src").glob("*/version.info"), sdist / "src" / "version.info"]:
                    version_file.write_text(f"{version}\n")  # what the build reads its version from
                (sdist / "src" / f"{package}.egg-info" / RECORD_NAME).write_text(record)  # the build copies it
                log(f"building the {package} wheel ({len(in_packages[package])} of {len(patches)} patches in it)")
                expected = {f"{package}-{version}.dist-info/{RECORD_NAME}": record.encode(), **files}
                built[_build(sdist, work / "out", package, pin, version, expected)] = expected
            stage("wheels-built")
            kept_wheels = move_into(dist, built, wheel_pin.series, lock)
    return {dist / wheel.name: in_packages[wheel.name.split("-")[0]] for wheel in built}, kept_wheels


def series_snapshot(tree: Path, head: str, into: Path) -> list[str]:
    """The paths the series changes; commit ``head`` written whole under ``into``, not the tree a person may edit."""
    index = {"GIT_INDEX_FILE": str(into.with_name(f"{into.name}.index"))}
    git("read-tree", head, cwd=tree, env=index)
    git("checkout-index", "--all", f"--prefix={into}/", cwd=tree, env=index)
    return out("diff", "-z", "--name-only", "--no-renames", BASE_REF, head, cwd=tree).strip("\0").split("\0")


def series_files(changed: list[str], mapping: PackageMapping) -> dict[str, str]:  # those the package ships: -> there
    return {path: target for path in changed if (target := mapping.path(path)) is not None}


def _mirror(release: Path, series: Path, changed: list[str], sdist: Path, mapping: PackageMapping, name: str) -> Files:
    """Write each file the series changes into the sdist, once its is the release's: what the wheel must hold."""
    files: Files = {}
    for path, target in series_files(changed, mapping).items():
        was, now, file = mapping.read(release / path, path), mapping.read(series / path, path), sdist / target
        if (file.read_bytes() if file.is_file() else None) != was:
            raise SeriesError(f"{name} is not the release's mirror: its {target} is not the release's "
                              f"{path} mapped as Lightning's .actions/assistant.py does; check its url and sha256 in "
                              "the pin")  # fmt: skip
        real = (link := series / path).resolve()  # a file of src/ in the series, or none: the series deletes it
        if os.path.lexists(link) and not (real.is_file() and real.is_relative_to(series.resolve() / "src")):
            raise SeriesError(f"the series makes {path} a submodule, or a link out of src/, to a folder or to "
                              "nothing, which a wheel would lack or take from elsewhere; make it a file")  # fmt: skip
        file.unlink(missing_ok=True)
        if now is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(now)
            shutil.copymode(series / path, file)
        files[target.removeprefix("src/")] = now
    return files


def _record(wheel_pin: WheelPin, package: str, package_pin: Pin, patches: list[Patch], in_package: list[str]) -> str:
    entries = [{"name": p.name, "upstream_status": p.trailer("Upstream-Status"),
                "in_this_package": p.name in in_package} for p in patches]  # fmt: skip
    return json.dumps({
        "project": PROJECT, "package": package, "version": wheel_pin.local_version,
        "release": f"{wheel_pin.pin.name} {wheel_pin.pin.version}",
        "sdist": {"file": package_pin.sdist_filename, "sha256": package_pin.sdist_sha256},
        "series": {"version": wheel_pin.series_version, "fingerprint": fingerprint(patches), "patches": entries},
        "note": "not an upstream release: Lightning with a patch series applied",
    }, indent=1) + "\n"  # fmt: skip


def _build(sdist: Path, out_dir: Path, package: str, pin: Pin, version: str, expected: Files) -> Path:
    """``uv build --wheel``: the sdist's own build backend, isolated, dated as the release; the wheel refused unless it
    is the series': its name, its record and the files the series changes (``expected``)."""
    command = [find_uv() or "uv", "build", "--wheel", "--python", sys.executable, "--out-dir", str(out_dir), str(sdist)]
    epoch = int(dt.datetime.combine(dt.date.fromisoformat(pin.release_date), dt.time(), dt.timezone.utc).timestamp())
    proc = subprocess.run(command, cwd=sdist, env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)  # fmt: skip
    wheels = sorted(out_dir.glob("*.whl")) if out_dir.is_dir() else []
    if proc.returncode != 0 or len(wheels) != 1:  # the backend's last error line, not the installer's summary after it
        lines = [line.strip(" ╰─▶×│") for line in proc.stdout.splitlines()]
        lines = [line for line in lines if line and not line.startswith(("hint:", "[notice]"))]
        end = next((i for i, line in enumerate(lines) if line.startswith(_INSTALLER_SUMMARY)), None)
        backend = lines[:end] or lines
        raised = [line for line in backend if _RAISED.match(line)]
        cause = (raised or [line for line in backend if "error" in line.lower()] or backend or ["no output"])[-1]
        raise SeriesError(f"building the {package} wheel failed (uv exit status {proc.returncode}): "
                          f"{cause}; nothing was written to dist/")  # fmt: skip
    problems = [f"it is named {wheels[0].name}"] if not wheels[0].name.startswith(f"{package}-{version}-") else []
    if problems := problems + [f"its {name} is not the series'" for name in _not_held(wheels[0], expected)]:
        raise SeriesError(f"the {package} wheel the build made is not the series' ({problems[0]}); nothing was "
                          "written to dist/")  # fmt: skip
    return wheels[0]


def _not_held(wheel: Path, expected: Files) -> list[str]:
    with contextlib.suppress(zipfile.BadZipFile, ValueError, OSError), zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        return [name for name, data in expected.items() if (archive.read(name) if name in names else None) != data]
    return list(expected)


def dist_info(wheel: Path, name: str) -> str | None:
    with contextlib.suppress(zipfile.BadZipFile, ValueError, OSError), zipfile.ZipFile(wheel) as archive:
        found = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(f".dist-info/{name}")]
        return archive.read(found[0]).decode(errors="replace") if found else None
    return None


def built_from(wheel: Path) -> str | None:
    """The fingerprint of the series the tool built ``wheel`` from (its record), or None: not a wheel of the tool's."""
    with contextlib.suppress(ValueError):
        record = wheel.is_file() and not wheel.is_symlink() and json.loads(dist_info(wheel, RECORD_NAME) or "null")
        if isinstance(record, dict) and record.get("project") == PROJECT and isinstance(record.get("series"), dict):
            return str(record["series"].get("fingerprint"))
    return None


def kept(target: Path, series: str, held: Files | None = None,
         then: str = " and re-run; nothing was written to dist/") -> bool:  # fmt: skip
    """Whether a wheel built from ``series`` (holding ``held``) is at ``target``, to keep; anything else refuses."""
    if not (target.exists() or target.is_symlink()):
        return False
    mv = shell("mv", target, kept_path(target))
    if (found := built_from(target)) not in (None, series):
        raise SeriesError(f"{target} was built from another series (fingerprint {found[:12]}, this one is "
                          f"{series[:12]}) under the same version, and a version names one series: move it away "
                          f"({mv}), or to release this series raise series_version in [wheels] of base.toml and set "
                          f'its fingerprint = "{series}"{then}')  # fmt: skip
    if found is None or (held is not None and _not_held(target, held)):
        raise SeriesError(f"{target} is in the way: it is not a wheel the tool built from this series, and may be "
                          f"yours; move it away ({mv}){then}")  # fmt: skip
    return True


def move_into(dist: Path, wheels: dict[Path, Files], series: str, lock: Lock) -> list[Path]:
    """Stage the ``wheels`` not in ``dist`` yet there and rename each in (none if interrupted); the ones kept."""
    lock.acquire(make=True)  # held from here on (if it was not already): no other run writes dist/ meanwhile
    staging, added = dist / STAGING, []
    try:
        new = [wheel for wheel, held in wheels.items() if not kept(dist / wheel.name, series, held)]
        shutil.rmtree(staging, ignore_errors=True)  # a killed run's: no live run holds the lock
        staging.mkdir()
        for wheel in new:
            shutil.copyfile(wheel, staging / wheel.name)
            stage("wheel-copied")
        for wheel in new:
            os.replace(staging / wheel.name, dist / wheel.name)
            added.append(dist / wheel.name)
            stage("wheel-renamed")
    except BaseException:
        for target in added:
            target.unlink()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [dist / wheel.name for wheel in wheels if dist / wheel.name not in added]
