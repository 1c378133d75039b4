"""Command line: one argparse parser; each subcommand is a short function that imports the module doing the work."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from patchseries import __version__, wheelcli
from patchseries.atomic import write_file
from patchseries.environment import DEFAULT_TORCH, parse_torch_version, torch_index, torch_release
from patchseries.errors import SeriesError
from patchseries.interrupts import ignore_interrupts, sigterm_as_interrupt, stage
from patchseries.lock import series_lock, workdir_lock
from patchseries.paths import WORKDIR_ENV, Workspace, kept_path, name_option, path_option, shell, tool_command
from patchseries.pin import load_pin
from patchseries.progress import make_log
from patchseries.series import read_series
from patchseries.wheels import check_known, check_python, running_python

if TYPE_CHECKING:
    from patchseries.pin import Pin
    from patchseries.pipeline import BaseChoice
    from patchseries.series import Patch

PROG_ENV = "PATCHSERIES_PROG"  # how the scripts name the main job in its help and errors
FORWARD_DIR = "master"  # the forward series for upstream's default branch, beside the release series' patches
AUTHOR_HELP = (
    "the From: of every written patch (default: $PATCHSERIES_AUTHOR, else each commit's own author; an @invalid "
    "placeholder is refused)"
)
SIGPIPE_STATUS = 141  # what a shell reports for a program that stopped writing into a closed pipe (`| head`)
_ERRNO_PREFIX = re.compile(r"^\[Errno \d+\] ")
# characters of an error line; a longer message keeps its start and its end. Room for a refusal's remedies, several
# commands with the run's own paths, which must run as written, never cut in the middle
_MAX_ERROR = 2000
DESCRIPTION = """\
Apply the patch series in patches/ to the pinned PyTorch Lightning release, test it, and maintain it.

The main job is the subcommand `test` (scripts/apply_and_test.sh). Contributors change a patch in a tree of their
own: `edit` makes one (base + series on branch `series`); edit its branch, then run `export`. The tool runs with the
Python of its environment (.work/tool-env), as the usage line writes it, or through scripts/.
"""
EPILOG = f"""\
work directory: --workdir, else ${WORKDIR_ENV}, else .work/ beside patches/; one run at a time in each.
The tool's trees (work directory, trees/) are built fresh per base and series; one that is not exactly as the tool
built it (an edit, a commit, another branch, a moved .git) is left as it is and the run stops, naming it.
exit status: 0 ok, 1 tests failed or drift found, 2 bad input or refused, 5 no test ran, 130 interrupted.
"""
TEST_DESCRIPTION = """\
The main job, in five stages: read the pin and the series; get the base (the PyPI sdist unless --checkout or --git);
apply the series on branch `series` of the tree; make or reuse an environment with torch and the tree installed
(minutes the first time); run the series' tests with coverage. A summary ends the output.

The tree is the tool's: built fresh for this base and series, reused while it is exactly as built. One that you
changed (uncommitted edits, commits, another branch) is never rewritten: the run stops and names it. To test a change,
edit it in a tree of your own (the subcommand `edit`), export it, and run the main job.
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one ``error:`` line (exit status 2), like every other refusal."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = ""
        if args.command == "test":
            prog = os.environ.get(PROG_ENV) or tool_command("test")
            hint = f"; pytest arguments go after --, e.g. {prog} -- {' '.join(unknown)}"
        parser.exit(2, f"error: unrecognized arguments: {' '.join(unknown)}{hint}\n")
    try:
        with sigterm_as_interrupt():
            _validate(args)
            ws = Workspace.default(patches=args.patches, workdir=args.workdir)
            _validate_pins(args, ws)
            with _lock(args, ws):
                status = int(args.handler(args, ws))
            # the work is done and said: a signal now would only turn its exit status into 143
            ignore_interrupts()
            stage("command-done")
            sys.stdout.flush()
            return status
    except SeriesError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`patchseries status | head`): stop quietly, as a shell tool would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS
    except OSError as exc:
        print(f"error: {_one_line(_os_error(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; re-run the same command to resume from a clean state", file=sys.stderr)
        return 130


