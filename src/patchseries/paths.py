"""The one place that knows where things live: the series, the work directory and its caches."""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchseries.errors import SeriesError

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout this package runs from, if installed editable
WORKDIR_ENV = "PATCHSERIES_WORKDIR"
SERIES_DIR = "patches"
ACCEPTANCE_DIR = "acceptance"
SCRATCH = "patchseries-tmp"  # a name no person gives a folder: the lock's holder empties it
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def name_option(value: str, what: str = "name") -> str:
    # blank: silently the current directory; a control character (a newline): no one-line error or printed command
    if not value.strip() or _CONTROL.search(value):
        raise argparse.ArgumentTypeError(f"needs a {what}, not {value!r} (blank, or with a control character)")
    return value


def project_root() -> Path | None:
    """The nearest of the current directory and its parents with a series folder, else this package's checkout."""
    here = Path.cwd().resolve()
    roots = (here, *here.parents, PROJECT_ROOT)  # a folder whose series is gone is refused, not passed over
    return next((root for root in roots if (root / SERIES_DIR).is_dir()), None)


class _Under:  # a path of a Workspace: <its attribute>/<name>
    def __init__(self, attribute: str, name: str) -> None:
        self.attribute, self.name = attribute, name

    def __get__(self, ws: Any, owner: Any = None) -> Path:
        return Path(getattr(ws, self.attribute)) / self.name


@dataclass(frozen=True)
class Workspace:  # paths of one run: patches holds the series, workdir all the tool makes, project the project root
    patches: Path
    workdir: Path
    project: Path | None = None
    options: tuple[str, ...] = ()  # --patches and --workdir as given: a remedy's command acts on the same ones
    pin_file = _Under("patches", "base.toml")
    series_file = _Under("patches", "series")
    downloads = _Under("workdir", "downloads")
    trees = _Under("workdir", "trees")
    venvs = _Under("workdir", "venvs")
    reports = _Under("workdir", "reports")
    scratch = _Under("workdir", SCRATCH)  # the runs' temporary folders: emptied by the work directory's lock

    @property
    def acceptance(self) -> Path:  # the project root's (for every series of it), else beside ``patches``
        return (self.project or self.patches.parent) / ACCEPTANCE_DIR

    def command(self, *args: str | Path) -> str:
        return tool_command(*args, *self.options)

    def command_on(self, patches: str | Path, *args: str | Path) -> str:
        workdir = ("--workdir", self.workdir) if "--workdir" in self.options else ()
        return tool_command(*args, "--patches", patches, *workdir)

    @classmethod
    def default(cls, patches: Path | None = None, workdir: Path | None = None) -> Workspace:
        """``--patches`` else the project's ``patches/``; ``--workdir`` else ``$PATCHSERIES_WORKDIR`` else ``.work``."""
        root, env = project_root(), os.environ.get(WORKDIR_ENV)
        options: tuple[str, ...] = ("--patches", str(patches.resolve())) if patches else ()
        if patches is None:
            if root is None:
                raise SeriesError(f"cannot find the series: no {SERIES_DIR}/series in {Path.cwd()} or its parents; "
                                  "run from a checkout of lightning-compile-series, or pass --patches DIR")  # fmt: skip
            patches = root / SERIES_DIR
        elif patches.exists() and not patches.is_dir():
            raise SeriesError(f"--patches {patches} is not a directory; pass the series folder (the one "
                              "with series and base.toml)")  # fmt: skip
        if env and (not env.strip() or _CONTROL.search(env)):  # as such a --workdir is refused
            raise SeriesError(f"{WORKDIR_ENV}={env!r} is blank or has a control character; set it to a directory, "
                              "or unset it to use .work/ beside patches/")  # fmt: skip
        options += ("--workdir", str(workdir.resolve())) if workdir else ()
        workdir = (workdir or (Path(env) if env else (root or patches.resolve().parent) / ".work")).resolve()
        if workdir.exists() and not workdir.is_dir():
            remedy = "pass a directory as --workdir (made if missing)"
            if "--workdir" not in options and env:
                remedy = f"it comes from {WORKDIR_ENV}: set that to a directory (made if missing), or unset it"
            raise SeriesError(f"the work directory {workdir} is a file; {remedy}")
        return cls(patches=patches.resolve(), workdir=workdir, project=root, options=options)


def tool_command(*args: str | Path) -> str:
    """A command of this tool for a person to run, from any shell and directory (a plain ``python`` may lack it)."""
    return shell(sys.executable or "python3", "-m", "patchseries", *args)


def shell(*words: str | Path) -> str:  # each word quoted where a shell would split or expand it
    return " ".join(shlex.quote(str(word)) for word in words)


def kept_path(path: Path) -> Path:
    """Where a refusal tells a person to move their folder: the first free of ``<path>.mine``, ``<path>.mine-2``..."""
    names = (path.with_name(f"{path.name}.mine{'' if n == 1 else f'-{n}'}") for n in itertools.count(1))
    return next(kept for kept in names if not (kept.exists() or kept.is_symlink()))


def remove(path: Path) -> None:
    """Remove a file or folder if it exists; a file that cannot be removed is named by its full path, not rmtree's."""

    def named(function: Any, failed: str, error: Any) -> None:
        error = error if isinstance(error, BaseException) else error[1]  # onexc, or onerror's exc_info
        raise OSError(error.errno, error.strerror, failed) from error

    hook: dict[str, Any] = {"onexc" if sys.version_info >= (3, 12) else "onerror": named}
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, **hook)
    elif path.exists() or path.is_symlink():
        path.unlink()
