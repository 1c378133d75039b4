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
class Pin:
    """The contents of ``patches/base.toml``."""

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
    "wheels": (),  # the release wheels' pins: checked by patchseries.standalone, which only the wheel commands read
}
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # a version or a folder name: one path component, no blanks


def _pin(data: dict[str, Any]) -> Pin:
    base = _table(data, "base", "[base] with name, version, ...")
    _known(data, "", tuple(_KEYS))
    _known(base, "[base] ", _KEYS["base"])
    commit = _text(base, "commit", "base", default="")
    if commit:  # pinned to an upstream commit: there is no release, so no sdist and no tag
        _commit_id(commit, "[base] commit")
        if "sdist" in data:
            raise _BadPin("[sdist] is for a release: a series pinned to an upstream commit has none; remove one")
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
    return Pin(
        name=_text(base, "name", "base", nonempty=True),
        version=_name(base, "version", "base"),
        tag=_text(base, "tag", "base", nonempty=True),
        git_url=_text(base, "git_url", "base", nonempty=True),
        release_date=_date(base),
        sdist_url=_url(sdist, "url", "sdist"),
        sdist_sha256=sha256.lower(),
        sdist_root=_name(sdist, "root", "sdist"),
        base_commit=base_commit,
        sdist_lacks=tuple(lacks),
    )


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