def _validate(args: argparse.Namespace) -> None:
    """Refuse bad option values before anything is downloaded or created."""
    if args.command in ("test", "matrix"):
        torch_index()
    if args.command == "test":
        args.torch = torch_release(args.torch)  # `--torch 2.13` is 2.13.0, and uses 2.13.0's environment
        check_known(args.torch, parse_torch_version(args.torch))
        check_python(args.torch, parse_torch_version(args.torch), running_python())
    if args.command == "matrix":
        if args.refresh_compile_stats and not args.from_json:
            raise SeriesError("--refresh-compile-stats measures a saved matrix again; pass it with --from-json JSON")
        if args.torch and args.from_json:
            raise SeriesError(
                "--torch and --from-json are alternatives: --from-json renders the releases saved in JSON; drop "
                "--torch, or run the matrix without --from-json"
            )
        if args.torch:  # each release once, by its full number (`--torch 2.13 --torch 2.13.0` is one run)
            args.torch = list(dict.fromkeys(torch_release(version) for version in args.torch))
            for version in args.torch:
                check_known(version, parse_torch_version(version))
    if args.command in ("export", "forward"):
        from patchseries.export import AUTHOR_ENV, parse_identity

        if args.author:
            parse_identity(args.author)
        elif os.environ.get(AUTHOR_ENV):
            args.author = os.environ[AUTHOR_ENV]
            parse_identity(args.author, given_as=AUTHOR_ENV)


def _validate_pins(args: argparse.Namespace, ws: Workspace) -> None:
    """Read every pin the command uses, in full, before the work directory or its lock is made: a refused pin
    leaves nothing behind, and nothing is downloaded for it."""
    from_json_only = args.command == "matrix" and args.from_json and not args.refresh_compile_stats
    pin = load_pin(ws.pin_file) if args.command != "status" and not from_json_only else None
    if args.command == "forward" and pin is not None and not pin.commit:  # a commit pin is refused by cmd_forward
        load_pin((args.to or ws.patches / FORWARD_DIR) / "base.toml")
    wheelcli.validate(args, ws)  # the wheel commands' [wheels] pin and options


@contextmanager
def _lock(args: argparse.Namespace, ws: Workspace) -> Iterator[None]:
    """The work directory's lock, for every command that reads or writes it; and the lock of the series folder that
    ``export`` or ``forward`` rewrites, which runs from other work directories share."""
    reads_workdir = args.command != "status" and not getattr(args, "onto", None)
    written = {"export": ws.patches, "forward": getattr(args, "to", None) or ws.patches / FORWARD_DIR}.get(args.command)
    with (
        workdir_lock(ws.workdir, f"patchseries {args.command}", _workdir_given_as(args))
        if reads_workdir
        else nullcontext(),
        series_lock(written) if written is not None and written.is_dir() else nullcontext(),
    ):
        # the runs' scratch folder: a killed run's is removed, as no other run uses it while this one holds the lock
        scratch = ws.scratch if reads_workdir else None
        try:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            yield
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)


def _workdir_given_as(args: argparse.Namespace) -> str:
    """Where the run's work directory came from, as a refusal of it names it: the option, or the variable."""
    return WORKDIR_ENV if args.workdir is None and os.environ.get(WORKDIR_ENV) else "--workdir"


def _os_error(exc: OSError) -> str:
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    reason = exc.strerror or str(exc)
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        reason, paths = _copy_failures(exc.args[0])
    where = f": {paths}" if paths else ""
    return f"{reason}{where}; check that path (permissions, free space, a process still using it) and re-run"


def _copy_failures(failures: list[tuple[str, str, str]]) -> tuple[str, str]:
    """The first of a failed copy's per-file errors, and how many more (``str()`` would list them all, one line of
    thousands of files when the disk fills up)."""
    source, _, why = (str(part) for part in failures[0])
    reason = _ERRNO_PREFIX.sub("", why)
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return reason, f"{source}{more}"


