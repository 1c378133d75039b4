"""The pinned base: which Lightning release the series is made against, and where to get it."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from patchseries.errors import SeriesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")


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
    def where(self) -> str:
        """The pinned upstream ref: a tag, or a commit for a series against an unreleased branch."""
        return self.commit or self.tag


def load_pin(path: Path) -> Pin:
    """Read and validate a pin file."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SeriesError(f"pin file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SeriesError(f"pin file {path} is not valid TOML: {exc}") from None
    try:
        base = data["base"]
        commit = str(base.get("commit", ""))
        if commit:  # pinned to an upstream commit: there is no release, so no sdist and no tag
            if not _FULL_COMMIT.fullmatch(commit):
                raise SeriesError(f"pin file {path}: commit must be a full 40-hex commit id, not {commit!r}")
            return Pin(
                name=str(base["name"]), version=str(base["version"]), tag=str(base.get("tag", "")),
                git_url=str(base["git_url"]), release_date=str(base.get("release_date", "")), sdist_url="",
                sdist_sha256="", sdist_root="", base_commit=commit, sdist_lacks=(), commit=commit,
            )  # fmt: skip
        sdist = data["sdist"]
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
