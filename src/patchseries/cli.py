"""Command line: one argparse parser; each subcommand is a short function that imports the module doing the work."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from patchseries.environment import DEFAULT_TORCH
from patchseries.errors import SeriesError
from patchseries.lock import workdir_lock
from patchseries.paths import Workspace
from patchseries.progress import make_log

if TYPE_CHECKING:
    from patchseries.pin import Pin
    from patchseries.pipeline import BaseChoice
    from patchseries.series import Patch


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    ws = Workspace.default(patches=args.patches, workdir=args.workdir)
    try:
        with _lock(args, ws):
            return int(args.handler(args, ws))
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; re-run the same command to resume from a clean state", file=sys.stderr)
        return 130


@contextmanager
def _lock(args: argparse.Namespace, ws: Workspace) -> Iterator[None]:
    """The work directory's lock, for every command that reads or writes it."""
    reads_workdir = args.command != "status" and not getattr(args, "onto", None)
    with workdir_lock(ws.workdir, f"patchseries {args.command}") if reads_workdir else nullcontext():
        yield


def cmd_fetch(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline

    pin, _ = pipeline.load(ws)
    tree = pipeline.get_base(ws, pin, _choice(args), make_log())
    print(tree.path)
    return 0


def cmd_apply(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline

    prepared = pipeline.prepare(ws, _choice(args), make_log(), discard=args.discard)
    print(prepared.base.path)
    return 0


def cmd_test(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline

    result = pipeline.run_main_job(
        ws, _choice(args), args.torch, make_log(), installer=args.installer, pytest_args=tuple(args.pytest_args),
        discard=args.discard,
    )  # fmt: skip
    print(pipeline.summary(result))
    return 0 if result.ok else 1


def cmd_export(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.export import export_series

    tree = args.tree or _default_tree(ws)
    names = export_series(tree, ws.patches, branch=args.branch)
    print(f"exported {len(names)} patches from {tree} ({args.branch}) to {ws.patches}")
    return 0


def cmd_check(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline
    from patchseries.base import sdist_base
    from patchseries.export import drift_problems

    log = make_log()
    pin, patches = pipeline.load(ws)
    if args.onto:
        return _check_onto(args, pin, patches)
    problems = drift_problems(sdist_base(ws, pin, log).path, patches, ws.patches)
    for problem in problems:
        print(f"drift: {problem}")
    if problems:
        return 1
    print(f"ok: {len(patches)} patches equal a fresh export and apply without whitespace errors")
    return 0


def cmd_matrix(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import matrix

    out_dir = ws.reports / "matrix"
    if args.from_json:
        rows, made_on = matrix.from_json(args.from_json.read_text())
        if args.refresh_compile_stats:
            matrix.refresh_compile_stats(ws, rows, make_log(), installer=args.installer)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "matrix.json").write_text(matrix.to_json(rows, made_on))
    else:
        versions = args.torch or list(matrix.DEFAULT_VERSIONS)
        rows, made_on = matrix.run_matrix(ws, versions, make_log(), installer=args.installer), None
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "matrix.json").write_text(matrix.to_json(rows))
    table = matrix.to_markdown(rows, made_on)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "matrix.md").write_text(table)
    if args.write_readme:
        matrix.update_readme(args.write_readme, table)
    print(table)
    print(f"written: {out_dir / 'matrix.json'}, {out_dir / 'matrix.md'}")
    incomplete = [row.torch for row in rows if row.error]
    if incomplete:
        print(f"error: matrix incomplete, no result for torch {', '.join(incomplete)}", file=sys.stderr)
        return 1
    return 0


def _check_onto(args: argparse.Namespace, pin: Pin, patches: list[Patch]) -> int:
    from patchseries.onto import check_onto

    if args.checkout is None:
        raise SeriesError("check --onto needs --checkout PATH, an upstream clone that has the ref")
    standings = check_onto(args.checkout.resolve(), args.onto, pin.tag, patches)
    width = max(len(s.patch) for s in standings)
    for standing in standings:
        detail = f" ({standing.detail})" if standing.detail else ""
        print(f"{standing.patch:<{width}}  {standing.status}{detail}")
    return 1 if any(s.status == "conflicts" for s in standings) else 0


def cmd_status(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.series import read_series

    for patch in read_series(ws.series_file):
        trailers = dict(patch.trailers)
        print(f"{patch.name}\n  {patch.subject}")
        for key in ("Upstream-Status", "Origin", "Bug"):
            print(f"  {key + ':':<17}{trailers.get(key, 'MISSING')}")
    return 0


def _choice(args: argparse.Namespace) -> BaseChoice:
    from patchseries.pipeline import BaseChoice

    if args.checkout is not None and args.git:
        raise SeriesError("--checkout and --git are alternatives; pass one of them")
    return BaseChoice(checkout=args.checkout, use_git=args.git, force_base=args.force_base)


def _default_tree(ws: Workspace) -> Path:
    from patchseries.pin import load_pin

    return ws.trees / f"sdist-{load_pin(ws.pin_file).version}"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--patches", type=Path, help="the series directory (default: patches/ of this project)")
    common.add_argument("--workdir", type=Path, help="where trees, venvs and downloads go (default: .work/)")

    base = argparse.ArgumentParser(add_help=False)
    base.add_argument("--checkout", type=Path, metavar="PATH", help="use an upstream clone (read-only) as the base")
    base.add_argument("--git", action="store_true", help="clone upstream at the pinned tag as the base")
    base.add_argument("--force-base", action="store_true", help="accept a --checkout that is not at the pinned tag")
    safety = argparse.ArgumentParser(add_help=False)
    safety.add_argument(
        "--discard", action="store_true", help="re-apply patches/ over uncommitted changes and commits not in "
        "patches/, after backing them up (git stash, refs/patchseries/backup/)",
    )  # fmt: skip

    parser = argparse.ArgumentParser(prog="patchseries", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", parents=[common, base], help="get the pinned base").set_defaults(handler=cmd_fetch)
    apply = sub.add_parser("apply", parents=[common, base, safety], help="apply the series (branch series of the tree)")
    apply.set_defaults(handler=cmd_apply)
    test = sub.add_parser(
        "test", parents=[common, base, safety], help="the main job: apply, install, run the series' tests"
    )
    test.add_argument("--torch", default=DEFAULT_TORCH, help=f"torch release to test with (default {DEFAULT_TORCH})")
    test.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto", help="auto: uv if present")
    test.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    test.set_defaults(handler=cmd_test)
    export = sub.add_parser("export", parents=[common], help="regenerate patches/ from a branch")
    export.add_argument("--tree", type=Path, help="the repository to export from (default: the sdist tree)")
    export.add_argument("--branch", default="series", help="the branch to export (default: series)")
    export.set_defaults(handler=cmd_export)
    check = sub.add_parser("check", parents=[common], help="drift check, or with --onto: standing against a ref")
    check.add_argument("--onto", metavar="REF", help="report each patch against REF of --checkout (e.g. master)")
    check.add_argument("--checkout", type=Path, metavar="PATH", help="the upstream clone for --onto")
    check.set_defaults(handler=cmd_check)
    status = sub.add_parser("status", parents=[common], help="list each patch's upstream status trailers")
    status.set_defaults(handler=cmd_status)
    matrix = sub.add_parser("matrix", parents=[common], help="the series' tests before/after, per torch version")
    matrix.add_argument("--torch", action="append", help="a torch release (repeatable; default: the documented list)")
    matrix.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto")
    matrix.add_argument("--write-readme", type=Path, metavar="README", help="replace the table between the markers")
    matrix.add_argument("--from-json", type=Path, metavar="JSON", help="render a saved matrix.json instead of running")
    matrix.add_argument(
        "--refresh-compile-stats", action="store_true", help="with --from-json: measure the compile statistics again"
    )
    matrix.set_defaults(handler=cmd_matrix)
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
