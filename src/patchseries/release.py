"""``patchseries wheels``: the release series built into wheels of ``lightning`` and its standalone packages.

Lightning ships one repository as three packages: ``lightning`` and the standalone ``pytorch_lightning`` and
``lightning_fabric``, whose sources upstream's build mirrors from the unified ones (``create_mirror_package`` of
``.actions/assistant.py``): ``src/lightning/pytorch`` becomes ``src/pytorch_lightning``, and in every line
``lightning.pytorch`` becomes ``pytorch_lightning`` (:func:`replace_imports`). ``lightning`` gets the diff of the
tool's tree; each standalone package gets every patch mapped with those rules (:func:`map_patch`).

Every wheel is built and checked in a fresh temporary folder of the work directory, by the sdist's own backend; only
then, under the lock of ``dist/``, are they copied into ``dist/`` and renamed in. ``dist/`` only ever gains wheels of
the tool's or has one replaced by the tool's own build of the same series; anything else at a wheel's name is refused.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime as dt
import hashlib
import io
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

from patchseries.apply import tool_tree
from patchseries.base import download_sdist, resolve_source, safe_extract
from patchseries.environment import find_uv
from patchseries.errors import SeriesError
from patchseries.gitcmd import git, out
from patchseries.interrupts import stage
from patchseries.lock import Lock, hold
from patchseries.paths import Workspace, kept_path, shell
from patchseries.pin import Pin, Standalone
from patchseries.progress import Log
from patchseries.series import Patch, crlf_problem, diff_paths, file_sections, fingerprint, has_crlf, section_path
from patchseries.trees import BASE_REF

RECORD_NAME = "patch-series.json"  # in each wheel's .dist-info: importlib.metadata reads it without importing torch
PROJECT = "lightning-compile-series"  # the record's "project": what marks a wheel as the tool's
STAGING = ".patchseries-wheels.partial"  # in dist/, the copies before their renames: only the dist/ lock's holder's
SERIES_REF = "refs/heads/series"
# the installer's own summary of a failed build, after the backend's output (uv, then pip's)
_INSTALLER_SUMMARY = ("error: Failed to build", "note: This error originates from a subprocess")
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*: ")  # a traceback's last line: `OSError: ...`


@dataclass(frozen=True)
class WheelPin:
    """What the wheel commands build: the pinned release, the series' number and the standalone packages."""

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
        """How the unified sources map onto ``package`` (the identity for the unified package)."""
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

    def path(self, path: str) -> str | None:
        """``path`` in this package, or None when the package does not ship it."""
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
    """Upstream's ``_replace_imports`` (``.actions/assistant.py`` of Lightning 2.6.6), rule for rule: each module
    name not after ``_``, ``/``, ``@`` nor before a name character or ``/`` is replaced; with ``lightning_by``,
    ``from lightning import`` and ``import lightning`` become imports of it, after each mapping, as upstream does."""
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
    """``patch``'s diff with its paths and imports mapped onto ``mapping.package`` (empty when nothing of it is there).

    A path no sdist ships (``lacks``) or that another standalone package ships is left out; any other path with no
    counterpart (the unified ``__init__.py``), and a rename into or out of the package, is refused.
    """
    kept = []
    for section in file_sections(patch.path.read_bytes().decode(errors="surrogateescape")):
        path = section_path(section)
        old = (diff_paths(section.split("\n", 1)[0]) or (path, path))[0]
        if path.startswith(lacks) or path.startswith(mapping.elsewhere):
            if old != path and mapping.path(old) is not None and "\nrename from " in section.split("\n@@", 1)[0]:
                raise SeriesError(f"{patch.name} renames {old} to {path}, out of {mapping.package}, which cannot carry "
                                  "that rename; make it a deletion and an addition (git format-patch --no-renames)")  # fmt: skip
            continue
        if mapping.path(path) is None:
            raise SeriesError(
                f"{patch.name} changes {path}, which has no counterpart in {mapping.package} (it ships "
                f"{', '.join(mapping.prefixes)} of {mapping.base}, mapped as Lightning's .actions/assistant.py does); "
                "move that change into a mapped folder or map the folder in [wheels] of base.toml"
            )
        if mapping.path(old) is None:
            raise SeriesError(f"{patch.name} makes {path} from {old}, which {mapping.package} does not ship; make it "
                              "an addition (git format-patch --no-renames)")  # fmt: skip
        if "\nGIT binary patch\n" in section:
            raise SeriesError(f"a binary change of {path} cannot be mapped onto {mapping.package}")
        kept.append(_map_section(section, path, old, mapping))
    return "".join(kept)


