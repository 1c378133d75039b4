"""Command line: one argparse parser built from a table; each subcommand is a short function that imports the module
doing the work (start-up stays fast). Every refusal is one ``error:`` line and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from patchseries import __version__, wheelcli
from patchseries.errors import SeriesError
from patchseries.interrupts import ignore_interrupts, sigterm_as_interrupt, stage, write_file
from patchseries.lock import series_lock, workdir_lock
from patchseries.paths import WORKDIR_ENV, Workspace, kept_path, name_option, path_option, shell, tool_command
from patchseries.pin import Pin, load_pin
from patchseries.progress import make_log
from patchseries.runner import (
    DEFAULT_TORCH,
    check_known,
    check_python,
    parse_torch_version,
    running_python,
    torch_index,
    torch_release,
)
from patchseries.series import Patch, read_series

if TYPE_CHECKING:
    from patchseries.job import BaseChoice

PROG_ENV = "PATCHSERIES_PROG"  # how the scripts name the main job in its help and errors
FORWARD_DIR = "master"  # the forward series for upstream's default branch, beside the release series' patches
SIGPIPE_STATUS = 141  # what a shell reports for a program that stopped writing into a closed pipe (`| head`)
MAX_ERROR = 2000  # an error line's characters: room for remedies with the run's own paths, never cut in the middle
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
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def _test_prog() -> str:
    return os.environ.get(PROG_ENV) or tool_command("test")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = f"; pytest arguments go after --, e.g. {_test_prog()} -- {' '.join(unknown)}"
        parser.exit(2, f"error: unrecognized arguments: {' '.join(unknown)}{hint if args.command == 'test' else ''}\n")
    try:
        with sigterm_as_interrupt():
            ws = _workspace(args)
            with ExitStack() as held:
                _lock(args, ws, held)
                status = int(args.handler(args, ws))
            ignore_interrupts()  # the work is done and said: a signal now would only turn its exit status into 143
            stage("command-done")
            sys.stdout.flush()
            return status
    except BrokenPipeError:  # the reader went away (`patchseries status | head`): stop quietly, as a shell tool would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS
    except (SeriesError, OSError) as exc:
        line = " ".join(str(exc).split("\n"))
        if not isinstance(exc, SeriesError):
            paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
            line = f"{exc.strerror or line}{': ' if paths else ''}{paths}; check that path (permissions, free space, "
            line += "a process still using it) and re-run"
        if len(line) > MAX_ERROR:  # a longer message keeps its start and its end
            half = MAX_ERROR // 2
            line = f"{line[:half]} ... ({len(line) - 2 * half} characters left out) ... {line[-half:]}"
        print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; re-run the same command to resume from a clean state", file=sys.stderr)
        return 130


def _workspace(args: argparse.Namespace) -> Workspace:
    """Refuse bad option values and pins before anything is downloaded or created (the work directory included)."""
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
            raise SeriesError("--torch and --from-json are alternatives: --from-json renders the releases saved in "
                              "JSON; drop --torch, or run the matrix without --from-json")  # fmt: skip
        args.torch = list(dict.fromkeys(torch_release(version) for version in args.torch or ()))  # each release once
        for version in args.torch:
            check_known(version, parse_torch_version(version))
    if args.command in ("export", "forward"):
        from patchseries.export import AUTHOR_ENV, parse_identity

        if args.author:
            parse_identity(args.author)
        elif os.environ.get(AUTHOR_ENV):
            args.author = os.environ[AUTHOR_ENV]
            parse_identity(args.author, given_as=AUTHOR_ENV)
    ws = Workspace.default(patches=args.patches, workdir=args.workdir)
    if args.command != "status" and not (getattr(args, "from_json", None) and not args.refresh_compile_stats):
        pin = load_pin(ws.pin_file)
        if args.command == "forward" and not pin.commit:  # a commit pin is refused by cmd_forward
            load_pin((args.to or ws.patches / FORWARD_DIR) / "base.toml")
    wheelcli.validate(args, ws)
    return ws


def _lock(args: argparse.Namespace, ws: Workspace, held: ExitStack) -> None:
    """The work directory's lock for every command that uses it (then the scratch folder a killed run left is ours to
    remove), and the lock of the series folder ``export`` or ``forward`` rewrites, shared by every work directory."""
    if args.command != "status" and not getattr(args, "onto", None):
        given_as = WORKDIR_ENV if args.workdir is None and os.environ.get(WORKDIR_ENV) else "--workdir"
        held.enter_context(workdir_lock(ws.workdir, f"patchseries {args.command}", given_as))
    written = {"export": ws.patches, "forward": getattr(args, "to", None) or ws.patches / FORWARD_DIR}.get(args.command)
    if written is not None and written.is_dir():
        held.enter_context(series_lock(written))


def _choice(args: argparse.Namespace) -> BaseChoice:
    from patchseries.job import BaseChoice

    if args.checkout is not None and args.git:
        raise SeriesError("--checkout and --git are alternatives; pass one of them")
    return BaseChoice(checkout=args.checkout, use_git=args.git, force_base=args.force_base)


def _git_checkout(path: Path) -> Path:
    if not (path / ".git").exists():
        raise SeriesError(f"--checkout {path} is not a git checkout")
    return path.resolve()


def _tool_tree(ws: Workspace, pin: Pin, patches: list[Patch], choice: BaseChoice) -> Path:
    from patchseries.job import get_source
    from patchseries.trees import tool_tree

    source = get_source(ws, pin, choice)
    ws.workdir.mkdir(parents=True, exist_ok=True)
    return tool_tree(ws, pin, patches, source, make_log())[0].path


def _default_tree(ws: Workspace) -> Path:
    """The tree ``edit`` makes on the sdist base: what ``export`` reads unless told another."""
    from patchseries.trees import EDIT_DIR

    return ws.workdir / EDIT_DIR / f"sdist-{load_pin(ws.pin_file).version}"


def _print_table(rows: list[Any]) -> bool:
    """Print one line per patch; whether any conflicts."""
    width = max(len(row.patch) for row in rows)
    for row in rows:
        print(f"{row.patch:<{width}}  {row.status}{f' ({row.detail})' if row.detail else ''}")
    return any(row.status == "conflicts" for row in rows)


def cmd_fetch(args: argparse.Namespace, ws: Workspace) -> int:
    print(_tool_tree(ws, load_pin(ws.pin_file), read_series(ws.series_file), _choice(args)))
    return 0


def cmd_apply(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.job import prepare

    print(prepare(ws, _choice(args), make_log()).base.path)
    return 0


def cmd_edit(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.job import get_source
    from patchseries.trees import edit_tree

    pin = load_pin(ws.pin_file)
    print(edit_tree(ws, pin, read_series(ws.series_file), get_source(ws, pin, _choice(args)), make_log()))
    return 0


def cmd_test(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.job import run_main_job, summary

    log, pytest_args = make_log(), tuple(args.pytest_args)
    result = run_main_job(ws, _choice(args), args.torch, log, installer=args.installer, pytest_args=pytest_args)
    print(summary(result))
    return result.exit_status


def cmd_export(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.export import export_series, refuse_another_base

    given = args.tree or _default_tree(ws)
    tree = given.resolve()
    if not (tree / ".git").exists():
        make = f"make one to edit with `{ws.command('edit')}`"
        if args.tree is not None:
            what = "is not a git repository (it has no .git)" if given.exists() else "does not exist"
            raise SeriesError(f"--tree {given} {what}; pass the path of the tree to export (a clone with branches base "
                              f"and series), or {make} and export it without --tree")  # fmt: skip
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
    from patchseries.forward import check_onto

    pin, patches = load_pin(ws.pin_file), read_series(ws.series_file)
    if args.onto:
        if args.checkout is None:
            raise SeriesError("check --onto needs --checkout PATH, an upstream clone that has the ref")
        return int(_print_table(check_onto(_git_checkout(args.checkout), args.onto, pin.where, patches)))
    checkout = _git_checkout(args.checkout) if args.checkout is not None else None
    status = _drift(ws, checkout, ws.patches, pin, patches)
    forward_dir = ws.patches / FORWARD_DIR
    if (forward_dir / "series").is_file():  # a release series with its forward series: check both
        forward_pin, forward_patches = load_pin(forward_dir / "base.toml"), read_series(forward_dir / "series")
        print(f"{FORWARD_DIR}/ (onto {forward_pin.commit[:12]}):")
        status = max(status, _drift(ws, checkout, forward_dir, forward_pin, forward_patches))
        if checkout is not None:
            status = max(status, _forward_drift(checkout, ws, pin, patches, forward_pin, forward_dir))
    return status


def _forward_drift(checkout: Path, ws: Workspace, pin: Pin, patches: list[Patch], target: Pin, folder: Path) -> int:
    """Whether the forward series is what ``forward`` writes from the release series now (its ``From:`` aside)."""
    from patchseries.forward import forward_series
    from patchseries.series import listed_names, without_author

    fresh = ws.scratch / FORWARD_DIR
    fresh.mkdir(parents=True)
    try:
        conflicts = [r.patch for r in forward_series(checkout, pin, patches, target, fresh) if r.status == "conflicts"]
    except SeriesError as exc:
        conflicts = [str(exc)]
    names = dict.fromkeys(["series", *listed_names(folder / "series"), *listed_names(fresh / "series")])
    differ = [n for n in names if not all((d / n).is_file() for d in (folder, fresh))
              or without_author((folder / n).read_bytes()) != without_author((fresh / n).read_bytes())]  # fmt: skip
    if not conflicts and not differ:
        print(f"ok: {FORWARD_DIR}/ is what forward writes from the release series")
        return 0
    why = f"the release series does not forward ({', '.join(conflicts)})" if conflicts else ", ".join(differ)
    remedy = ws.command("forward", "--checkout", checkout)
    print(f"drift: {FORWARD_DIR}/ is not what forward writes from the release series ({why}); `{remedy}`")
    return 1


def _drift(ws: Workspace, checkout: Path | None, patches_dir: Path, pin: Pin, patches: list[Patch]) -> int:
    from patchseries.export import drift_report
    from patchseries.job import BaseChoice

    reexport = _reexport(ws, checkout, patches_dir, pin, patches)
    if checkout is not None:  # upstream's tag (or the pinned commit) has every file a patch touches
        base = pin.commit or f"refs/tags/{pin.tag}"
        report = drift_report(checkout, patches, patches_dir, base=base, reexport=reexport)
    elif patches_dir != ws.patches or not pin.has_sdist:
        print(f"not checked: {len(patches)} patches pinned to upstream commit {pin.where[:12]}; pass --checkout PATH")
        return 0
    else:
        sdist = _tool_tree(ws, pin, patches, BaseChoice())
        report = drift_report(sdist, patches, patches_dir, lacks=pin.sdist_lacks, reexport=reexport)
    for problem in report.problems:
        print(f"drift: {problem}")
    if report.problems:
        return 1
    print(f"ok: {len(patches)} patches equal a fresh export and apply without whitespace errors")
    if report.unchecked:
        files = sorted({path for paths in report.unchecked.values() for path in paths})
        print(f"not checked: {len(files)} upstream files that the sdist base lacks ({', '.join(files)}), changed by "
              f"{', '.join(name[:4] for name in report.unchecked)}; `{ws.command('check', '--checkout', 'PATH')}` "
              f"(PATH: an upstream clone at tag {pin.tag}) checks those hunks too")  # fmt: skip
    return 0


def _reexport(ws: Workspace, checkout: Path | None, patches_dir: Path, pin: Pin, patches: list[Patch]) -> str:
    """The command that writes ``patches_dir`` again, with the run's own --patches and --workdir: ``forward`` for a
    forward series; for a release series ``export`` of the first edit tree there is of --checkout's, the sdist's (not
    for a series that changes files the sdist lacks) and upstream's tag's, after the ``edit`` that makes it if none."""
    from patchseries.trees import EDIT_DIR, checkout_tree_name

    given = ("--checkout", checkout) if checkout is not None else ()
    if patches_dir != ws.patches:  # the forward series beside the release series of --patches
        return ws.command("forward", *given)
    release = ws.patches.parent
    if pin.commit and (release / "series").is_file() and (release / "base.toml").is_file():
        to = () if ws.patches == release / FORWARD_DIR else ("--to", ws.patches)
        return ws.command_on(release, "forward", *given, *to)
    edits, default = ws.workdir / EDIT_DIR, _default_tree(ws)
    lacking = any(path.startswith(pin.sdist_lacks) for patch in patches for path in patch.touched_existing)
    candidates = [
        *([(edits / checkout_tree_name(checkout), ("edit", *given))] if checkout is not None else []),
        *([(default, ("edit",))] if not lacking else []),
        (edits / f"git-{pin.commit[:12] or pin.tag}", ("edit", "--git")),
    ]
    tree, edit = next((c for c in candidates if (c[0] / ".git").exists()), candidates[0])
    export = ws.command("export", *(("--tree", tree) if tree != default else ()))
    return export if (tree / ".git").exists() else f"{ws.command(*edit)} && {export}"


def cmd_forward(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.forward import forward_series

    release_pin, release_patches = load_pin(ws.pin_file), read_series(ws.series_file)
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
    checkout = _git_checkout(args.checkout)
    check, author = ws.command("check", "--checkout", checkout), args.author
    results = forward_series(checkout, release_pin, release_patches, target, target_dir, author=author, check=check)
    if _print_table(results):
        print(f"error: conflicts; {target_dir} was left as it was", file=sys.stderr)
        return 1
    print(f"written: {target_dir} ({sum(r.status == 'forwarded' for r in results)} patches onto {target.commit[:12]})")
    return 0


def cmd_matrix(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import matrix

    if args.write_docs:
        args.write_docs = args.write_docs.resolve()  # a link's page is the one written, never the link replaced
        matrix.check_table_page(args.write_docs)  # now, not after a run of minutes
    out_dir, made_on, saved = ws.reports / "matrix", None, args.from_json
    if args.from_json:
        try:
            rows, made_on = matrix.from_json(args.from_json.read_text(), str(args.from_json))
        except UnicodeDecodeError as exc:
            raise SeriesError(f"{args.from_json} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        if args.refresh_compile_stats:
            matrix.refresh_compile_stats(ws, rows, make_log(), installer=args.installer)
    else:
        rows = matrix.run_matrix(ws, args.torch or list(matrix.DEFAULT_VERSIONS), make_log(), installer=args.installer)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not args.from_json or args.refresh_compile_stats:  # what this run measured
        saved = out_dir / "matrix.json"
        write_file(saved, matrix.to_json(rows, made_on))
    table, missing = matrix.to_markdown(rows, made_on), matrix.missing_results(rows)
    write_file(out_dir / "matrix.md", table)
    page = None if missing else args.write_docs  # a table is replaced only by a complete one
    if page:
        matrix.update_table_page(page, table)
    written = [str(path) for path in (saved, out_dir / "matrix.md", page) if path and path != args.from_json]
    print(f"{table}\nwritten: {', '.join(written)}")
    if not missing:
        return 0
    kept = f"; {args.write_docs} was left as it was (a table is replaced only by a complete one)"
    print(f"error: matrix incomplete, no result for torch {', '.join(torch for torch, _ in missing)} "
          f"({'; '.join(f'torch {torch}: {why}' for torch, why in missing)}); the results are saved in "
          f"{saved}{kept if args.write_docs else ''}", file=sys.stderr)  # fmt: skip
    return 2


def cmd_status(args: argparse.Namespace, ws: Workspace) -> int:
    for patch in read_series(ws.series_file):
        trailers = dict(patch.trailers)
        print(f"{patch.name}\n  {patch.subject}")
        for key in ("Upstream-Status", "Forwarded", "Origin", "Bug"):
            print(f"  {key + ':':<17}{trailers.get(key, 'MISSING')}")
    return 0


Option = tuple[str, str, dict[str, Any]]  # flags (space-separated), help, add_argument's other settings
PATH, NAME, FLAG = {"type": path_option}, {"type": name_option}, {"action": "store_true"}
COMMON: list[Option] = [
    ("--patches", "the series directory (default: patches/ of the project)", PATH),
    ("--workdir", f"where trees, environments and downloads go (default: ${WORKDIR_ENV}, else .work/ beside patches/)",
     PATH),
]  # fmt: skip
BASE: list[Option] = [
    ("--checkout", "use an upstream clone (read-only) as base", {**PATH, "metavar": "PATH"}),
    ("--git", "clone upstream at the pinned tag as the base", FLAG),
    ("--force-base", "accept a --checkout that is not at the pinned tag", FLAG),
]
INSTALLER: Option = ("--installer", "auto: uv if present", {"choices": ("auto", "uv", "pip"), "default": "auto"})
PYTEST: Option = ("pytest_args", "extra pytest arguments, after --", {"nargs": "*", "metavar": "-- PYTEST_ARGS"})
AUTHOR: Option = ("--author", "the From: of every written patch (default: $PATCHSERIES_AUTHOR, else each commit's own "
                  "author; an @invalid placeholder is refused)", {"metavar": "'NAME <EMAIL>'"})  # fmt: skip


def _commands() -> list[tuple[str, Any, str, list[Option], dict[str, Any]]]:
    """Each subcommand: name, handler, its line in the overview, its own options, its parser's other settings."""
    return [
        ("fetch", cmd_fetch, "get the pinned base (the tool's tree, as apply)", BASE, {}),
        ("apply", cmd_apply, "the tool's tree: base + series on branch series", BASE, {}),
        ("edit", cmd_edit, "make a tree of your own to change the series in (export reads it)", BASE, {}),
        ("test", cmd_test, "the main job: apply, install, run the series' tests", [
            *BASE, ("--torch", f"torch release to test with (default {DEFAULT_TORCH})", {"default": DEFAULT_TORCH}),
            INSTALLER, PYTEST,
        ], {"prog": _test_prog(), "description": TEST_DESCRIPTION, "epilog": "pytest arguments go after --, e.g. -- -x "
            f"-k toggle\nenvironment: {WORKDIR_ENV}  the work directory when --workdir is not given"}),
        ("export", cmd_export, "regenerate patches/ from a branch", [
            ("--tree", "the repository to export from (default: edit's sdist tree)", PATH),
            ("--branch", "the branch to export (default: series)", {**NAME, "default": "series"}),
            ("--drop-missing", "allow dropping hunks for upstream files the tree's base lacks (docs/, upstream tests/ "
             "on the sdist base)", FLAG),
            AUTHOR,
        ], {}),
        ("check", cmd_check, "drift check, or with --onto: standing against a ref", [
            ("--onto", "report each patch against REF of --checkout (e.g. master)", {**NAME, "metavar": "REF"}),
            ("--checkout", "an upstream clone: where --onto's ref is, or, without --onto, whose pinned tag is the base "
             "of a drift check that covers the hunks for docs/ and upstream tests/ too", {**PATH, "metavar": "PATH"}),
        ], {}),
        ("forward", cmd_forward, f"regenerate the forward series ({FORWARD_DIR}/) onto its pinned commit", [
            ("--checkout", "an upstream clone with the release's tag and the forward series' pinned commit",
             {**PATH, "metavar": "PATH", "required": True}),
            ("--to", f"the forward series (default: {FORWARD_DIR}/)", {**PATH, "metavar": "DIR"}),
            AUTHOR,
        ], {}),
        ("status", cmd_status, "list each patch's upstream status trailers", [], {}),
        ("matrix", cmd_matrix, "the series' tests before/after, per torch version", [
            ("--torch", "a torch release (repeatable; default: the documented list)", {"action": "append"}),
            INSTALLER,
            ("--write-docs --write-readme", "replace the table between the matrix markers of PATH "
             "(docs/compatibility.md; --write-readme: old name)", {**PATH, "metavar": "PATH", "dest": "write_docs"}),
            ("--from-json", "render a saved matrix.json instead of running", {**PATH, "metavar": "JSON"}),
            ("--refresh-compile-stats", "with --from-json: measure the compile statistics again", FLAG),
        ], {}),
    ]  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    common = _Parser(add_help=False)
    for flags, help_text, settings in COMMON:
        common.add_argument(*flags.split(), help=help_text, **settings)
    # the usage lines and "see ... --help" name the interpreter the tool runs under, as every remedy writes it
    parser = _Parser(prog=tool_command(), description=DESCRIPTION, epilog=EPILOG, formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"patchseries {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, handler, summary, options, extra in _commands():
        command = sub.add_parser(name, parents=[common], help=summary, formatter_class=raw, **extra)
        for flags, help_text, settings in options:
            command.add_argument(*flags.split(), help=help_text, **settings)
        command.set_defaults(handler=handler)
    wheelcli.add_parsers(sub, [common])  # `wheels`, `test-wheels`
    return parser
