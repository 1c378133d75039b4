"""The minimal test harness the series' tests import, written only when the base has no upstream ``tests/``.

The PyPI sdist ships ``src/`` only. The series' tests follow Lightning's layout and import
``tests_pytorch.helpers.runif.RunIf`` / ``tests_fabric.helpers.runif.RunIf``; on an upstream checkout those come from
upstream, on the sdist this module provides equivalents built on Lightning's own ``_runif_reasons``. The files are
untracked and git-ignored in the base repository, so they never enter a commit or an exported patch.
"""

from __future__ import annotations

from pathlib import Path

from patchseries.gitcmd import add_excludes
from patchseries.series import Patch

RUNIF = '''\
"""RunIf for {suite}, written by patchseries because this Lightning base ships no tests/."""

import pytest

from {package}.utilities.testing import _runif_reasons


def RunIf(**kwargs):  # noqa: N802 - same name as Lightning's own helper
    reasons, marker_kwargs = _runif_reasons(**kwargs)
    reason = f"Requires: [{{' + '.join(reasons)}}]"
    return pytest.mark.skipif(condition=len(reasons) > 0, reason=reason, **marker_kwargs)
'''
_SUITES = {"tests_pytorch": "lightning.pytorch", "tests_fabric": "lightning.fabric"}
HARNESS_MARK = "written by patchseries"
_MARKER = f'"""Package marker {HARNESS_MARK}."""\n'


def write_harness(tree: Path, patches: list[Patch]) -> list[Path]:
    """Write RunIf helpers and package ``__init__`` files the series' tests need; return what was written."""
    written: list[Path] = []
    for suite, package in _SUITES.items():
        runif = tree / "tests" / suite / "helpers" / "runif.py"
        content = RUNIF.format(suite=suite, package=package)
        if runif.exists() and (HARNESS_MARK not in runif.read_text() or runif.read_text() == content):
            continue  # an upstream checkout's own helpers, or ours from an earlier run
        runif.parent.mkdir(parents=True, exist_ok=True)
        runif.write_text(content)
        written.append(runif)
        written += _package_markers(tree / "tests" / suite, [tree / "tests" / suite / "helpers"])
    test_dirs = [(tree / f).parent for f in series_test_files(patches)]
    for suite in _SUITES:
        inside = [d for d in test_dirs if (tree / "tests" / suite) in (d, *d.parents)]
        written += _package_markers(tree / "tests" / suite, inside)
    add_excludes(tree, [f"/{p.relative_to(tree).as_posix()}" for p in written])
    return written


def harness_texts() -> set[bytes]:
    """Every text :func:`write_harness` writes: a file in ``tests/`` with another text is not the harness's."""
    runifs = {RUNIF.format(suite=suite, package=package) for suite, package in _SUITES.items()}
    return {text.encode() for text in (*runifs, _MARKER)}


def series_test_files(patches: list[Patch]) -> list[str]:
    """The test modules the series adds (new ``test_*.py`` files under ``tests/``), in series order."""
    files: list[str] = []
    for patch in patches:
        for path in patch.new_files:
            name = path.rsplit("/", 1)[-1]
            if path.startswith("tests/") and name.startswith("test_") and name.endswith(".py") and path not in files:
                files.append(path)
    return files


def _package_markers(suite_root: Path, directories: list[Path]) -> list[Path]:
    """Empty ``__init__.py`` files from ``suite_root`` down to each directory, where upstream has them too."""
    written: list[Path] = []
    for directory in directories:
        for folder in [directory, *directory.parents]:
            if suite_root not in (folder, *folder.parents):
                break
            marker = folder / "__init__.py"
            if not marker.exists():
                folder.mkdir(parents=True, exist_ok=True)
                marker.write_text(_MARKER)
                written.append(marker)
    return written
