"""The wheel commands of the command line: ``wheels`` (build) and ``test-wheels`` (install and test)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from patchseries.errors import SeriesError
from patchseries.paths import Workspace, name_option, path_option
from patchseries.pin import load_pin
from patchseries.progress import make_log
from patchseries.release import WheelPin, build_wheels, load_wheel_pin
from patchseries.runner import (
    DEFAULT_TORCH,
    check_python,
    known_torch,
    parse_torch_version,
    running_python,
    torch_index,
)
from patchseries.series import Patch, snapshot_series


def add_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register the wheel commands on ``sub`` (the command line's subparsers)."""
    wheels = sub.add_parser("wheels", parents=parents, help="build the release wheels into dist/")
    wheels.add_argument("--dist", type=path_option, metavar="DIR", help="where the wheels go (default: dist/)")
    wheels.set_defaults(handler=cmd_wheels)
    test = sub.add_parser(
        "test-wheels", parents=parents, help="install the wheels of dist/ with torch and run the acceptance suite",
        epilog="pytest arguments go after --, e.g. -- -x",
    )  # fmt: skip
    test.add_argument("--dist", type=path_option, metavar="DIR", help="where the wheels are (default: dist/)")
    test.add_argument("--torch", action="append", help=f"a torch release (repeatable; default {DEFAULT_TORCH})")
    # as pip spells it too (pytorch-lightning): PEP 503's name, with the wheels' `_`
    package = lambda value: canonicalize_name(name_option(value)).replace("-", "_")  # noqa: E731
    test.add_argument("--package", action="append", type=package, help="a package whose wheel to test, as pip or "
                      "import names it (repeatable; default: lightning and pytorch_lightning)")  # fmt: skip
    test.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto", help="auto: uv if present")
    test.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="extra pytest arguments, after --")
    test.set_defaults(handler=cmd_test_wheels)


def validate(args: argparse.Namespace, ws: Workspace) -> None:
    """Refuse bad values and a bad ``[wheels]`` pin before anything is made or downloaded."""
    if args.command not in ("wheels", "test-wheels"):
        return
    wheel_pin = load_wheel_pin(ws.pin_file, load_pin(ws.pin_file))
    dist = _dist(args, ws)
    if dist.exists() and not dist.is_dir():
        raise SeriesError(f"--dist {dist} is a file; pass the folder of the wheels")
    if args.command == "wheels" and (dist == ws.workdir or ws.workdir in dist.parents):
        raise SeriesError(f"--dist {dist} is inside the work directory {ws.workdir}, whose trees the tool refuses "
                          "once changed and whose other folders it rebuilds; pass a folder outside it")  # fmt: skip
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
    return (args.dist or (ws.project or ws.patches.parent) / "dist").resolve()  # dist/ beside patches/


def _load(ws: Workspace) -> tuple[WheelPin, list[Patch]]:
    """The wheel pin and the series of ``patches/``, read once into a snapshot and held for the whole run."""
    patches = snapshot_series(ws.patches, ws.scratch / "series")
    return load_wheel_pin(ws.pin_file, load_pin(ws.scratch / "series" / "base.toml")).for_series(patches), patches


def cmd_wheels(args: argparse.Namespace, ws: Workspace) -> int:
    wheel_pin, patches = _load(ws)
    built, kept = build_wheels(ws, wheel_pin, patches, _dist(args, ws), make_log())
    print(f"built {len(built)} wheels of {wheel_pin.pin.name} {wheel_pin.local_version} (series v"
          f"{wheel_pin.series_version}, {len(patches)} patches):")  # fmt: skip
    for wheel, in_it in built.items():
        print(f"  {wheel}  ({len(in_it)} patch{'es' if len(in_it) != 1 else ''} in it)")
    for wheel in kept:
        print(f"note: {wheel} was there already, built from this series, and is kept as it is; to replace it with "
              "this build, remove it and re-run")  # fmt: skip
    if not wheel_pin.is_released:
        print(f"note: the series is not the one recorded for series v{wheel_pin.series_version} ([wheels] fingerprint "
              f"of {ws.pin_file}), so its wheels are {wheel_pin.local_version}, not {wheel_pin.released}; to release "
              f'it, raise series_version there and set fingerprint = "{wheel_pin.series}"')  # fmt: skip
    return 0


def cmd_test_wheels(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.wheeltest import run_wheel_test

    wheel_pin, patches = _load(ws)
    statuses, log = [], make_log()
    rebuild = ws.command("wheels", *(("--dist", _dist(args, ws)) if args.dist else ()))  # where this run looks
    for torch in args.torch:
        for package in args.package:
            status, summary = run_wheel_test(ws, wheel_pin, patches, package, torch, _dist(args, ws), log, rebuild,
                                             args.installer, tuple(args.pytest_args))  # fmt: skip
            print(summary, flush=True)
            statuses.append(status)
    return 1 if 1 in statuses else (5 if 5 in statuses else 0)
