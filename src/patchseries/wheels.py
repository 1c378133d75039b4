"""Which Python versions can run the main job: Lightning's floor, and the Pythons each torch release has wheels for.

A combination that cannot install is refused before any work, with one line naming both versions, instead of after
the download, the apply and a failed resolution.

The table holds facts read from PyPI on 2026-12-01, for Linux x86_64 (manylinux), with one look-up per Python:
``pip index versions torch --isolated --only-binary=:all: --python-version 3.Y --platform manylinux_2_28_x86_64``
(with ``PIP_CONFIG_FILE=/dev/null``, so that no local constraint file caps torch) for Y = 9 ... 14. The range of a
release is the oldest and the newest of those Pythons with a wheel; torch does not add wheels to a past release. The
releases of a minor release are ``.0`` up to its newest patch release, :data:`TORCH_NEWEST_PATCH` (checked on PyPI
when a release was added; the releases ``matrix`` runs by default). A release the tables do not hold (newer than their
newest minor release, or a patch release past the newest of its minor release: ``2.14.9``) is refused by the command
line before any work, as an older one is: else it would fail in the installer, after a fresh environment was made. A
new patch release of torch is added to :data:`TORCH_NEWEST_PATCH` with the tool.
"""

from __future__ import annotations

import sys

from patchseries.errors import SeriesError

LIGHTNING = "Lightning 2.6.6"
# lightning-2.6.6.tar.gz, PKG-INFO: "Requires-Python: >=3.10"
PYTHON_FLOOR = (3, 10)

Version = tuple[int, int]
# torch (major, minor) -> (oldest, newest) Python among 3.9-3.14 with a wheel of that release
TORCH_PYTHONS: dict[Version, tuple[Version, Version]] = {
    (2, 1): ((3, 9), (3, 11)),
    (2, 2): ((3, 9), (3, 12)),
    (2, 3): ((3, 9), (3, 12)),
    (2, 4): ((3, 9), (3, 12)),
    (2, 5): ((3, 9), (3, 13)),
    (2, 6): ((3, 9), (3, 13)),
    (2, 7): ((3, 9), (3, 13)),
    (2, 8): ((3, 9), (3, 13)),
    (2, 9): ((3, 10), (3, 14)),
    (2, 10): ((3, 10), (3, 14)),
    (2, 11): ((3, 10), (3, 14)),
    (2, 12): ((3, 10), (3, 14)),
    (2, 13): ((3, 10), (3, 14)),
    (2, 14): ((3, 10), (3, 14)),
    (2, 15): ((3, 11), (3, 14)),
}

# torch (major, minor) -> its newest patch release (2.14 -> 1: 2.14.0 and 2.14.1); matrix.DEFAULT_VERSIONS is these
TORCH_NEWEST_PATCH: dict[Version, int] = {
    (2, 1): 2,
    (2, 2): 2,
    (2, 3): 1,
    (2, 4): 1,
    (2, 5): 1,
    (2, 6): 0,
    (2, 7): 1,
    (2, 8): 0,
    (2, 9): 1,
    (2, 10): 0,
    (2, 11): 0,
    (2, 12): 1,
    (2, 13): 0,
    (2, 14): 1,
    (2, 15): 0,
}


def running_python() -> Version:
    return sys.version_info[0], sys.version_info[1]


def check_python(torch: str, torch_release: tuple[int, int, int], python: Version) -> None:
    """Refuse a Python that Lightning does not support, or that ``torch`` has no wheel for."""
    shown = _show(python)
    if python < PYTHON_FLOOR:
        raise SeriesError(
            f"Python {shown} is too old: {LIGHTNING} needs Python {_show(PYTHON_FLOOR)} or newer; "
            "run patchseries with a newer Python"
        )
    span = TORCH_PYTHONS.get(torch_release[:2])
    if span and not span[0] <= python <= span[1]:
        oldest = max(span[0], PYTHON_FLOOR)
        raise SeriesError(
            f"torch {torch} has no wheel for Python {shown} (it has for Python {_show(oldest)} to {_show(span[1])}); "
            f"run patchseries with one of those, or pick another --torch"
        )


def check_known(torch: str, torch_release: tuple[int, int, int]) -> None:
    """Refuse a ``--torch`` that is not a release of the table, before the tree is built for nothing: newer than every
    release, or a patch release its minor release does not have: else the tree or an environment is built, then
    fails to install."""
    newest = max(TORCH_PYTHONS)
    if torch_release[:2] > newest:
        raise SeriesError(
            f"torch {torch} is newer than every release this tool knows (up to {_show(newest)}, "
            "src/patchseries/wheels.py); pick another --torch"
        )
    patch = TORCH_NEWEST_PATCH.get(torch_release[:2])
    if patch is not None and torch_release[2] > patch:
        minor = _show(torch_release[:2])
        releases = f"{minor}.0 to {minor}.{patch}" if patch else f"{minor}.0 alone"
        raise SeriesError(
            f"torch {torch} is not a release this tool knows: torch {minor} has {releases} "
            "(src/patchseries/wheels.py); pick one of those, or another --torch"
        )


def _show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"
