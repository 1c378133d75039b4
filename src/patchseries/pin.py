"""The pinned base, ``patches/base.toml``: the Lightning release the series is made against, where to get it, and the
release wheels. The one reader of that file: every command reads and checks all of it before anything is fetched."""

from __future__ import annotations

import datetime as dt
import re
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchseries.errors import SeriesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Every key a pin may have, per table: anything else is a typo (``base_comit``) that would silently turn a check off
_KEYS = {
    "": ("base", "sdist", "wheels"),
    "base": ("name", "version", "tag", "git_url", "release_date", "commit"),
    "sdist": ("url", "sha256", "root", "base_commit", "lacks"),
    "wheels": ("series_version", "fingerprint"),  # and a table per standalone package
    "package": ("subpackage", "url", "sha256", "root", "ships"),
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").fullmatch
_SHA256 = re.compile(r"[0-9a-fA-F]{64}").fullmatch


def _is_url(value: str) -> bool:  # a download address (``git_url`` is left to git, which clones more)
    parts = urllib.parse.urlsplit(value)
    return parts.scheme in ("https", "http", "file") and bool(parts.netloc or parts.path)


# Each kind of value: its check (false, or ValueError, for a bad value) and how a bad one is named
_CHECKS: dict[str, tuple[Callable[[str], Any], str]] = {
    "nonempty": (str.strip, "is empty"),
    "name": (  # names a folder (``sdist-<version>``, the sdist's top folder): one path component, no blanks
        re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*").fullmatch,
        "is not a name such as 2.6.6 (letters, digits, '.', '_', '+', '-'): {!r}",
    ),
    "sha256": (_SHA256, "is not 64 hexadecimal digits (a sha256 digest): {!r}"),
    "fingerprint": (_SHA256, "is not the series' fingerprint (64 hexadecimal digits): {!r}"),
    "commit": (re.compile(r"[0-9a-f]{40}").fullmatch, "must be a full 40-hex commit id, not {!r}"),
    "url": (_is_url, "is not a URL (https://... or file://...): {!r}"),
    "date": (dt.date.fromisoformat, "is not a date such as 2026-09-10: {!r}"),
    "module": (_IDENTIFIER, "is not a module name (such as pytorch): {!r}"),
}


@dataclass(frozen=True)
class Standalone:
    """``[wheels.<name>]``: one standalone package the release wheels include."""

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
        """The base this pin names, as an edit tree records it."""
        return f"{self.name} {self.where}"

    @property
    def where(self) -> str:
        """The pinned upstream ref: a tag, or a commit for a series against an unreleased branch."""
        return self.commit or self.tag


class _BadPin(Exception):
    """A value of the pin file that the tool cannot use; the message says which and why."""


def load_pin(path: Path) -> Pin:
    """Read and check a pin file, saved with a byte-order mark or not."""
    try:
        data = tomllib.loads(path.read_bytes().decode().removeprefix("\ufeff"))
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


def _pin(data: dict[str, Any]) -> Pin:
    base = _table(data, "base", "[base] with name, version, ...")
    _known(data, "", _KEYS[""])
    _known(base, "[base] ", _KEYS["base"])
    name, version = _get(base, "base", "name", "nonempty"), _get(base, "base", "version", "name")
    git_url, commit = _get(base, "base", "git_url", "nonempty"), _get(base, "base", "commit", "commit", default="")
    if commit:  # pinned to an upstream commit: there is no release, so no sdist and no tag
        for table in ("sdist", "wheels"):
            if table in data:
                raise _BadPin(f"[{table}] is for a release: a series pinned to an upstream commit has none; remove one")
        return Pin(
            name, version, _get(base, "base", "tag", default=""), git_url, sdist_url="", sdist_sha256="",
            sdist_root="", release_date=_get(base, "base", "release_date", "date", default=""), base_commit=commit,
            sdist_lacks=(), commit=commit,
        )  # fmt: skip
    sdist = _table(data, "sdist", "[sdist] with url, sha256, ...")
    _known(sdist, "[sdist] ", _KEYS["sdist"])
    lacks = sdist.get("lacks", [])
    if not isinstance(lacks, list) or not all(isinstance(item, str) and item.strip() for item in lacks):
        raise _BadPin(f"[sdist] lacks is not a list of paths: {_shown(lacks)}")
    sha256, base_commit = _get(sdist, "sdist", "sha256", "sha256"), _get(sdist, "sdist", "base_commit", "commit", "")
    tag, date = _get(base, "base", "tag", "nonempty"), _get(base, "base", "release_date", "date")
    wheels = _wheels(_table(data, "wheels", "[wheels] with series_version, ..."), name) if "wheels" in data else None
    return Pin(
        name, version, tag, git_url, _get(sdist, "sdist", "url", "url"), sha256.lower(),
        _get(sdist, "sdist", "root", "name"), date, base_commit, tuple(lacks), wheels=wheels,
    )  # fmt: skip


def _wheels(wheels: dict[str, Any], unified: str) -> Wheels:
    _known({key: value for key, value in wheels.items() if not isinstance(value, dict)}, "[wheels] ", _KEYS["wheels"])
    version = wheels.get("series_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _BadPin(f"[wheels] series_version is not a positive integer (such as 7): {_shown(version)}")
    fingerprint = _get(wheels, "wheels", "fingerprint", "fingerprint", default="")
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
    return Wheels(version, fingerprint.lower(), standalones)


def _standalone(name: str, table: dict[str, Any]) -> Standalone:
    where = f"wheels.{name}"
    if not _IDENTIFIER(name):
        raise _BadPin(f"[{where}] is not a package's import name (such as pytorch_lightning)")
    _known(table, f"[{where}] ", _KEYS["package"])
    subpackage, url = _get(table, where, "subpackage", "module"), _get(table, where, "url", "url")
    sha256, root = _get(table, where, "sha256", "sha256").lower(), _get(table, where, "root", "name")
    ships = table.get("ships")
    if not (isinstance(ships, list) and ships and all(isinstance(s, str) and _IDENTIFIER(s) for s in ships)):
        raise _BadPin(f'[{where}] ships is not a list of subpackage names (such as ["pytorch", "fabric"])')
    if subpackage not in ships:
        raise _BadPin(f"[{where}] ships does not list its own subpackage {subpackage!r}")
    return Standalone(name, subpackage, url, sha256, root, tuple(ships))


def _get(table: dict[str, Any], where: str, key: str, check: str = "", default: str | None = None) -> str:
    """The string ``table[key]`` (``default`` where it is optional), of the kind ``check`` names if it is given."""
    if key not in table and default is None:
        raise _BadPin(f"[{where}] lacks the key {key!r}")
    value = table.get(key, default)
    if not isinstance(value, str):
        raise _BadPin(f"[{where}] {key} is not a string: {_shown(value)}")
    if check and (value or default is None):
        try:
            good = _CHECKS[check][0](value)
        except ValueError:
            good = False
        if not good:
            raise _BadPin(f"[{where}] {key} {_CHECKS[check][1].format(value)}")
    return value


def _table(data: dict[str, Any], name: str, shape: str) -> dict[str, Any]:
    table = data[name]
    if not isinstance(table, dict):
        raise _BadPin(f"[{name}] is not a table ({shape})")
    return table


def _known(table: dict[str, Any], where: str, keys: tuple[str, ...]) -> None:
    unknown = sorted(set(table) - set(keys))
    if unknown:
        what = "table" if isinstance(table[unknown[0]], dict) else "key"
        name = f"[{unknown[0]}]" if what == "table" and not where else unknown[0]
        raise _BadPin(f"{where}has the unknown {what} {name!r}; known: {', '.join(keys)}")


def _shown(value: object) -> str:
    """A TOML value as the pin file spells it, not as Python's repr (``datetime.date(2026, 9, 10)``)."""
    if isinstance(value, (dt.date, dt.time)):
        return f'{value.isoformat()} (a TOML date; quote it: "{value.isoformat()}")'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return "a table" if isinstance(value, dict) else "a list"
    return repr(value) if isinstance(value, str) else str(value)
