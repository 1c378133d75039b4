"""``patchseries wheels``: wheels of ``lightning`` and its standalone packages with the release series applied.

Upstream's build mirrors the unified sources into the standalone ones (``.actions/assistant.py``):
``src/lightning/pytorch/`` becomes ``src/pytorch_lightning/`` and ``lightning.pytorch`` becomes ``pytorch_lightning``
in every line; each patch is mapped with those rules (:func:`map_patch`). Every wheel is built and checked in a fresh
folder of the work directory, then all are copied into ``dist/`` and renamed in, under its lock. ``dist/`` only gains
the tool's wheels: a wheel of the tool's already there is kept (a version names one series), anything else refused.
"""

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

from patchseries.errors import SeriesError
from patchseries.gitcmd import git, out
from patchseries.interrupts import stage
from patchseries.lock import Lock, hold
from patchseries.paths import Workspace, kept_path, shell
from patchseries.pin import Pin, Standalone
from patchseries.progress import Log
from patchseries.runner import find_uv
from patchseries.series import Patch, crlf_problem, file_sections, fingerprint, has_crlf, section_path
from patchseries.trees import BASE_REF, download_sdist, resolve_source, safe_extract, tool_tree

RECORD_NAME = "patch-series.json"  # in each wheel's .dist-info: importlib.metadata reads it without importing torch
PROJECT = "lightning-compile-series"  # the record's "project": what marks a wheel as the tool's
STAGING = ".patchseries-wheels.partial"  # in dist/, the copies before their renames: only the dist/ lock's holder's
SERIES_REF = "refs/heads/series"
# the installer's own summary of a failed build, after the backend's output (uv, then pip's)
_INSTALLER_SUMMARY = ("error: Failed to build", "note: This error originates from a subprocess")
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*: ")  # a traceback's last line: `OSError: ...`


@dataclass(frozen=True)
class WheelPin:
    """What the wheel commands build (``[wheels]`` of the pin) and the fingerprint of the series built."""

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
        """2.6.6+series.7; a series other than the recorded one is 2.6.6+changed.7.<its fingerprint's start>, which
        PEP 440 sorts below every released one (``changed`` < ``series``): pip prefers a released wheel."""
        if not self.series or self.is_released:
            return self.released
        return f"{self.pin.version}+changed.{self.series_version}.{self.series[:12]}"

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.pin.name, *(s.name for s in self.standalones))

    def standalone(self, name: str) -> Standalone | None:
        return next((s for s in self.standalones if s.name == name), None)

    def mapping(self, package: str) -> PackageMapping:
        base = self.pin.name
        standalone = self.standalone(package)
        if standalone is None:
            return PackageMapping(base, base, {f"src/{base}/": f"src/{base}/"}, (), ())
        modules = {s.subpackage: s.name for s in self.standalones}
        prefixes = {f"src/{base}/{sub}/": f"src/{modules[sub]}/" for sub in standalone.ships}
        imports = tuple((f"{base}.{s.subpackage}", s.name) for s in self.standalones)
        others = tuple(f"src/{base}/{s.subpackage}/" for s in self.standalones if s.subpackage not in standalone.ships)
        return PackageMapping(base, package, prefixes, imports, others)


def load_wheel_pin(path: Path, pin: Pin) -> WheelPin:
    """What the wheel commands build, from the ``[wheels]`` table that :func:`patchseries.pin.load_pin` read."""
    if pin.wheels is None:
        raise SeriesError(f"pin file {path} has no [wheels] table; the wheel commands need its series_version and the "
                          "standalone packages' sdists ([wheels.pytorch_lightning] with url, sha256, ...)")  # fmt: skip
    return WheelPin(pin, pin.wheels.series_version, pin.wheels.standalones, pin.wheels.fingerprint)


@dataclass(frozen=True)
class PackageMapping:
    """The paths and imports of the unified package as one package has them."""

    base: str  # the unified package: lightning
    package: str
    prefixes: dict[str, str]  # src/lightning/pytorch/ -> src/pytorch_lightning/
    imports: tuple[tuple[str, str], ...]  # (lightning.pytorch, pytorch_lightning), ... in upstream's order
    elsewhere: tuple[str, ...]  # the unified folders that another standalone package ships, not this one

    def path(self, path: str) -> str | None:  # None: the package does not ship it
        return next((new + path[len(old) :] for old, new in self.prefixes.items() if path.startswith(old)), None)

    def lines(self, path: str, lines: list[str]) -> list[str]:
        if not self.imports:
            return lines
        sub = path.removeprefix(f"src/{self.base}/").split("/", 1)[0]
        return replace_imports(lines, self.imports, lightning_by=f"{self.base}.{sub}", base=self.base)

    def text(self, path: str, text: str) -> str:
        return "".join(self.lines(path, text.splitlines(keepends=True)))