def _map_section(section: str, path: str, old: str, mapping: PackageMapping) -> str:
    """One file's section of a diff with both its paths and its lines' imports mapped (line counts are kept)."""
    new_path, old_path = mapping.path(path), mapping.path(old)
    headers = {
        "--- a/": f"--- a/{old_path}\n",
        "+++ b/": f"+++ b/{new_path}\n",
        "diff --git ": f"diff --git a/{old_path} b/{new_path}\n",
        "rename from ": f"rename from {old_path}\n",
        "rename to ": f"rename to {new_path}\n",
        "copy from ": f"copy from {old_path}\n",
        "copy to ": f"copy to {new_path}\n",
        "index ": "",
    }  # fmt: skip  (the blob ids are the unified file's: git apply does not need them)
    result: list[str] = []
    in_hunk = False
    for line in section.splitlines(keepends=True):
        if line.startswith("@@"):
            in_hunk = True
            ranges, closing, context = line.partition(" @@")
            result.append(ranges + closing + (mapping.lines(path, [context])[0] if context else ""))
        elif in_hunk:  # a hunk's line, "\ No newline at end of file", format-patch's signature
            result.append(line[0] + mapping.lines(path, [line[1:]])[0] if line[:1] in " +-" else line)
        else:
            result.append(next((new for start, new in headers.items() if line.startswith(start)), line))
    return "".join(result)


@dataclass(frozen=True)
class BuiltWheel:
    package: str
    path: Path  # in dist/
    patches: tuple[str, ...]  # the series' patches with a change in this package


def build_wheels(ws: Workspace, wheel_pin: WheelPin, patches: list[Patch], dist: Path, log: Log) -> list[BuiltWheel]:
    """Build every package's wheel in a fresh folder, check each, then move them all into ``dist``."""
    pin = wheel_pin.pin
    with hold(
        dist, _busy(dist)
    ) as lock:  # held (once dist/ exists) from the check of its names until the wheels are in
        check_targets(dist, wheel_pin)
        for patch in patches:  # as `check` names it: the mapping reads the diff's lines, which end in CR there
            if has_crlf(patch.path):
                raise SeriesError(crlf_problem(ws.patches / patch.name, ws.command("export")))
        # every patch mapped onto every standalone package before any download: an unmapped path is refused first
        mapped = {s.name: [(p, map_patch(p, wheel_pin.mapping(s.name), pin.sdist_lacks)) for p in patches]
                  for s in wheel_pin.standalones}  # fmt: skip
        pins = [pin] + [replace(pin, sdist_url=s.url, sdist_sha256=s.sha256, sdist_root=s.root)
                        for s in wheel_pin.standalones]  # fmt: skip
        archives = [download_sdist(ws, each, log) for each in pins]  # every sha256 checked before any build
        ws.workdir.mkdir(parents=True, exist_ok=True)
        tree = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), log)[0].path
        changed = out("diff", "--name-only", "--no-renames", BASE_REF, SERIES_REF, cwd=tree).splitlines()
        deleted = set(out("diff", "--name-only", "--no-renames", "--diff-filter=D", BASE_REF, SERIES_REF,
                          cwd=tree).splitlines())  # fmt: skip
        ws.scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ws.scratch, prefix="wheels-") as scratch:
            built: list[tuple[BuiltWheel, Path]] = []
            for package, package_pin, archive in zip(wheel_pin.packages, pins, archives):
                work = Path(scratch) / package
                (work / "sdist").mkdir(parents=True)
                safe_extract(archive, work / "sdist")
                sdist = work / "sdist" / package_pin.sdist_root
                if not sdist.is_dir():
                    raise SeriesError(f"{package_pin.sdist_filename} has no top-level folder "
                                      f"{package_pin.sdist_root!r}; check its root in the pin")  # fmt: skip
                mapping = wheel_pin.mapping(package)
                if package == pin.name:
                    diff = git(
                        "diff", "--binary", "--no-renames", "--full-index", BASE_REF, SERIES_REF, cwd=tree
                    ).stdout
                    _apply(diff, sdist, f"the series of {tree} does not apply to the unpacked sdist")
                    in_package = [
                        p.name for p in patches if any(not c.path.startswith(pin.sdist_lacks) for c in p.changes)
                    ]
                else:
                    in_package = []
                    for patch, patch_diff in mapped[package]:
                        _apply(patch_diff, sdist, f"{patch.name} does not apply to {package} "
                               f"({package_pin.sdist_filename}) with its paths and imports mapped")  # fmt: skip
                        in_package += [patch.name] if patch_diff else []
                    _compare_with_tree(tree, changed, deleted, mapping, sdist)
                record = _record(wheel_pin, package, package_pin, patches, in_package)
                _stamp(sdist, package, package_pin, wheel_pin.local_version, record)
                log(f"building the {package} wheel ({len(in_package)} of {len(patches)} patches in it)")
                wheel = _build(sdist, work / "out", package, pin)
                in_wheel = {target: path in deleted for path in changed if (target := mapping.path(path))}
                _verify(wheel, package, wheel_pin.local_version, record, sdist, in_wheel)
                built.append((BuiltWheel(package, dist / wheel.name, tuple(in_package)), wheel))
            stage("wheels-built")
            move_into(dist, [wheel for _, wheel in built], wheel_pin.series, lock)
    return [wheel for wheel, _ in built]


