"""The pinned base, ``patches/base.toml``, and its one reader: every command checks all of it before any fetch."""

from __future__ import annotations

import datetime as dt
import re
import sys
import urllib.parse
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchseries.errors import SeriesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").fullmatch
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*").fullmatch  # names a folder: one path component, no blanks


def _list_of(check: Callable[[str], Any]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, list) and all(isinstance(item, str) and check(item) for item in value)


# Every key of each table and the kind of its value; a trailing "?" marks an optional key (empty where absent).
# Any other key is a typo (``base_comit``) that would silently turn a check off, so it is refused.
_SCHEMA = {
    "base": dict(name="text", version="name", tag="text", git_url="text", release_date="date", commit="commit?"),
    "sdist": dict(url="url", sha256="sha256", root="name", base_commit="commit?", lacks="paths?"),
    "wheels": dict(series_version="count", fingerprint="sha256?"),  # and a table per standalone package
    "wheels.*": dict(subpackage="module", url="url", sha256="sha256", root="name", ships="modules"),
}
# Each kind: its check (false, or ValueError, for a bad value) and what a bad value is, ``{}`` standing for the value
_CHECKS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "text": (str.strip, "is empty"),
    "name": (_NAME, "is not a name such as 2.6.6 (letters, digits, '.', '_', '+', '-'): {}"),
    "sha256": (re.compile(r"[0-9a-fA-F]{64}").fullmatch, "is not 64 hexadecimal digits (a sha256 digest): {}"),
    "commit": (re.compile(r"[0-9a-f]{40}").fullmatch, "must be a full 40-hex commit id, not {}"),
    "url": (  # a download address (``git_url`` is left to git, which clones more)
        lambda value: urllib.parse.urlsplit(value).scheme in ("https", "http", "file"),
        "is not a URL (https://... or file://...): {}",
    ),
    "date": (dt.date.fromisoformat, "is not a date such as 2026-09-10: {}"),
    "module": (_IDENTIFIER, "is not a module name (such as pytorch): {}"),
    "count": (lambda value: type(value) is int and value >= 1, "is not a positive integer (such as 7): {}"),
    "paths": (_list_of(str.strip), "is not a list of paths: {}"),
    "modules": (_list_of(_IDENTIFIER), 'is not a list of subpackage names (such as ["pytorch", "fabric"]): {}'),
}
_NOT_STRINGS = ("count", "paths", "modules")


@dataclass(frozen=True)
class Standalone:  # [wheels.<name>]: one standalone package the release wheels include
    name: str  # the import name and the wheel's name: pytorch_lightning
    subpackage: str  # the unified package's subpackage it mirrors: pytorch (lightning.pytorch)
    url: str
    sha256: str
    root: str  # the sdist's top folder
    ships: tuple[str, ...]  # the subpackages whose mirrors its sdist carries: pytorch, fabric


@dataclass(frozen=True)
class Wheels:  # [wheels]: the wheels' series number, the fingerprint released under it, the standalone packages
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
    commit: str  # a series against an upstream commit (the forward series for master) pins it here, no sdist
    wheels: Wheels | None = None

    @property
    def sdist_filename(self) -> str:
        return self.sdist_url.rsplit("/", 1)[-1]

    @property
    def identity(self) -> str:  # the base this pin names, as an edit tree records it
        return f"{self.name} {self.where}"

    @property
    def where(self) -> str:  # the pinned upstream ref: a tag, or a commit for a series against an unreleased branch
        return self.commit or self.tag


class _BadPin(Exception): ...  # a value of the pin file that the tool cannot use; the message says which and why