def replace_imports(
    lines: list[str], mapping: tuple[tuple[str, str], ...], lightning_by: str = "", base: str = "lightning"
) -> list[str]:
    """Upstream's ``_replace_imports`` (``.actions/assistant.py`` of Lightning 2.6.6), rule for rule; with
    ``lightning_by``, ``from lightning import`` and ``import lightning`` become imports of it, as upstream does."""
    out = lines[:]
    for source, target in mapping:
        for index, line in enumerate(out):
            line = re.sub(rf"([^_/@]|^){source}([^_\w/]|$)", rf"\g<1>{target}\g<2>", line)
            if lightning_by:
                line = line.replace(f"from {base} import ", f"from {lightning_by} import ")
                line = line.replace(f"import {base} ", f"import {lightning_by} ")
            out[index] = line
    return out


def map_patch(patch: Patch, mapping: PackageMapping, lacks: tuple[str, ...]) -> str:
    """``patch``'s diff mapped onto ``mapping.package``, without the paths no sdist ships (``lacks``) or another
    package ships; a path with no counterpart (the unified ``__init__.py``) is refused. (A rename out of the package
    fails :func:`_verify`: the file is still in the wheel.)"""
    kept = []
    for section in file_sections(patch.path.read_bytes().decode(errors="surrogateescape")):
        path = section_path(section)
        if path.startswith(lacks) or path.startswith(mapping.elsewhere):
            continue
        if mapping.path(path) is None:
            raise SeriesError(
                f"{patch.name} changes {path}, which has no counterpart in {mapping.package} (it ships "
                f"{', '.join(mapping.prefixes)} of {mapping.base}, mapped as Lightning's .actions/assistant.py does); "
                "move that change into a mapped folder or map the folder in [wheels] of base.toml"
            )
        if "\nGIT binary patch\n" in section:
            raise SeriesError(f"a binary change of {path} cannot be mapped onto {mapping.package}")
        kept.append(_map_section(section, path, mapping))
    return "".join(kept)


def _map_section(section: str, path: str, mapping: PackageMapping) -> str:
    """One file's section of a diff, its paths and its lines' imports mapped (line counts kept)."""
    result: list[str] = []
    in_hunk = False
    for line in section.splitlines(keepends=True):
        in_hunk = in_hunk or line.startswith("@@")
        if line.startswith("@@"):
            ranges, closing, context = line.partition(" @@")
            result.append(ranges + closing + (mapping.lines(path, [context])[0] if context else ""))
        elif in_hunk:  # a hunk's line, "\ No newline at end of file", format-patch's signature
            result.append(line[0] + mapping.lines(path, [line[1:]])[0] if line[:1] in ("+", "-", " ") else line)
        elif not line.startswith("index "):  # its blob ids are the unified file's: git apply does not need them
            for old, new in mapping.prefixes.items():  # the paths of `diff --git`, ---/+++, rename/copy from/to
                line = line.replace(f"/{old}", f"/{new}").replace(f" {old}", f" {new}")
            result.append(line)
    return "".join(result)


