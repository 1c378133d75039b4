"""The pinned base: which Lightning release the series is made against, and where to get it."""

from __future__ import annotations

import datetime as dt
import re
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchseries.errors import SeriesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")
_URL_SCHEMES = ("https", "http", "file")


@dataclass(frozen=True)
class Standalone:
    """One standalone package the release wheels include: ``[wheels.<name>]``."""

    name: str  # the import name and the wheel's name: pytorch_lightning
    subpackage: str  # the unified package's subpackage it mirrors: pytorch (lightning.pytorch)
    url: str
    sha256: str
    root: str  # the sdist's top folder
    ships: tuple[str, ...]  # the subpackages whose mirrors its sdist carries: pytorch, fabric

    @property
    def sdist_filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Wheels:
    """``[wheels]``: the release wheels' series number, the fingerprint released under it, the standalone packages."""

    series_version: int
    fingerprint: str
    standalones: tuple[Standalone, ...]


@dataclass(frozen=True)
class Pin:
    """The contents of ``patches/base.toml``: the one reader of that file, every table checked by every command."""

    name: str
    version: str
    tag: str
    git_url: str
    sdist_url: str
    sdist_sha256: str
    sdist_root: str
    release_date: str
    base_commit: str
    sdist_lacks: tuple[str, ...]
    commit: str = ""  # a series against an upstream commit (the forward series for master) pins it here, no sdist
    wheels: Wheels | None = None

    @property
    def sdist_filename(self) -> str:
        return self.sdist_url.rsplit("/", 1)[-1]

    @property
    def has_sdist(self) -> bool:
        return bool(self.sdist_url)

    @property
    def identity(self) -> str:
        """The base this pin names, as an edit tree records it: a release by its tag, else the upstream commit."""
        return f"{self.name} {self.where}"

    @property
    def where(self) -> str:
        """The pinned upstream ref: a tag, or a commit for a series against an unreleased branch."""
        return self.commit or self.tag