def load_pin(path: Path) -> Pin:
    try:
        data = tomllib.loads(path.read_bytes().decode().removeprefix("\ufeff"))
        commit_pinned = isinstance(data.get("base"), dict) and bool(data["base"].get("commit"))
        base = _table(data, "base", optional=("tag", "release_date") if commit_pinned else ())
        if unknown := sorted(set(data) - {"base", "sdist", "wheels"}):
            raise _BadPin(f"has the unknown table '[{unknown[0]}]'; known: base, sdist, wheels")
        if commit_pinned:  # pinned to an upstream commit: there is no release, so no sdist and no wheels
            if "sdist" in data or "wheels" in data:
                raise _BadPin("[sdist] and [wheels] are for a release: a series pinned to an upstream commit has none")
            sdist = {"url": "", "sha256": "", "root": "", "base_commit": base["commit"], "lacks": ()}
        else:
            sdist = _table(data, "sdist")
        sdist_fields = {("" if key == "base_commit" else "sdist_") + key: value for key, value in sdist.items()}
        return Pin(**base, **sdist_fields, wheels=_wheels(data, base["name"]) if "wheels" in data else None)
    except FileNotFoundError:
        raise SeriesError(f"pin file {path} does not exist") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8
        raise SeriesError(f"pin file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SeriesError(f"pin file {path} is not valid TOML: {exc}") from None
    except _BadPin as exc:
        raise SeriesError(f"pin file {path}: {exc}") from None


def _wheels(data: dict[str, Any], unified: str) -> Wheels:
    wheels = _table(data, "wheels")
    raw = data["wheels"]
    standalones = [Standalone(n, **_table(raw, n, prefix="wheels.")) for n, t in raw.items() if isinstance(t, dict)]
    subpackages = [s.subpackage for s in standalones]
    for s in standalones:
        problems = [
            (not _IDENTIFIER(s.name), "is not a package's import name (such as pytorch_lightning)"),
            (s.name == unified, "is the unified package, pinned in [sdist]"),
            (s.subpackage not in s.ships, f"ships does not list its own subpackage {s.subpackage!r}"),
            (subpackages.count(s.subpackage) > 1, "names a subpackage that another [wheels.*] table names too"),
            (not set(s.ships) <= set(subpackages), "ships a subpackage that no [wheels.*] table names"),
        ]
        if problem := next((message for bad, message in problems if bad), ""):
            raise _BadPin(f"[wheels.{s.name}] {problem}")
    return Wheels(**wheels, standalones=tuple(standalones))


def _table(parent: dict[str, Any], name: str, optional: tuple[str, ...] = (), prefix: str = "") -> dict[str, Any]:
    """The values of ``parent[name]``, checked as ``_SCHEMA`` says (``optional``: more keys that may be absent)."""
    where, table = prefix + name, parent.get(name)
    schema = _SCHEMA["wheels.*" if prefix else name]
    if not isinstance(table, dict):
        raise _BadPin(f"[{where}] is not a table ([{where}] with {', '.join(list(schema)[:2])}, ...)")
    keys = [key for key, value in table.items() if not (where == "wheels" and isinstance(value, dict))]
    if unknown := sorted(set(keys) - set(schema)):
        what = "table" if isinstance(table[unknown[0]], dict) else "key"
        raise _BadPin(f"[{where}] has the unknown {what} {unknown[0]!r}; known: {', '.join(schema)}")
    values = {}
    for key, kind in schema.items():
        absent_ok, kind = kind.endswith("?") or key in optional, kind.rstrip("?")
        if key not in table and not absent_ok:
            raise _BadPin(f"[{where}] lacks the key {key!r}")
        value = table.get(key, [] if kind in _NOT_STRINGS else "")
        if kind not in _NOT_STRINGS and not isinstance(value, str):
            raise _BadPin(f"[{where}] {key} is not a string: {_shown(value)}")
        good, (check, bad) = False, _CHECKS[kind]
        with suppress(ValueError):
            good = (absent_ok and value == "") or check(value)
        if not good:
            raise _BadPin(f"[{where}] {key} {bad.format(_shown(value))}")
        # a digest compares with hashlib's (lower case); a list is kept as a tuple
        values[key] = tuple(value) if isinstance(value, list) else value.lower() if kind == "sha256" else value
    return values


def _shown(value: object) -> str:
    if isinstance(value, (dt.date, dt.time)):  # not Python's datetime.date(2026, 9, 10)
        return f'{value.isoformat()} (a TOML date; quote it: "{value.isoformat()}")'
    return repr(value)