def _apply(diff: str, sdist: Path, what: str) -> None:
    """Apply ``diff`` to the unpacked sdist, all of it or nothing (``git apply`` checks every hunk first)."""
    if not diff:
        return
    proc = git("apply", "--whitespace=nowarn", "-", cwd=sdist, check=False, stdin=diff)
    if proc.returncode != 0:
        causes = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        raise SeriesError(f"{what}: {'; '.join(causes) or proc.stderr.strip() or 'git apply failed'}")


def _compare_with_tree(tree: Path, changed: list[str], deleted: set[str], mapping: PackageMapping, sdist: Path) -> None:
    """Every file the series changes in the package equals the tree's, mapped as upstream's mirror does."""
    for path in changed:
        target = mapping.path(path)
        if target is None:
            continue
        expected = None if path in deleted else mapping.text(path, git("show", f"{SERIES_REF}:{path}", cwd=tree).stdout)
        actual = (sdist / target).read_text(errors="surrogateescape") if (sdist / target).is_file() else None
        if actual != expected:
            raise SeriesError(f"{mapping.package}'s {target} with the series applied differs from the tree's {path} "
                              "mapped as Lightning's mirror does; the standalone sdist is not the release's mirror")  # fmt: skip


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


def _stamp(sdist: Path, package: str, package_pin: Pin, local_version: str, record: str) -> None:
    """The local version into every ``version.info`` the build reads, the record into the ``.egg-info``."""
    top, egg_info = sdist / "src" / "version.info", sdist / "src" / f"{package}.egg-info"
    if not top.is_file() or not egg_info.is_dir():
        raise SeriesError(f"{package_pin.sdist_filename} has no src/version.info or src/{package}.egg-info/: not a "
                          "Lightning sdist")  # fmt: skip
    for version_file in [top, *(sdist / "src").glob("*/version.info")]:
        version_file.write_text(f"{local_version}\n")
    (egg_info / RECORD_NAME).write_text(record)


def _build(sdist: Path, out_dir: Path, package: str, pin: Pin) -> Path:
    """``uv build --wheel`` (or ``pip wheel``): the sdist's own build backend, isolated, dated as the release."""
    uv = find_uv()
    command = ([uv, "build", "--wheel", "--python", sys.executable, "--out-dir", str(out_dir), str(sdist)] if uv else
               [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out_dir), str(sdist)])  # fmt: skip
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


def _verify(wheel: Path, package: str, version: str, record: str, sdist: Path, changed: dict[str, bool]) -> None:
    """The wheel is the one asked for: name, version, record, and each file the series changes (True: deletes)."""
    info = f"{wheel.name.split('-')[0]}-{version}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    problems = [
        not wheel.name.startswith(wheel_prefix(package, version)) and f"it is named {wheel.name}",
        f"Version: {version}" not in members.get(f"{info}/METADATA", b"").decode().splitlines()
        and f"its METADATA does not say Version: {version}",
        members.get(f"{info}/{RECORD_NAME}", b"").decode() != record and f"it lacks the series' record {RECORD_NAME}",
        members.get(f"{package}/version.info", version.encode()).decode().strip() != version
        and f"its {package}/version.info is not {version}",
        *(f"it has {member}, which the series deletes" if gone else f"its {member} is not the patched file"
          for path, gone in changed.items() if (member := path.removeprefix("src/"))
          and (member in members if gone else members.get(member) != (sdist / path).read_bytes())),
    ]  # fmt: skip
    problem = next((p for p in problems if p), None)
    if problem:
        raise SeriesError(f"the {package} wheel the build made is not the series' ({problem}); nothing was written "
                          "to dist/")  # fmt: skip


def default_dist(ws: Workspace) -> Path:
    return (ws.project or ws.patches.parent) / "dist"


def wheel_prefix(package: str, local_version: str) -> str:
    return f"{package}-{local_version}-"


def check_dist(dist: Path, ws: Workspace, writes: bool) -> None:
    """Refuse a ``--dist`` that is a file, or (``writes``) in the work directory, whose folders the tool rebuilds."""
    if dist.exists() and not dist.is_dir():
        raise SeriesError(f"--dist {dist} is a file; pass the folder of the wheels")
    if writes and (dist == ws.workdir or ws.workdir in dist.parents):
        raise SeriesError(f"--dist {dist} is inside the work directory {ws.workdir}, whose trees the tool refuses once "
                          "changed and whose other folders it rebuilds; pass a folder outside it")  # fmt: skip