def load_pin(path: Path) -> Pin:
    """Read and validate a pin file: every value the tool uses is checked here, before anything is fetched."""
    try:
        data = tomllib.loads(path.read_bytes().decode().removeprefix("\ufeff"))  # as the series file: an editor's BOM
    except FileNotFoundError:
        raise SeriesError(f"pin file {path} does not exist") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8
        raise SeriesError(f"pin file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SeriesError(f"pin file {path} is not valid TOML: {exc}") from None
    try:
        return _pin(data)
    except KeyError as exc:
        raise SeriesError(f"pin file {path} lacks the key {exc.args[0]!r}") from None
    except _BadPin as exc:
        raise SeriesError(f"pin file {path}: {exc}") from None


class _BadPin(Exception):
    """A value of the pin file that the tool cannot use; the message says which and why."""


# Every key a pin may have, per table: anything else is a typo (``base_comit``) that would silently turn a check off
_KEYS = {
    "base": ("name", "version", "tag", "git_url", "release_date", "commit"),
    "sdist": ("url", "sha256", "root", "base_commit", "lacks"),
    "wheels": ("series_version", "fingerprint"),  # and a table per standalone package
    "package": ("subpackage", "url", "sha256", "root", "ships"),
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # a version or a folder name: one path component, no blanks


def _pin(data: dict[str, Any]) -> Pin:
    base = _table(data, "base", "[base] with name, version, ...")
    _known(data, "", ("base", "sdist", "wheels"))
    _known(base, "[base] ", _KEYS["base"])
    commit = _text(base, "commit", "base", default="")
    if commit:  # pinned to an upstream commit: there is no release, so no sdist and no tag
        _commit_id(commit, "[base] commit")
        for table in ("sdist", "wheels"):
            if table in data:
                raise _BadPin(f"[{table}] is for a release: a series pinned to an upstream commit has none; remove one")
        return Pin(
            name=_text(base, "name", "base", nonempty=True), version=_name(base, "version", "base"),
            tag=_text(base, "tag", "base", default=""), git_url=_text(base, "git_url", "base", nonempty=True),
            release_date=_date(base, default=""), sdist_url="", sdist_sha256="", sdist_root="", base_commit=commit,
            sdist_lacks=(), commit=commit,
        )  # fmt: skip
    sdist = _table(data, "sdist", "[sdist] with url, sha256, ...")
    _known(sdist, "[sdist] ", _KEYS["sdist"])
    lacks = sdist.get("lacks", [])
    if not isinstance(lacks, list) or not all(isinstance(item, str) and item.strip() for item in lacks):
        raise _BadPin(f"[sdist] lacks is not a list of paths: {_shown(lacks)}")
    sha256 = _text(sdist, "sha256", "sdist")
    if not _SHA256.fullmatch(sha256):
        raise _BadPin(f"[sdist] sha256 is not 64 hexadecimal digits (a sha256 digest): {sha256!r}")
    base_commit = _text(sdist, "base_commit", "sdist", default="")
    if base_commit:
        _commit_id(base_commit, "[sdist] base_commit")
    name = _text(base, "name", "base", nonempty=True)
    return Pin(
        name=name,
        version=_name(base, "version", "base"),
        tag=_text(base, "tag", "base", nonempty=True),
        git_url=_text(base, "git_url", "base", nonempty=True),
        release_date=_date(base),
        sdist_url=_url(sdist, "url", "sdist"),
        sdist_sha256=sha256.lower(),
        sdist_root=_name(sdist, "root", "sdist"),
        base_commit=base_commit,
        sdist_lacks=tuple(lacks),
        wheels=_wheels(_table(data, "wheels", "[wheels] with series_version, ..."), name) if "wheels" in data else None,
    )


def _wheels(wheels: dict[str, Any], unified: str) -> Wheels:
    _known({key: value for key, value in wheels.items() if not isinstance(value, dict)}, "[wheels] ", _KEYS["wheels"])
    version = wheels.get("series_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _BadPin(f"[wheels] series_version is not a positive integer (such as 7): {_shown(version)}")
    recorded = _text(wheels, "fingerprint", "wheels", default="")
    if recorded and not _SHA256.fullmatch(recorded):
        raise _BadPin(f"[wheels] fingerprint is not the series' fingerprint (64 hexadecimal digits): {recorded!r}")
    standalones = tuple(_standalone(name, table) for name, table in wheels.items() if isinstance(table, dict))
    subpackages = [s.subpackage for s in standalones]
    if len(set(subpackages)) != len(subpackages):
        raise _BadPin("[wheels] names one subpackage for two standalone packages")
    for standalone in standalones:
        if standalone.name == unified:
            raise _BadPin(f"[wheels.{standalone.name}] is the unified package, pinned in [sdist]")
        missing = [sub for sub in standalone.ships if sub not in subpackages]
        if missing:
            raise _BadPin(f"[wheels.{standalone.name}] ships {missing[0]!r}, which no [wheels.*] table names as its "
                          "subpackage")  # fmt: skip
    return Wheels(version, recorded.lower(), standalones)


def _standalone(name: str, table: dict[str, Any]) -> Standalone:
    where = f"wheels.{name}"
    if not _IDENTIFIER.fullmatch(name):
        raise _BadPin(f"[{where}] is not a package's import name (such as pytorch_lightning)")
    _known(table, f"[{where}] ", _KEYS["package"])
    missing = [key for key in _KEYS["package"] if key not in table]
    if missing:
        raise _BadPin(f"[{where}] lacks the key {missing[0]!r}")
    subpackage, sha256, ships = _text(table, "subpackage", where), _text(table, "sha256", where), table["ships"]
    if not _IDENTIFIER.fullmatch(subpackage):
        raise _BadPin(f"[{where}] subpackage is not a module name (such as pytorch): {subpackage!r}")
    if not _SHA256.fullmatch(sha256):
        raise _BadPin(f"[{where}] sha256 is not 64 hexadecimal digits (a sha256 digest): {sha256!r}")
    if not (isinstance(ships, list) and ships and all(isinstance(s, str) and _IDENTIFIER.fullmatch(s) for s in ships)):
        raise _BadPin(f'[{where}] ships is not a list of subpackage names (such as ["pytorch", "fabric"])')
    if subpackage not in ships:
        raise _BadPin(f"[{where}] ships does not list its own subpackage {subpackage!r}")
    return Standalone(
        name=name, subpackage=subpackage, url=_url(table, "url", where), sha256=sha256.lower(),
        root=_name(table, "root", where), ships=tuple(ships),
    )  # fmt: skip


def _known(table: dict[str, Any], where: str, keys: tuple[str, ...]) -> None:
    unknown = sorted(set(table) - set(keys))
    if unknown:
        what = "table" if isinstance(table[unknown[0]], dict) else "key"
        name = f"[{unknown[0]}]" if what == "table" and not where else unknown[0]
        raise _BadPin(f"{where}has the unknown {what} {name!r}; known: {', '.join(keys)}")


def _commit_id(value: str, where: str) -> None:
    if not _FULL_COMMIT.fullmatch(value):
        raise _BadPin(f"{where} must be a full 40-hex commit id, not {value!r}")


def _table(data: dict[str, Any], name: str, shape: str) -> dict[str, Any]:
    table = data[name]
    if not isinstance(table, dict):
        raise _BadPin(f"[{name}] is not a table ({shape})")
    return table


def _text(table: dict[str, Any], key: str, name: str, default: str | None = None, nonempty: bool = False) -> str:
    value = table[key] if default is None else table.get(key, default)
    if not isinstance(value, str):
        raise _BadPin(f"[{name}] {key} is not a string: {_shown(value)}")
    if nonempty and not value.strip():
        raise _BadPin(f"[{name}] {key} is empty")
    return value


def _name(table: dict[str, Any], key: str, name: str) -> str:
    """A value that names a folder (``sdist-<version>``, the sdist's top folder): one path component."""
    value = _text(table, key, name)
    if not _NAME.fullmatch(value):
        raise _BadPin(f"[{name}] {key} is not a name such as 2.6.6 (letters, digits, '.', '_', '+', '-'): {value!r}")
    return value


def _shown(value: object) -> str:
    """A TOML value as the pin file spells it, not as Python's repr (``datetime.date(2026, 9, 10)``)."""
    if isinstance(value, (dt.date, dt.time)):  # a datetime is a date too
        return f'{value.isoformat()} (a TOML date; quote it: "{value.isoformat()}")'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return repr(value) if isinstance(value, str) else str(value)


def _url(table: dict[str, Any], key: str, name: str) -> str:
    """A download address: ``https://``, ``http://`` or ``file://`` with a host or a path (``git_url`` is left to
    git, which also clones ``user@host:path`` and local paths)."""
    value = _text(table, key, name)
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in _URL_SCHEMES or not (parts.netloc or parts.path):
        raise _BadPin(f"[{name}] {key} is not a URL (https://... or file://...): {value!r}")
    return value


def _date(base: dict[str, Any], default: str | None = None) -> str:
    value = _text(base, "release_date", "base", default)
    if value or default is None:
        try:
            dt.date.fromisoformat(value)
        except ValueError:
            raise _BadPin(f"[base] release_date is not a date such as 2026-09-10: {value!r}") from None
    return value
