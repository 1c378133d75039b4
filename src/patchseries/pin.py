"""The pinned base: which Lightning release the series is made against, and where to get it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from patchseries.errors import SeriesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


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

    @property
    def sdist_filename(self) -> str:
        return self.sdist_url.rsplit("/", 1)[-1]


def load_pin(path: Path) -> Pin:
    """Read and validate a pin file."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SeriesError(f"pin file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SeriesError(f"pin file {path} is not valid TOML: {exc}") from None
    try:
        base, sdist = data["base"], data["sdist"]
        return Pin(
            name=str(base["name"]),
            version=str(base["version"]),
            tag=str(base["tag"]),
            git_url=str(base["git_url"]),
            release_date=str(base["release_date"]),
            sdist_url=str(sdist["url"]),
            sdist_sha256=str(sdist["sha256"]).lower(),
            sdist_root=str(sdist["root"]),
            base_commit=str(sdist.get("base_commit", "")),
            sdist_lacks=tuple(str(p) for p in sdist.get("lacks", [])),
        )
    except KeyError as exc:
        raise SeriesError(f"pin file {path} lacks the key {exc.args[0]!r}") from None
