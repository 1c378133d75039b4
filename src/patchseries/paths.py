"""The one place that knows where things live: the series, the work directory and its caches."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from patchseries.errors import SeriesError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
WORKDIR_ENV = "PATCHSERIES_WORKDIR"


@dataclass(frozen=True)
class Workspace:
    """Paths used by one run. ``patches`` holds the series; ``workdir`` holds everything the tool creates."""

    patches: Path
    workdir: Path

    @classmethod
    def default(cls, patches: Path | None = None, workdir: Path | None = None) -> Workspace:
        env_workdir = os.environ.get(WORKDIR_ENV)
        workdir = (workdir or (Path(env_workdir) if env_workdir else PROJECT_ROOT / ".work")).resolve()
        if workdir.exists() and not workdir.is_dir():
            raise SeriesError(
                f"the work directory {workdir} is a file; pass a directory as --workdir (made if missing)"
            )
        return cls(patches=(patches or PROJECT_ROOT / "patches").resolve(), workdir=workdir)

    @property
    def pin_file(self) -> Path:
        return self.patches / "base.toml"

    @property
    def series_file(self) -> Path:
        return self.patches / "series"

    @property
    def downloads(self) -> Path:
        return self.workdir / "downloads"

    @property
    def trees(self) -> Path:
        return self.workdir / "trees"

    @property
    def venvs(self) -> Path:
        return self.workdir / "venvs"

    @property
    def reports(self) -> Path:
        return self.workdir / "reports"


def partial_path(final: Path) -> Path:
    """Where something is built before it is renamed to ``final``: an interrupted run never leaves a half-made one."""
    return final.with_name(final.name + ".partial")


def remove(path: Path) -> None:
    """Remove a file or directory tree if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
