"""The release wheels' pins (``[wheels]`` of ``base.toml``) and the mapping onto Lightning's standalone packages.

Lightning ships one repository as three packages: ``lightning`` (``lightning.pytorch``, ``lightning.fabric``) and the
standalone ``pytorch_lightning`` and ``lightning_fabric``, whose sdists carry ``src/pytorch_lightning`` (with
``src/lightning_fabric`` inside) and ``src/lightning_fabric``. Upstream's build makes the standalone sources from the
unified ones with ``create_mirror_package`` of ``.actions/assistant.py`` (in every sdist): the folder
``src/lightning/pytorch`` becomes ``src/pytorch_lightning``, and in every line ``lightning.pytorch`` becomes
``pytorch_lightning`` and ``lightning.fabric`` becomes ``lightning_fabric`` (:func:`replace_imports`, the same rules).
The series' patches are mapped with those rules, hunk line by hunk line (:func:`map_patch`), so that each applies to
the standalone sdist as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.pin import Pin, Standalone
from patchseries.series import Patch, diff_paths, file_sections, fingerprint, section_path


@dataclass(frozen=True)
class WheelPin:
    """What the wheel commands build: the pinned release, the series' number and the standalone packages."""

    pin: Pin
    series_version: int
    standalones: tuple[Standalone, ...]
    recorded: str = ""  # [wheels] fingerprint: the fingerprint of the series released as series_version
    series: str = ""  # the fingerprint of the series this run builds (:meth:`for_series`)

    def for_series(self, patches: list[Patch]) -> WheelPin:
        """This pin for building ``patches``: their fingerprint decides the local version (:attr:`local_version`)."""
        return replace(self, series=fingerprint(patches))

    @property
    def released(self) -> str:
        """The local version of the series recorded for ``series_version``: 2.6.6+series.6."""
        return f"{self.pin.version}+series.{self.series_version}"

    @property
    def is_released(self) -> bool:
        """Whether the series built is the one recorded for ``series_version`` (``[wheels] fingerprint``)."""
        return self.series == self.recorded

    @property
    def local_version(self) -> str:
        """The PEP 440 version of every wheel: the release, with the series as its local label (2.6.6+series.7).

        A series other than the recorded one is 2.6.6+changed.7.<its fingerprint's start>: never the version of a
        released one, and below every released one (PEP 440 compares the local label's first part: ``changed`` sorts
        before ``series``), so that pip prefers a released wheel in one ``--find-links`` folder.
        """
        if not self.series or self.is_released:
            return self.released
        return f"{self.pin.version}+changed.{self.series_version}.{self.series[:12]}"

    @property
    def packages(self) -> tuple[str, ...]:
        """Every package a wheel is built for: the unified one first."""
        return (self.pin.name, *(s.name for s in self.standalones))

    def standalone(self, name: str) -> Standalone | None:
        return next((s for s in self.standalones if s.name == name), None)

    def mapping(self, package: str) -> PackageMapping:
        """How the unified sources map onto ``package`` (the identity for the unified package)."""
        base = self.pin.name
        if package == base:
            return PackageMapping(base, base, {f"src/{base}/": f"src/{base}/"}, (), ())
        standalone = self.standalone(package)
        assert standalone is not None, package
        modules = {s.subpackage: s.name for s in self.standalones}
        prefixes = {f"src/{base}/{sub}/": f"src/{modules[sub]}/" for sub in standalone.ships}
        imports = tuple((f"{base}.{s.subpackage}", s.name) for s in self.standalones)
        others = tuple(f"src/{base}/{s.subpackage}/" for s in self.standalones if s.subpackage not in standalone.ships)
        return PackageMapping(base, package, prefixes, imports, others)


@dataclass(frozen=True)
class PackageMapping:
    """The paths and imports of the unified package as one package has them."""

    base: str  # the unified package: lightning
    package: str
    prefixes: dict[str, str]  # src/lightning/pytorch/ -> src/pytorch_lightning/
    imports: tuple[tuple[str, str], ...]  # (lightning.pytorch, pytorch_lightning), ... in upstream's order
    elsewhere: tuple[str, ...]  # the unified package's folders that another standalone package ships, not this one

    def path(self, path: str) -> str | None:
        """``path`` in this package, or None when the package does not ship it."""
        for source, target in self.prefixes.items():
            if path.startswith(source):
                return target + path[len(source) :]
        return None

    def lines(self, path: str, lines: list[str]) -> list[str]:
        """The lines of the unified file ``path`` as this package has them (see :func:`replace_imports`)."""
        if not self.imports:
            return lines
        sub = path.removeprefix(f"src/{self.base}/").split("/", 1)[0]
        return replace_imports(lines, self.imports, lightning_by=f"{self.base}.{sub}", base=self.base)

    def text(self, path: str, text: str) -> str:
        return "".join(self.lines(path, text.splitlines(keepends=True)))


def replace_imports(
    lines: list[str], mapping: tuple[tuple[str, str], ...], lightning_by: str = "", base: str = "lightning"
) -> list[str]:
    """Upstream's ``_replace_imports`` (``.actions/assistant.py`` of Lightning 2.6.6), rule for rule.

    Each ``source`` module name not preceded by ``_``, ``/`` or ``@`` and not followed by a name character or ``/``
    becomes ``target`` (its dots unescaped in the pattern, as upstream has them); with ``lightning_by`` (upstream
    passes the unified subpackage the file is in), ``from lightning import`` and ``import lightning`` (``base``) also
    become imports of ``lightning_by``, after each mapping, as upstream does.
    """
    out = lines[:]
    for source, target in mapping:
        for index, line in enumerate(out):
            line = re.sub(rf"([^_/@]|^){source}([^_\w/]|$)", rf"\g<1>{target}\g<2>", line)
            if lightning_by:
                line = line.replace(f"from {base} import ", f"from {lightning_by} import ")
                line = line.replace(f"import {base} ", f"import {lightning_by} ")
            out[index] = line
    return out