def build_wheels(
    ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], dist: Path, log: Log
) -> tuple[dict[Path, list[str]], list[Path]]:
    """Build and check every package's wheel in a fresh folder, then move the new ones into ``dist``; each wheel there
    with the patches that change its package, and the wheels that were there already (kept)."""
    pin, lacks, version = wheel_pin.pin, wheel_pin.pin.sdist_lacks, wheel_pin.local_version
    busy = (f"another patchseries run{{}} is writing wheels into {dist} (it holds that folder's lock); wait for it to "
            "end and re-run, or pass another --dist; nothing was written to dist/")  # fmt: skip
    # dist/'s lock (once dist/ exists): from the check of what is at the wheels' names until the wheels are in
    with hold(dist, lambda holder: busy.format(f" ({holder})" if holder else "")) as lock:
        for package in wheel_pin.packages if dist.is_dir() else ():
            for target in sorted(dist.glob(f"{wheel_prefix(package, version)}*.whl")):
                kept(target, wheel_pin.series)  # what is refused there is refused before anything is made
        for patch in patches:  # as `check` names it: the mapping reads the diff's lines, which end in CR there
            if has_crlf(patch.path):
                raise SeriesError(crlf_problem(ws.patches / patch.name))
        # every patch mapped onto every standalone package before any download: an unmapped path is refused first
        mapped = {s.name: [(p, map_patch(p, wheel_pin.mapping(s.name), lacks)) for p in patches]
                  for s in wheel_pin.standalones}  # fmt: skip
        pins = [pin, *(replace(pin, sdist_url=s.url, sdist_sha256=s.sha256, sdist_root=s.root)
                       for s in wheel_pin.standalones)]  # fmt: skip
        archives = [download_sdist(ws, each, log) for each in pins]  # every sha256 checked before any build
        ws.workdir.mkdir(parents=True, exist_ok=True)
        tree = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)[0].path
        diff = ("diff", "--name-only", "--no-renames", BASE_REF, SERIES_REF)
        changed = out(*diff, cwd=tree).splitlines()
        deleted = out(*diff, "--diff-filter=D", cwd=tree).splitlines()
        ws.scratch.mkdir(parents=True, exist_ok=True)
        built: dict[Path, list[str]] = {}
        with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheels-") as scratch:
            for package, package_pin, archive in zip(wheel_pin.packages, pins, archives, strict=True):
                work, mapping = Path(scratch) / package, wheel_pin.mapping(package)
                sdist = work / "sdist" / package_pin.sdist_root
                safe_extract(archive, work / "sdist")
                if not sdist.is_dir():
                    raise SeriesError(f"{package_pin.sdist_filename} has no top-level folder "
                                      f"{package_pin.sdist_root!r}; check its root in the pin")  # fmt: skip
                if package == pin.name:
                    series = git("diff", "--binary", "--no-renames", "--full-index", BASE_REF, SERIES_REF, cwd=tree)
                    _apply(series.stdout, sdist, f"the series of {tree} does not apply to the unpacked sdist")
                    in_package = [p.name for p in patches if any(not c.path.startswith(lacks) for c in p.changes)]
                else:
                    for patch, patch_diff in mapped[package]:
                        _apply(patch_diff, sdist, f"{patch.name} does not apply to {package} "
                               f"({package_pin.sdist_filename}) with its paths and imports mapped")  # fmt: skip
                    in_package = [patch.name for patch, patch_diff in mapped[package] if patch_diff]
                record = _record(wheel_pin, package, package_pin, patches, in_package)
                for version_file in (sdist / "src").glob("*/version.info"):  # what the build reads its version from
                    version_file.write_text(f"{version}\n")
                (sdist / "src" / "version.info").write_text(f"{version}\n")
                (sdist / "src" / f"{package}.egg-info" / RECORD_NAME).write_text(record)  # the build copies it
                log(f"building the {package} wheel ({len(in_package)} of {len(patches)} patches in it)")
                wheel = _build(sdist, work / "out", package, pin)
                _verify(wheel, package, version, record, tree, changed, deleted, mapping)
                built[wheel] = in_package
            stage("wheels-built")
            kept_wheels = move_into(dist, list(built), wheel_pin.series, lock)
    return {dist / wheel.name: in_package for wheel, in_package in built.items()}, kept_wheels


def _apply(diff: str, sdist: Path, what: str) -> None:
    """Apply ``diff`` to the unpacked sdist, all of it or nothing (``git apply`` checks every hunk first)."""
    proc = git("apply", "--whitespace=nowarn", "-", cwd=sdist, check=False, stdin=diff) if diff else None
    if proc and proc.returncode != 0:
        causes = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        raise SeriesError(f"{what}: {'; '.join(causes) or proc.stderr.strip() or 'git apply failed'}")


def _record(wheel_pin: WheelPin, package: str, package_pin: Pin, patches: list[Patch], in_package: list[str]) -> str:
    entries = [{"name": p.name, "upstream_status": dict(p.trailers).get("Upstream-Status", ""),
                "in_this_package": p.name in in_package} for p in patches]  # fmt: skip
    return json.dumps({
        "project": PROJECT, "package": package, "version": wheel_pin.local_version,
        "release": f"{wheel_pin.pin.name} {wheel_pin.pin.version}",
        "sdist": {"file": package_pin.sdist_filename, "sha256": package_pin.sdist_sha256},
        "series": {"version": wheel_pin.series_version, "fingerprint": fingerprint(patches), "patches": entries},
        "note": "not an upstream release: Lightning with a patch series applied",
    }, indent=1) + "\n"  # fmt: skip


def _build(sdist: Path, out_dir: Path, package: str, pin: Pin) -> Path:
    """``uv build --wheel`` (or ``pip wheel``): the sdist's own build backend, isolated, dated as the release."""
    uv, out = find_uv(), str(out_dir)
    command = ([uv, "build", "--wheel", "--python", sys.executable, "--out-dir", out, str(sdist)] if uv
               else [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, str(sdist)])  # fmt: skip
    epoch = int(dt.datetime.combine(dt.date.fromisoformat(pin.release_date), dt.time(), dt.timezone.utc).timestamp())
    proc = subprocess.run(command, cwd=sdist, env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)  # fmt: skip
    wheels = sorted(out_dir.glob("*.whl")) if out_dir.is_dir() else []
    if proc.returncode != 0 or len(wheels) != 1:
        raise SeriesError(f"building the {package} wheel failed ({Path(command[0]).name} exit status "
                          f"{proc.returncode}): {build_cause(proc.stdout)}; nothing was written to dist/")  # fmt: skip
    return wheels[0]