def _one_line(message: str) -> str:
    """An error message as one line of readable length: a longer one keeps its start and its end."""
    line = " ".join(message.split("\n"))
    if len(line) <= _MAX_ERROR:
        return line
    half = _MAX_ERROR // 2
    return f"{line[:half]} ... ({len(line) - 2 * half} characters left out) ... {line[-half:]}"


def cmd_fetch(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline
    from patchseries.trees import tool_tree

    pin, patches = pipeline.load(ws)
    source = pipeline.get_source(ws, pin, _choice(args))
    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree, _ = tool_tree(ws, pin, patches, source, make_log())
    print(tree.path)
    return 0


def cmd_apply(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline

    prepared = pipeline.prepare(ws, _choice(args), make_log())
    print(prepared.base.path)
    return 0


def cmd_edit(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline
    from patchseries.trees import edit_tree

    pin, patches = pipeline.load(ws)
    source = pipeline.get_source(ws, pin, _choice(args))
    tree = edit_tree(ws, pin, patches, source, make_log())
    print(tree)
    return 0


def cmd_test(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline

    result = pipeline.run_main_job(
        ws, _choice(args), args.torch, make_log(), installer=args.installer, pytest_args=tuple(args.pytest_args)
    )
    print(pipeline.summary(result))
    return result.exit_status


def cmd_export(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.export import export_series, refuse_another_base

    given = args.tree or _default_tree(ws)
    tree = given.resolve()
    if not (tree / ".git").exists():
        make = f"make one to edit with `{ws.command('edit')}`"
        if args.tree is not None:  # not "or pass --tree": it was passed
            what = "is not a git repository (it has no .git)" if given.exists() else "does not exist"
            raise SeriesError(
                f"--tree {given} {what}; pass the path of the tree to export (a clone with branches base and series), "
                f"or {make} and export it without --tree"
            )
        if given.exists() or given.is_symlink():  # edit would refuse: its place is taken
            make = f"move it away ({shell('mv', given, kept_path(given))}) and {make}"
        raise SeriesError(f"there is no tree to export at {given}; {make}, or pass --tree")
    pin = load_pin(ws.pin_file)
    refuse_another_base(tree, pin, ws)
    names = export_series(
        tree, ws.patches, branch=args.branch, lacks=pin.sdist_lacks, drop_lacking=args.drop_missing,
        author=args.author, refuse_placeholder_authors=True, upstream_edit=ws.command("edit", "--git"),
        edit=ws.command("edit"),
    )  # fmt: skip
    print(f"exported {len(names)} patches from {tree} ({args.branch}) to {ws.patches}")
    unlisted = sorted(path.name for path in ws.patches.glob("*.patch") if path.name not in names)
    if unlisted:  # a contributor's files: export neither wrote nor removed them
        them = "it" if len(unlisted) == 1 else "them"
        print(f"left {', '.join(unlisted)} in {ws.patches}: series does not list {them}, and export writes and removes "
              "only the series' own patches")  # fmt: skip
    return 0


def cmd_check(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline

    pin, patches = pipeline.load(ws)
    if args.onto:
        return _check_onto(args, pin, patches)
    status = _drift(args, ws, ws.patches, pin, patches, lambda: _sdist_tree(ws, pin, patches))
    forward_dir = ws.patches / FORWARD_DIR
    if (forward_dir / "series").is_file():  # a release series with its forward series: check both
        forward_pin, forward_patches = load_pin(forward_dir / "base.toml"), read_series(forward_dir / "series")
        print(f"{FORWARD_DIR}/ (onto {forward_pin.commit[:12]}):")
        status = max(status, _drift(args, ws, forward_dir, forward_pin, forward_patches, None))
        if args.checkout is not None:
            status = max(status, _forward_drift(args.checkout.resolve(), ws, pin, patches, forward_pin, forward_dir))
    return status


def _forward_drift(checkout: Path, ws: Workspace, pin: Pin, patches: list[Patch], target: Pin, folder: Path) -> int:
    """Whether the forward series is what ``forward`` writes from the release series now (its ``From:`` aside)."""
    from patchseries.forward import forward_series
    from patchseries.series import listed_names, without_author

    fresh = ws.scratch / FORWARD_DIR
    fresh.mkdir(parents=True)
    remedy = ws.command("forward", "--checkout", checkout)
    try:
        conflicts = [r.patch for r in forward_series(checkout, pin, patches, target, fresh) if r.status == "conflicts"]
    except SeriesError as exc:
        conflicts = [str(exc)]
    names = ["series", *listed_names(folder / "series"), *listed_names(fresh / "series")]
    differ = [n for n in dict.fromkeys(names) if not all((d / n).is_file() for d in (folder, fresh))
              or without_author((folder / n).read_bytes()) != without_author((fresh / n).read_bytes())]  # fmt: skip
    if conflicts or differ:
        why = f"the release series does not forward ({', '.join(conflicts)})" if conflicts else ", ".join(differ)
        print(f"drift: {FORWARD_DIR}/ is not what forward writes from the release series ({why}); `{remedy}`")
        return 1
    print(f"ok: {FORWARD_DIR}/ is what forward writes from the release series")
    return 0


def _drift(
    args: argparse.Namespace,
    ws: Workspace,
    patches_dir: Path,
    pin: Pin,
    patches: list[Patch],
    sdist: Callable[[], Path] | None,
) -> int:
    from patchseries.export import drift_report

    reexport = _reexport(args, ws, patches_dir, pin, patches)
    if args.checkout is not None:  # upstream's tag (or the pinned commit) has every file a patch touches
        if not (args.checkout / ".git").exists():
            raise SeriesError(f"--checkout {args.checkout} is not a git checkout")
        ref = pin.commit or f"refs/tags/{pin.tag}"
        report = drift_report(args.checkout.resolve(), patches, patches_dir, base=ref, reexport=reexport)
    elif sdist is None or not pin.has_sdist:
        print(f"not checked: {len(patches)} patches pinned to upstream commit {pin.where[:12]}; pass --checkout PATH")
        return 0
    else:
        report = drift_report(sdist(), patches, patches_dir, lacks=pin.sdist_lacks, reexport=reexport)
    for problem in report.problems:
        print(f"drift: {problem}")
    if report.problems:
        return 1
    print(f"ok: {len(patches)} patches equal a fresh export and apply without whitespace errors")
    if report.unchecked:
        files = sorted({path for paths in report.unchecked.values() for path in paths})
        print(
            f"not checked: {len(files)} upstream files that the sdist base lacks ({', '.join(files)}), changed by "
            f"{', '.join(name[:4] for name in report.unchecked)}; `{ws.command('check', '--checkout', 'PATH')}` "
            f"(PATH: an upstream clone at tag {pin.tag}) checks those hunks too"
        )
    return 0


def _reexport(args: argparse.Namespace, ws: Workspace, patches_dir: Path, pin: Pin, patches: list[Patch]) -> str:
    """The command that writes ``patches_dir`` again, as the drift check's problems name it, with the run's own
    --patches and --workdir: it runs as written, through to the series written.

    A forward series (an upstream commit pinned) is made by ``forward`` from its release series; a release series by
    ``export`` of the person's edit tree: the first there is of the one of ``--checkout``, the sdist's (export's
    default; not for a series that changes files the sdist lacks, which export from it refuses to drop) and
    upstream's tag's (``edit --git``); none there, the first of them is made with ``edit`` first."""
    from patchseries.trees import EDIT_DIR, checkout_tree_name

    checkout = ("--checkout", args.checkout.resolve()) if args.checkout is not None else ()  # drift needs one
    if patches_dir != ws.patches:  # the forward series beside the release series of --patches
        return ws.command("forward", *checkout)
    release = ws.patches.parent
    if pin.commit and (release / "series").is_file() and (release / "base.toml").is_file():
        to = () if ws.patches == release / FORWARD_DIR else ("--to", ws.patches)
        return ws.command_on(release, "forward", *checkout, *to)
    edits, default = ws.workdir / EDIT_DIR, _default_tree(ws)
    lacking = any(path.startswith(pin.sdist_lacks) for patch in patches for path in patch.touched_existing)
    candidates = [
        *([(edits / checkout_tree_name(args.checkout), ("edit", *checkout))] if checkout else []),
        *([(default, ("edit",))] if not lacking else []),
        (edits / f"git-{pin.commit[:12] or pin.tag}", ("edit", "--git")),
    ]
    tree, edit = next((tree for tree in candidates if (tree[0] / ".git").exists()), candidates[0])
    export = ws.command("export", *(("--tree", tree) if tree != default else ()))
    return export if (tree / ".git").exists() else f"{ws.command(*edit)} && {export}"


def cmd_forward(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import pipeline
    from patchseries.forward import forward_series

    release_pin, release_patches = pipeline.load(ws)
    if release_pin.commit:  # `--patches patches/master`: that is the forward series itself
        raise SeriesError(
            f"{ws.patches} is a forward series (its base.toml pins upstream commit {release_pin.commit[:12]}, not a "
            f"release); forward re-makes a release series: pass --patches DIR of the release series, whose forward "
            f"series is DIR/{FORWARD_DIR}"
        )
    target_dir = args.to or ws.patches / FORWARD_DIR
    target = load_pin(target_dir / "base.toml")
    if not target.commit:
        raise SeriesError(f'{target_dir / "base.toml"} pins no upstream commit ([base] commit = "...")')
    if not (args.checkout / ".git").exists():
        raise SeriesError(f"--checkout {args.checkout} is not a git checkout")
    checkout = args.checkout.resolve()
    results = forward_series(
        checkout, release_pin, release_patches, target, target_dir, author=args.author,
        check=ws.command("check", "--checkout", checkout),
    )  # fmt: skip
    width = max(len(r.patch) for r in results)
    for result in results:
        detail = f" ({result.detail})" if result.detail else ""
        print(f"{result.patch:<{width}}  {result.status}{detail}")
    if any(r.status == "conflicts" for r in results):
        print(f"error: conflicts; {target_dir} was left as it was", file=sys.stderr)
        return 1
    print(f"written: {target_dir} ({sum(r.status == 'forwarded' for r in results)} patches onto {target.commit[:12]})")
    return 0


def cmd_matrix(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import matrix

    if args.write_docs:
        args.write_docs = args.write_docs.resolve()  # a link's page is the one written, never the link replaced
        matrix.check_table_page(args.write_docs)  # now, not after a run of minutes
    out_dir = ws.reports / "matrix"
    saved = out_dir / "matrix.json"
    if args.from_json:
        rows, made_on = matrix.from_json(_read_text(args.from_json), str(args.from_json))
        saved = args.from_json
        if args.refresh_compile_stats:
            matrix.refresh_compile_stats(ws, rows, make_log(), installer=args.installer)
            out_dir.mkdir(parents=True, exist_ok=True)
            saved = out_dir / "matrix.json"
            write_file(saved, matrix.to_json(rows, made_on))
    else:
        versions = args.torch or list(matrix.DEFAULT_VERSIONS)
        rows, made_on = matrix.run_matrix(ws, versions, make_log(), installer=args.installer), None
        out_dir.mkdir(parents=True, exist_ok=True)
        write_file(saved, matrix.to_json(rows))
    table = matrix.to_markdown(rows, made_on)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_file(out_dir / "matrix.md", table)
    missing = matrix.missing_results(rows)
    written = [*([saved] if saved != args.from_json else []), out_dir / "matrix.md"]
    if args.write_docs and not missing:
        matrix.update_table_page(args.write_docs, table)
        written.append(args.write_docs)
    print(table)
    print(f"written: {', '.join(str(path) for path in written)}")
    if missing:
        page = ""
        if args.write_docs:
            page = f"; {args.write_docs} was left as it was (a table is replaced only by a complete one)"
        print(f"error: matrix incomplete, no result for torch {', '.join(torch for torch, _ in missing)} "
              f"({'; '.join(f'torch {torch}: {why}' for torch, why in missing)}); the results are saved in "
              f"{saved}{page}", file=sys.stderr)  # fmt: skip
        return 2
    return 0


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError as exc:
        raise SeriesError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _check_onto(args: argparse.Namespace, pin: Pin, patches: list[Patch]) -> int:
    from patchseries.onto import check_onto

    if args.checkout is None:
        raise SeriesError("check --onto needs --checkout PATH, an upstream clone that has the ref")
    if not (args.checkout / ".git").exists():
        raise SeriesError(f"--checkout {args.checkout} is not a git checkout")
    standings = check_onto(args.checkout.resolve(), args.onto, pin.where, patches)
    width = max(len(s.patch) for s in standings)
    for standing in standings:
        detail = f" ({standing.detail})" if standing.detail else ""
        print(f"{standing.patch:<{width}}  {standing.status}{detail}")
    return 1 if any(s.status == "conflicts" for s in standings) else 0


def cmd_status(args: argparse.Namespace, ws: Workspace) -> int:
    for patch in read_series(ws.series_file):
        trailers = dict(patch.trailers)
        print(f"{patch.name}\n  {patch.subject}")
        for key in ("Upstream-Status", "Forwarded", "Origin", "Bug"):
            print(f"  {key + ':':<17}{trailers.get(key, 'MISSING')}")
    return 0


def _choice(args: argparse.Namespace) -> BaseChoice:
    from patchseries.pipeline import BaseChoice

    if args.checkout is not None and args.git:
        raise SeriesError("--checkout and --git are alternatives; pass one of them")
    return BaseChoice(checkout=args.checkout, use_git=args.git, force_base=args.force_base)


def _default_tree(ws: Workspace) -> Path:
    """The tree ``edit`` makes on the sdist base: what ``export`` reads unless told another."""
    from patchseries.trees import EDIT_DIR

    return ws.workdir / EDIT_DIR / f"sdist-{load_pin(ws.pin_file).version}"


def _sdist_tree(ws: Workspace, pin: Pin, patches: list[Patch]) -> Path:
    """The tool's tree on the sdist base, whose branch ``base`` a drift check compares against."""
    from patchseries.trees import resolve_source, tool_tree

    ws.workdir.mkdir(parents=True, exist_ok=True)
    tree, _ = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), make_log())
    return tree.path


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    common = _Parser(add_help=False)
    common.add_argument("--patches", type=path_option, help="the series directory (default: patches/ of the project)")
    common.add_argument(
        "--workdir", type=path_option, help=f"where trees, environments and downloads go (default: ${WORKDIR_ENV}, "
        "else .work/ beside patches/)",
    )  # fmt: skip

    base = _Parser(add_help=False)
    base.add_argument("--checkout", type=path_option, metavar="PATH", help="use an upstream clone (read-only) as base")
    base.add_argument("--git", action="store_true", help="clone upstream at the pinned tag as the base")
    base.add_argument("--force-base", action="store_true", help="accept a --checkout that is not at the pinned tag")

    # the usage lines and "see ... --help" are commands a person runs: the interpreter the tool runs under, as every
    # remedy writes it (paths.tool_command), not a `patchseries` their shell may not have
    parser = _Parser(prog=tool_command(), description=DESCRIPTION, epilog=EPILOG, formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"patchseries {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fetch = sub.add_parser("fetch", parents=[common, base], help="get the pinned base (the tool's tree, as apply)")
    fetch.set_defaults(handler=cmd_fetch)
    apply = sub.add_parser("apply", parents=[common, base], help="the tool's tree: base + series on branch series")
    apply.set_defaults(handler=cmd_apply)
    edit = sub.add_parser(
        "edit", parents=[common, base], help="make a tree of your own to change the series in (export reads it)"
    )
    edit.set_defaults(handler=cmd_edit)
    test = sub.add_parser(
        "test", parents=[common, base], help="the main job: apply, install, run the series' tests",
        prog=os.environ.get(PROG_ENV) or tool_command("test"), description=TEST_DESCRIPTION, formatter_class=raw,
        epilog=f"pytest arguments go after --, e.g. -- -x -k toggle\nenvironment: {WORKDIR_ENV}  the work directory "
        "when --workdir is not given",
    )  # fmt: skip
    test.add_argument("--torch", default=DEFAULT_TORCH, help=f"torch release to test with (default {DEFAULT_TORCH})")
    test.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto", help="auto: uv if present")
    test.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="extra pytest arguments, after --")
    test.set_defaults(handler=cmd_test)
    export = sub.add_parser("export", parents=[common], help="regenerate patches/ from a branch")
    export.add_argument("--tree", type=path_option, help="the repository to export from (default: edit's sdist tree)")
    export.add_argument("--branch", type=name_option, default="series", help="the branch to export (default: series)")
    export.add_argument(
        "--drop-missing", action="store_true", help="allow dropping hunks for upstream files the tree's base lacks "
        "(docs/, upstream tests/ on the sdist base)",
    )  # fmt: skip
    export.add_argument("--author", metavar="'NAME <EMAIL>'", help=AUTHOR_HELP)
    export.set_defaults(handler=cmd_export)
    check = sub.add_parser("check", parents=[common], help="drift check, or with --onto: standing against a ref")
    check.add_argument(
        "--onto", type=name_option, metavar="REF", help="report each patch against REF of --checkout (e.g. master)"
    )
    check.add_argument(
        "--checkout", type=path_option, metavar="PATH", help="an upstream clone: where --onto's ref is, or, without "
        "--onto, whose pinned tag is the base of a drift check that covers the hunks for docs/ and upstream tests/ too",
    )  # fmt: skip
    check.set_defaults(handler=cmd_check)
    forward = sub.add_parser(
        "forward", parents=[common], help=f"regenerate the forward series ({FORWARD_DIR}/) onto its pinned commit"
    )
    forward.add_argument(
        "--checkout", type=path_option, metavar="PATH", required=True, help="an upstream clone with the release's tag "
        "and the forward series' pinned commit",
    )  # fmt: skip
    forward.add_argument("--to", type=path_option, metavar="DIR", help=f"the forward series (default: {FORWARD_DIR}/)")
    forward.add_argument("--author", metavar="'NAME <EMAIL>'", help=AUTHOR_HELP)
    forward.set_defaults(handler=cmd_forward)
    status = sub.add_parser("status", parents=[common], help="list each patch's upstream status trailers")
    status.set_defaults(handler=cmd_status)
    matrix = sub.add_parser("matrix", parents=[common], help="the series' tests before/after, per torch version")
    matrix.add_argument("--torch", action="append", help="a torch release (repeatable; default: the documented list)")
    matrix.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto")
    matrix.add_argument(
        "--write-docs", "--write-readme", dest="write_docs", type=path_option, metavar="PATH",
        help="replace the table between the matrix markers of PATH (docs/compatibility.md; --write-readme: old name)",
    )  # fmt: skip
    matrix.add_argument(
        "--from-json", type=path_option, metavar="JSON", help="render a saved matrix.json instead of running"
    )
    matrix.add_argument(
        "--refresh-compile-stats", action="store_true", help="with --from-json: measure the compile statistics again"
    )
    matrix.set_defaults(handler=cmd_matrix)
    wheelcli.add_parsers(sub, [common])  # `wheels`, `test-wheels` (src/patchseries/wheelcli.py)
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
