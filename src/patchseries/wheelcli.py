"""The wheel commands of the command line: ``wheels`` (build) and ``test-wheels`` (install and test)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from patchseries.errors import SeriesError
from patchseries.paths import Workspace, name_option, path_option
from patchseries.pin import load_pin
from patchseries.progress import make_log
from patchseries.runner import (
    DEFAULT_TORCH,
    check_python,
    known_torch,
    parse_torch_version,
    running_python,
    torch_index,
)
from patchseries.series import Patch, snapshot_series
from patchseries.standalone import WheelPin, load_wheel_pin
from patchseries.wheeldist import check_dist, default_dist

COMMANDS = ("wheels", "test-wheels")
WHEELS_DESCRIPTION = """\
Build the release series into wheels of lightning, pytorch_lightning and lightning_fabric, in dist/: each from its
pinned sdist (sha256 checked), the series applied (for a standalone package, mapped onto its paths and imports as
Lightning's own build mirrors them), built by the package's own build backend, with the local version
<release>+series.<series_version> (a series other than the one base.toml's [wheels] fingerprint records:
<release>+changed.<series_version>.<its fingerprint>, below every released one) and the series' record
(patch-series.json) in its .dist-info. dist/ gets every wheel in one step or none, and anything of yours at a
wheel's name is refused before any build; a tree that is not exactly the series is refused.
"""
TEST_DESCRIPTION = """\
Install the wheels of dist/ into a fresh environment with a torch release (with uv or pip, not editable), check
that the installed files are the patched ones (one line per patch, taken from the patch files), and run the
acceptance suite against the installed package (for a standalone package, with its imports mapped).
"""


def add_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register the wheel commands on ``sub`` (the command line's subparsers)."""
    raw = argparse.RawDescriptionHelpFormatter
    wheels = sub.add_parser(
        "wheels", parents=parents, help="build the release wheels (lightning and the standalone packages) into dist/",
        description=WHEELS_DESCRIPTION, formatter_class=raw,
    )  # fmt: skip
    wheels.add_argument("--dist", type=path_option, metavar="DIR", help="where the wheels go (default: dist/ of the "
                        "project)")  # fmt: skip
    wheels.set_defaults(handler=cmd_wheels)
    test = sub.add_parser(
        "test-wheels", parents=parents, help="install the wheels of dist/ with torch and run the acceptance suite",
        description=TEST_DESCRIPTION, formatter_class=raw, epilog="pytest arguments go after --, e.g. -- -x",
    )  # fmt: skip
    test.add_argument("--dist", type=path_option, metavar="DIR", help="where the wheels are (default: dist/)")
    test.add_argument("--torch", action="append", help=f"a torch release (repeatable; default {DEFAULT_TORCH})")
    test.add_argument(
        "--package", action="append", type=_package, help="a package whose wheel to test, as pip or import names it "
        "(repeatable; default: lightning and pytorch_lightning)",
    )  # fmt: skip
    test.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto", help="auto: uv if present")
    test.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="extra pytest arguments, after --")
    test.set_defaults(handler=cmd_test_wheels)


def validate(args: argparse.Namespace, ws: Workspace) -> None:
    """Refuse bad values and a bad ``[wheels]`` pin before anything is made or downloaded."""
    if args.command not in COMMANDS:
        return
    wheel_pin = load_wheel_pin(ws.pin_file, load_pin(ws.pin_file))
    check_dist(_dist(args, ws), ws, writes=args.command == "wheels")
    if args.command == "test-wheels":
        torch_index()
        # as `test` and `matrix` take --torch: a release this tool knows, that has a wheel for this Python
        args.torch = list(dict.fromkeys(known_torch(v) for v in (args.torch or [DEFAULT_TORCH])))
        for version in args.torch:
            check_python(version, parse_torch_version(version), running_python())
        default = [wheel_pin.pin.name, *(s.name for s in wheel_pin.standalones if s.subpackage == "pytorch")]
        args.package = list(dict.fromkeys(args.package or default))
        unknown = [p for p in args.package if p not in wheel_pin.packages]
        if unknown:
            raise SeriesError(f"--package {unknown[0]} is not one of the wheels: {', '.join(wheel_pin.packages)}")


def _dist(args: argparse.Namespace, ws: Workspace) -> Path:
    return (args.dist or default_dist(ws)).resolve()


def _load(ws: Workspace) -> tuple[WheelPin, list[Patch]]:
    """The wheel pin and the series of ``patches/``, read once, from a snapshot (whose fingerprint decides the
    wheels' local version and fills their records)."""
    snapshot = ws.scratch / "series"
    patches = snapshot_series(ws.patches, snapshot)
    return load_wheel_pin(ws.pin_file, load_pin(snapshot / "base.toml")).for_series(patches), patches


def _rebuild(args: argparse.Namespace, ws: Workspace) -> str:
    """The command that builds the wheels where this run looks for them: its own --dist, --patches and --workdir."""
    return ws.command("wheels", *(("--dist", _dist(args, ws)) if args.dist else ()))


def cmd_wheels(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.wheelbuild import build_wheels

    wheel_pin, patches = _load(ws)
    built = build_wheels(ws, wheel_pin, patches, _dist(args, ws), make_log())
    print(f"built {len(built)} wheels of {wheel_pin.pin.name} {wheel_pin.local_version} (series v"
          f"{wheel_pin.series_version}, {len(patches)} patches):")  # fmt: skip
    for wheel in built:
        count = len(wheel.patches)
        print(f"  {wheel.path}  ({count} patch{'es' if count != 1 else ''} in it)")
    if not wheel_pin.is_released:
        print(f"note: the series is not the one recorded for series v{wheel_pin.series_version} ([wheels] fingerprint "
              f"of {ws.pin_file}), so its wheels are {wheel_pin.local_version}, not {wheel_pin.released}; to release "
              f'it, raise series_version there and set fingerprint = "{wheel_pin.series}"')  # fmt: skip
    return 0


def cmd_test_wheels(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.wheeltest import run_wheel_test, summary

    wheel_pin, patches = _load(ws)
    dist = _dist(args, ws)
    statuses = []
    log = make_log()
    for torch in args.torch:
        for package in args.package:
            result = run_wheel_test(
                ws, wheel_pin, patches, package, torch, dist, log, _rebuild(args, ws), installer=args.installer,
                pytest_args=tuple(args.pytest_args),
            )  # fmt: skip
            print(summary(result, wheel_pin.local_version), flush=True)
            statuses.append(result.exit_status)
    return 1 if 1 in statuses else (5 if 5 in statuses else 0)


def _package(value: str) -> str:
    """A package as pip spells it too (``pytorch-lightning``, ``Lightning_Fabric``): PEP 503's normalized name, with
    ``_`` (the wheels' and the import names' spelling)."""
    return re.sub(r"[-_.]+", "_", name_option(value)).lower()