def build_cause(output: str) -> str:
    """The backend's last error line in a failed build's output, not the installer's summary after it."""
    lines = [line.strip(" ╰─▶×│") for line in output.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("hint:", "[notice]"))]
    backend = lines[: next((i for i, line in enumerate(lines) if line.startswith(_INSTALLER_SUMMARY)), None)] or lines
    raised = [line for line in backend if _RAISED.match(line)]
    return (raised or [line for line in backend if "error" in line.lower()] or backend or ["no output"])[-1]


def _verify(
    wheel: Path, package: str, version: str, record: str, tree: Path, changed: list[str], deleted: list[str],
    mapping: PackageMapping,
) -> None:  # fmt: skip
    """The wheel is the series': its name, its record, and each file the series changes in the package as the tree
    has it, mapped as Lightning's mirror does (one the series deletes: absent)."""
    with zipfile.ZipFile(wheel) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    problems = [f"it is named {wheel.name}"] if not wheel.name.startswith(wheel_prefix(package, version)) else []
    if members.get(f"{wheel.name.split('-')[0]}-{version}.dist-info/{RECORD_NAME}", b"").decode() != record:
        problems.append(f"it lacks the series' record {RECORD_NAME}")
    for path in changed:
        target = mapping.path(path)
        if target is None:
            continue
        text = "" if path in deleted else (tree / path).read_bytes().decode(errors="surrogateescape")
        expected = None if path in deleted else mapping.text(path, text).encode(errors="surrogateescape")
        if members.get(target.removeprefix("src/")) != expected:
            problems.append(f"its {target.removeprefix('src/')} is not the series' {path}, mapped as the mirror does")
    if problems:
        raise SeriesError(f"the {package} wheel the build made is not the series' ({problems[0]}); nothing was "
                          "written to dist/")  # fmt: skip


def wheel_prefix(package: str, local_version: str) -> str:
    return f"{package}-{local_version}-"


def built_from(wheel: Path) -> str | None:
    """The fingerprint of the series the tool built ``wheel`` from (its record), or None: not a wheel of the tool's."""
    if wheel.is_symlink() or not wheel.is_file():
        return None
    with contextlib.suppress(zipfile.BadZipFile, ValueError, OSError), zipfile.ZipFile(wheel) as archive:
        ours = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(f".dist-info/{RECORD_NAME}")]
        record = json.loads(archive.read(ours[0])) if ours else None
        if isinstance(record, dict) and record.get("project") == PROJECT and isinstance(record.get("series"), dict):
            return str(record["series"].get("fingerprint"))
    return None


def refuse_another_series(wheel: Path, series: str, then: str) -> None:
    """Refuse a wheel built from a series other than ``series`` under the version ``series`` builds."""
    if built_from(wheel) != series:
        raise SeriesError(f"{wheel} was built from another series (fingerprint {str(built_from(wheel))[:12]}, "
                          f"patches/ is {series[:12]}) under the same version, and a version names one series: raise "
                          'series_version in [wheels] of base.toml and set its fingerprint = '
                          f'"{series}"{then}')  # fmt: skip


def kept(target: Path, series: str) -> bool:
    """Whether a wheel the tool built from ``series`` is at ``target`` (kept as it is: a version names one series);
    anything else there is refused, so that nothing in ``dist/`` is ever overwritten."""
    if not (target.exists() or target.is_symlink()):
        return False
    if built_from(target) is None:
        raise SeriesError(f"{target} is in the way: a wheel goes there, and what is there is not a wheel the tool "
                          f"built, which may be yours; move it away ({shell('mv', target, kept_path(target))}) and "
                          "re-run; nothing was written to dist/")  # fmt: skip
    refuse_another_series(target, series, "; nothing was written to dist/")
    return True


def move_into(dist: Path, wheels: list[Path], series: str, lock: Lock) -> list[Path]:
    """Copy the ``wheels`` not in ``dist`` yet into a staging folder there and rename each in, under ``lock``; a
    failure or an interrupt on the way removes those renamed in. The wheels kept as they were."""
    made = not dist.exists()
    lock.acquire(make=True)  # held from here on (if it was not already): no other run writes dist/ meanwhile
    staging = dist / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # a killed run's: no live run holds the lock
    added: list[Path] = []
    try:
        new = [wheel for wheel in wheels if not kept(dist / wheel.name, series)]  # again: files may have come since
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
        if made:
            with contextlib.suppress(OSError):
                dist.rmdir()  # only when empty: the run failed before a wheel went in
    return [dist / wheel.name for wheel in wheels if dist / wheel.name not in added]