@dataclass(frozen=True)
class MappedPatch:
    """A patch of the series as it applies to one package: its diff (empty when nothing of it is in the package)."""

    patch: Patch
    diff: str
    paths: tuple[str, ...]  # the unified paths it changes in the package
    elsewhere: tuple[str, ...]  # paths another package ships (not applied here)
    excluded: tuple[str, ...]  # paths no sdist ships (upstream's tests and docs)


def map_patch(patch: Patch, mapping: PackageMapping, lacks: tuple[str, ...]) -> MappedPatch:
    """``patch`` with its paths and imports mapped onto ``mapping.package``; refused when a path has no counterpart.

    A file no sdist ships (``lacks``: upstream's tests and docs) is left out, as on the sdist base; a folder that
    another standalone package ships is left out of this one; any other path outside the mapped folders (the unified
    package's own ``__init__.py``, ``setup.py``) has no counterpart in a standalone package, and is refused.
    """
    text = patch.path.read_bytes().decode(errors="surrogateescape")
    kept: list[str] = []
    paths: list[str] = []
    elsewhere: list[str] = []
    excluded: list[str] = []
    for section in file_sections(text):
        path = section_path(section)
        old = _old_path(section, path)
        if path.startswith(lacks) or path.startswith(mapping.elsewhere):
            if old != path and _is_rename(section) and mapping.path(old) is not None:
                raise SeriesError(
                    f"{patch.name} renames {old} to {path}, out of {mapping.package}, which cannot carry that rename "
                    "(the file would stay in it); make it a deletion and an addition (git format-patch --no-renames)"
                )
            (excluded if path.startswith(lacks) else elsewhere).append(path)
            continue
        if mapping.path(path) is None:
            where = ", ".join(mapping.prefixes)
            raise SeriesError(
                f"{patch.name} changes {path}, which has no counterpart in {mapping.package} (it ships {where} of "
                f"{mapping.base}, mapped as Lightning's .actions/assistant.py does); move that change into a mapped "
                "folder or map the folder in [wheels] of base.toml"
            )
        if mapping.path(old) is None:
            raise SeriesError(
                f"{patch.name} makes {path} from {old}, which {mapping.package} does not ship, so the change cannot "
                f"be mapped onto it; make it an addition (git format-patch --no-renames)"
            )
        kept.append(_map_section(section, path, old, mapping))
        paths.append(path)
    return MappedPatch(patch, "".join(kept), tuple(paths), tuple(elsewhere), tuple(excluded))


def _old_path(section: str, path: str) -> str:
    """The path a section's change starts from: the old path of a rename or a copy (``rename from``, ``copy from``),
    else ``path``."""
    paths = diff_paths(section.split("\n", 1)[0])
    return paths[0] if paths else path


def _is_rename(section: str) -> bool:
    header = section.split("\n@@", 1)[0]
    return any(line.startswith("rename from ") for line in header.splitlines())


def _map_section(section: str, path: str, old: str, mapping: PackageMapping) -> str:
    """One file's section of a diff, with its paths (the old one of a rename or a copy too) and its lines' imports
    mapped (line counts are kept)."""
    if "\nGIT binary patch\n" in section:
        raise SeriesError(f"a binary change of {path} cannot be mapped onto {mapping.package}")
    mapped_path, mapped_old = mapping.path(path), mapping.path(old)
    assert mapped_path is not None
    assert mapped_old is not None
    out: list[str] = []
    in_hunk = False
    for line in section.splitlines(keepends=True):
        if line.startswith("@@"):
            in_hunk = True
            ranges, closing, context = line.partition(" @@")
            out.append(ranges + closing + (mapping.lines(path, [context])[0] if context else ""))
        elif in_hunk and line[:1] in (" ", "+", "-"):
            out.append(line[0] + mapping.lines(path, [line[1:]])[0])
        elif in_hunk:
            out.append(line)  # "\ No newline at end of file", and format-patch's signature after the last hunk
        elif line.startswith("diff --git ") and diff_paths(line.rstrip("\n")) is not None:
            out.append(f"diff --git a/{mapped_old} b/{mapped_path}\n")
        elif line.startswith(("rename from ", "copy from ")):
            out.append(f"{line.split(' from ', 1)[0]} from {mapped_old}\n")
        elif line.startswith(("rename to ", "copy to ")):
            out.append(f"{line.split(' to ', 1)[0]} to {mapped_path}\n")
        elif line.startswith("--- a/"):
            out.append(f"--- a/{mapped_old}\n")
        elif line.startswith("+++ b/"):
            out.append(f"+++ b/{mapped_path}\n")
        elif line.startswith("index "):
            continue  # the blob ids are the unified file's; git apply without --3way does not need them
        else:
            out.append(line)
    return "".join(out)


def load_wheel_pin(path: Path, pin: Pin) -> WheelPin:
    """What the wheel commands build, from the ``[wheels]`` table :func:`patchseries.pin.load_pin` read and checked."""
    if pin.wheels is None:
        raise SeriesError(
            f"pin file {path} has no [wheels] table; the wheel commands need its series_version and the standalone "
            "packages' sdists ([wheels.pytorch_lightning] with url, sha256, ...)"
        )
    wheels = pin.wheels
    return WheelPin(pin, wheels.series_version, wheels.standalones, wheels.fingerprint)