def _busy(dist: Path):  # type: ignore[no-untyped-def]
    return lambda holder: (f"another patchseries run{f' ({holder})' if holder else ''} is writing wheels into {dist} "
                           "(it holds that folder's lock); wait for it to end and re-run, or pass another --dist; "
                           "nothing was written to dist/")  # fmt: skip


def check_targets(dist: Path, wheel_pin: WheelPin) -> None:
    """Before any build: whatever is at the names of the wheels this run makes is an unchanged wheel of the tool's,
    built from this series."""
    for package in wheel_pin.packages if dist.is_dir() else ():
        for path in sorted(dist.glob(f"{wheel_prefix(package, wheel_pin.local_version)}*.whl")):
            check_target(path, wheel_pin.series)


def check_target(target: Path, series: str) -> None:
    """``target`` is free or a wheel exactly as the tool built it from ``series``: else refused, nothing changed."""
    if not (target.exists() or target.is_symlink()):
        return
    problem = wheel_problem(target)
    if problem:
        raise SeriesError(
            f"{target} is in the way: a wheel goes there, and what is there is not a wheel as the tool built it "
            f"({problem}), which may be yours; move it away ({shell('mv', target, kept_path(target))}) and re-run; "
            "nothing was written to dist/"
        )
    refuse_another_series(target, series, "; nothing was written to dist/")


def _tool_record(archive: zipfile.ZipFile) -> dict | None:  # type: ignore[type-arg]
    name = next((n for n in archive.namelist() if n.count("/") == 1 and n.endswith(f".dist-info/{RECORD_NAME}")), "")
    record = json.loads(archive.read(name)) if name else None
    return record if isinstance(record, dict) and record.get("project") == PROJECT else None


def refuse_another_series(wheel: Path, series: str, then: str) -> None:
    """Refuse a wheel whose record names a series other than ``series``: a version names one series."""
    built_from = "none"
    with contextlib.suppress(zipfile.BadZipFile, ValueError, OSError, AttributeError), zipfile.ZipFile(wheel) as zf:
        built_from = str(((_tool_record(zf) or {}).get("series") or {}).get("fingerprint", "none"))
    if built_from != series:
        raise SeriesError(
            f"{wheel} was built from another series (fingerprint {built_from[:12]}, patches/ is {series[:12]}) under "
            "the same version, and a version names one series: raise series_version in [wheels] of base.toml and "
            f'set its fingerprint = "{series}"{then}'
        )


def wheel_problem(path: Path) -> str:
    """Why ``path`` is not a wheel exactly as the tool built it (each member as its RECORD lists it, none missing, the
    tool's record in it), or ``""``: a wheel changed after the build (``zip WHEEL MYNOTE.txt``) is a person's."""
    if path.is_symlink() or not path.is_file():
        return "a link" if path.is_symlink() else ("a folder" if path.is_dir() else "not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            record = next((n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")), "")
            listed = (
                {row[0]: row[1:] for row in csv.reader(io.StringIO(archive.read(record).decode()))} if record else {}
            )
            for name in names:
                data = archive.read(name)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                if name != record and listed.get(name) != [f"sha256={digest}", str(len(data))]:
                    return f"its {name} is not as its RECORD lists it"
            missing = sorted(set(listed) - set(names))
            if missing or not record:
                return f"its RECORD lists {missing[0]}, which it lacks" if missing else "no .dist-info/RECORD"
            if _tool_record(archive) is None:
                return f"no {RECORD_NAME} of the tool's in it"
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, csv.Error) as exc:
        return f"not a readable wheel: {exc}"
    return ""


def move_into(dist: Path, wheels: list[Path], series: str, lock: Lock) -> None:
    """Copy ``wheels`` into a staging folder of ``dist`` and rename each in, under ``lock``; a failure or an interrupt
    on the way removes the wheels it added. A wheel it replaces is the tool's build of the same series."""
    made = not dist.exists()
    lock.acquire(make=True)  # held from here on (if it was not already): no other run writes dist/ meanwhile
    staging = dist / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # a killed run's: no live run holds the lock
    added: list[Path] = []
    try:
        for wheel in wheels:  # again under the lock: a person may have put a file there during the build
            check_target(dist / wheel.name, series)
        staging.mkdir()
        for wheel in wheels:
            shutil.copyfile(wheel, staging / wheel.name)
            stage("wheel-copied")
        for wheel in wheels:
            target = dist / wheel.name
            if not target.exists():
                added.append(target)
            os.replace(staging / wheel.name, target)
            stage("wheel-renamed")
    except BaseException:
        for target in added:
            target.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                dist.rmdir()  # only when empty: the run failed before a wheel went in
