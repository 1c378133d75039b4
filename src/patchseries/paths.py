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

from patchseries.errors import SeriesError

# The checkout this package runs from, when it is installed editable (or run from src/); see project_root()
PROJECT_ROOT = Path(__file__).resolve().parents[2]
WORKDIR_ENV = "PATCHSERIES_WORKDIR"
SERIES_DIR = "patches"
ACCEPTANCE_DIR = "acceptance"  # the project's acceptance suite, laid out like upstream's tests/ (see acceptance.py)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def path_option(value: str) -> Path:
    """Every path option's value (argparse ``type=``): a blank one would silently mean the current directory, and one
    with a control character (a newline) no one-line error and no command printed for a shell can name."""
    if not value.strip():
        raise argparse.ArgumentTypeError("needs a path, not an empty string")
    if _CONTROL.search(value):
        raise argparse.ArgumentTypeError(f"{value!r} has a control character (a newline, a tab, ...); pass a path "
                                         "without one")  # fmt: skip
    return Path(value)


def name_option(value: str) -> str:
    """A name option's value (a git ref, a package): not blank, no control character."""
    if not value.strip() or _CONTROL.search(value):
        raise argparse.ArgumentTypeError(f"needs a name, not {value!r}")
    return value


def project_root(start: Path | None = None) -> Path | None:
    """The project a run belongs to: the checkout this package runs from if it has ``patches/series``, else the
    nearest of the current directory and its parents that has one (an installed, non-editable package), else None.
    """
    if _has_series(PROJECT_ROOT):
        return PROJECT_ROOT
    here = (start or Path.cwd()).resolve()
    return next((folder for folder in (here, *here.parents) if _has_series(folder)), None)


def _has_series(folder: Path) -> bool:
    return (folder / SERIES_DIR / "series").is_file()


@dataclass(frozen=True)
class Workspace:
    """Paths used by one run. ``patches`` holds the series; ``workdir`` holds everything the tool creates; ``project``
    is the project root (its ``acceptance/``), where known."""

    patches: Path
    workdir: Path
    project: Path | None = None
    options: tuple[str, ...] = ()  # --patches and --workdir as the run was given them: what a remedy's command needs

    def command(self, *args: str | Path) -> str:
        """The command line of a remedy: :func:`tool_command` ``ARGS`` with the run's own --patches and --workdir, so
        that it acts on the same series and work directory, run exactly as written."""
        return tool_command(*args, *self.options)

    def command_on(self, patches: str | Path, *args: str | Path) -> str:
        """:meth:`command` on another series folder: ``--patches patches`` and this run's own --workdir."""
        workdir = ("--workdir", self.workdir) if "--workdir" in self.options else ()
        return tool_command(*args, "--patches", patches, *workdir)

    @classmethod
    def default(cls, patches: Path | None = None, workdir: Path | None = None) -> Workspace:
        """``--patches`` else the project's ``patches/``; ``--workdir`` else ``$PATCHSERIES_WORKDIR`` else ``.work``."""
        root = project_root()
        patches_given, workdir_given = patches is not None, workdir is not None
        if patches is None:
            if root is None:
                raise SeriesError(
                    f"cannot find the series: no {SERIES_DIR}/series in {Path.cwd()} or its parents; run from a "
                    "checkout of lightning-compile-series, or pass --patches DIR"
                )
            patches = root / SERIES_DIR
        elif patches.exists() and not patches.is_dir():  # else a file in it "does not exist", or is "Not a directory"
            # with a remedy about permissions and free space
            raise SeriesError(
                f"--patches {patches} is not a directory; pass the series folder (the one with series and base.toml)"
            )
        env_workdir = os.environ.get(WORKDIR_ENV)
        if env_workdir and not env_workdir.strip():
            # " " would make a directory named by blanks in the current directory, as an empty --workdir is refused
            raise SeriesError(
                f"{WORKDIR_ENV}={env_workdir!r} is blank; set it to a directory, or unset it to use .work/ beside "
                "patches/"
            )
        if workdir is None:
            workdir = Path(env_workdir) if env_workdir else (root or patches.resolve().parent) / ".work"
        workdir = workdir.resolve()
        if workdir.exists() and not workdir.is_dir():
            remedy = "pass a directory as --workdir (made if missing)"
            if not workdir_given and env_workdir:  # named where it came from
                remedy = f"it comes from {WORKDIR_ENV}: set that to a directory (made if missing), or unset it"
            raise SeriesError(f"the work directory {workdir} is a file; {remedy}")
        given = [
            *(("--patches", str(patches.resolve())) if patches_given else ()),
            *(("--workdir", str(workdir)) if workdir_given else ()),
        ]
        return cls(patches=patches.resolve(), workdir=workdir, project=root, options=tuple(given))

    @property
    def pin_file(self) -> Path:
        return self.patches / "base.toml"

    @property
    def series_file(self) -> Path:
        return self.patches / "series"

    @property
    def acceptance(self) -> Path:
        """The acceptance suite: ``acceptance/`` of the project root, for every series of the project (the forward
        series in ``patches/master`` too); without a known root, beside ``patches``."""
        return (self.project or self.patches.parent) / ACCEPTANCE_DIR

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

    @property
    def scratch(self) -> Path:
        """The runs' temporary folders: the tool's own, emptied by each run that takes the work directory's lock (a
        killed run's are left there, and no other run uses it meanwhile)."""
        return self.workdir / "tmp"


def tool_command(*args: str | Path) -> str:
    """The one place that writes a command of this tool for a person to run: ``<interpreter> -m patchseries ARGS``,
    with the interpreter this run runs under (``.work/tool-env/bin/python``, by its absolute path). A plain ``python``
    or ``patchseries`` is not the tool environment's in the person's shell (``No module named patchseries``); this one
    runs as written from any directory."""
    return shell(sys.executable or "python3", "-m", "patchseries", *args)


def shell(*words: str | Path) -> str:
    """A command line for a remedy, each word quoted where a shell would split or expand it: run exactly as written,
    it works for a path with a space or a quote too."""
    return " ".join(shlex.quote(str(word)) for word in words)


def kept_path(path: Path) -> Path:
    """Where a refusal tells a person to move their folder that is in the tool's way: ``<path>.mine``, else
    ``<path>.mine-2``, ``-3``, ...: the first name free now, as ``mv`` to a folder that exists moves into it."""
    names = (path.with_name(f"{path.name}.mine{'' if n == 1 else f'-{n}'}") for n in itertools.count(1))
    return next(kept for kept in names if not (kept.exists() or kept.is_symlink()))


def partial_path(final: Path) -> Path:
    """Where something is built before it is renamed to ``final``: an interrupted run never leaves a half-made one."""
    return final.with_name(final.name + ".partial")


def remove(path: Path) -> None:
    """Remove a file or directory tree if it exists; a file that cannot be removed is named by its full path."""
    if path.is_dir() and not path.is_symlink():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=lambda function, failed, error: _named(failed, error))
        else:
            shutil.rmtree(path, onerror=lambda function, failed, info: _named(failed, info[1]))
    elif path.exists() or path.is_symlink():
        path.unlink()


def _named(failed: str, error: BaseException) -> None:
    """Re-raise a failure of ``shutil.rmtree`` naming the full path: its own error names the file relative to its
    folder (``Operation not permitted: __init__.py``), which does not say which file to check."""
    if isinstance(error, OSError) and error.filename != failed:
        raise OSError(error.errno, error.strerror, failed) from error
    raise error
