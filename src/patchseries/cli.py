"""Command line: one parser built from a table; a subcommand imports the heavier modules it needs (fast start-up)."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any, NoReturn

from packaging.utils import canonicalize_name

from patchseries import __version__, export, lock, runner
from patchseries.errors import SeriesError
from patchseries.interrupts import ignore_interrupts, sigterm_as_interrupt, stage, write_file
from patchseries.paths import WORKDIR_ENV, Workspace, kept_path, name_option, shell, tool_command
from patchseries.pin import Pin, load_pin
from patchseries.progress import make_log
from patchseries.release import build_wheels, load_wheel_pin
from patchseries.runner import DEFAULT_TORCH
from patchseries.series import Patch, listed_names, read_series, recorded_blobs, snapshot_series, without_author
from patchseries.trees import EDIT_DIR, checkout_tree_name, edit_tree, resolve_source, tool_tree

FORWARD_DIR = "master"  # the forward series for upstream's default branch, beside the release series' patches
DESCRIPTION = """\
Apply the patch series in patches/ to the pinned PyTorch Lightning release, test it, and maintain it. The main job
is `test` (scripts/apply_and_test.sh). To change a patch, `edit` makes a tree of your own: change it, then `export`.
"""
EPILOG = f"""\
work directory: --workdir, else ${WORKDIR_ENV}, else .work/ beside patches/; one run at a time in each. The tool's
trees are built fresh per base and series; one changed (an edit, a commit, another branch) stops the run, kept as is.
exit status: 0 ok, 1 tests failed or drift found, 2 bad input or refused, 5 no test ran, 130 interrupted.
"""
TEST_DESCRIPTION = """\
The main job, in five stages: read the pin and the series; get the base (the PyPI sdist unless --checkout or --git);
apply the series; make or reuse an environment with torch and the tree (minutes the first time); run the tests.
"""
Option = tuple[str, str, dict[str, Any]]  # flags (space-separated), help, add_argument's other settings
PATH = {"type": lambda value: Path(name_option(value, "path")), "metavar": "PATH"}
NAME, FLAG = {"type": name_option}, {"action": "store_true"}
COMMON: list[Option] = [
    ("--patches", "the series directory (default: patches/ of the project)", {**PATH, "metavar": "DIR"}),
    ("--workdir", f"where trees, environments and downloads go (default: ${WORKDIR_ENV}, else .work/)", PATH),
]
BASE: list[Option] = [
    ("--checkout", "use an upstream clone (read-only) as base", PATH),
    ("--git", "clone upstream at the pinned tag as the base", FLAG),
    ("--force-base", "accept a --checkout that is not at the pinned tag", FLAG),
]
INSTALLER: Option = ("--installer", "auto: uv if present", {"choices": ("auto", "uv", "pip"), "default": "auto"})
PYTEST: Option = ("pytest_args", "pytest arguments go after --, e.g. -- -x", {"nargs": "*", "metavar": "-- ARGS"})
AUTHOR: Option = ("--author", "'NAME <EMAIL>': the From: of each patch written (default: $PATCHSERIES_AUTHOR)", {})
DIST: Option = ("--dist", "the folder of the wheels (default: dist/)", {**PATH, "metavar": "DIR"})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def _test_prog() -> str:
    return os.environ.get("PATCHSERIES_PROG") or tool_command("test")  # how the scripts name the main job


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = f"; pytest arguments go after --, e.g. {_test_prog()} -- {' '.join(unknown)}"
        parser.exit(2, f"error: unrecognized arguments: {' '.join(unknown)}{hint if args.command == 'test' else ''}\n")
    try:
        os.getcwd()
    except FileNotFoundError:  # a shell's folder in a tree the tool replaced
        parser.exit(2, "error: the current directory no longer exists (a tree the tool replaced?); cd out and re-run\n")
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
        return 141  # what a shell reports for a program that wrote into a closed pipe
    except (SeriesError, OSError, RuntimeError) as exc:  # RuntimeError: Python 3.11's resolve() of a link loop
        line = " ".join(str(exc).replace("\r\n", "\n").replace("\r", "\n").split("\n"))  # a path keeps a U+2028
        if isinstance(exc, OSError):
            paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
            line = f"{exc.strerror or line}{': ' if paths else ''}{paths}; check that path (permissions, free space, "
            line += "a process still using it) and re-run"
        print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; re-run the same command to resume from a clean state", file=sys.stderr)
        return 130


def _workspace(args: argparse.Namespace) -> Workspace:
    """Refuse bad option values and pins before anything is downloaded or created (the work directory included)."""
    command = args.command
    if getattr(args, "git", False) and args.checkout is not None:
        raise SeriesError("--checkout and --git are alternatives; pass one of them")
    if command == "matrix" and args.torch and args.from_json:
        raise SeriesError("--torch and --from-json are alternatives: --from-json renders the releases saved in "
                          "JSON; drop --torch, or run the matrix without --from-json")  # fmt: skip
    if command in ("test", "matrix", "test-wheels"):
        runner.torch_index()
        given = [args.torch] if command == "test" else args.torch or ([DEFAULT_TORCH] if command != "matrix" else [])
        python = None if command == "matrix" else sys.version_info[:2]  # matrix reports a release without a wheel
        versions = list(dict.fromkeys(runner.torch_release(v, python) for v in given))  # `--torch 2.13` is 2.13.0, once
        args.torch = versions[0] if command == "test" else versions
    if getattr(args, "onto", None) and args.checkout is None:
        raise SeriesError("check --onto needs --checkout PATH, an upstream clone that has the ref")
    if command in ("check", "forward") and args.checkout is not None:
        if not (args.checkout / ".git").exists():
            raise SeriesError(f"--checkout {args.checkout} is not a git checkout")
        args.checkout = args.checkout.resolve()
    if command in ("export", "forward"):
        given_as = "--author" if args.author else export.AUTHOR_ENV
        args.author = args.author or os.environ.get(export.AUTHOR_ENV)
        if args.author:
            export.parse_identity(args.author, given_as=given_as)
    ws = Workspace.default(patches=args.patches, workdir=args.workdir)
    if command == "status" or getattr(args, "from_json", None):
        return ws
    pin = load_pin(ws.pin_file)
    if command == "forward" and pin.commit:  # `--patches patches/master`: that is the forward series itself
        raise SeriesError(f"{ws.patches} is a forward series (its base.toml pins upstream commit {pin.commit[:12]}, "
                          "not a release); forward re-makes a release series: pass --patches DIR of the release "
                          f"series, whose forward series is DIR/{FORWARD_DIR}")  # fmt: skip
    if command == "forward":  # the target's commit is checked under the lock of its folder, by cmd_forward
        load_pin((args.to or ws.patches / FORWARD_DIR) / "base.toml")
    if command in ("wheels", "test-wheels"):
        dist = args.dist = (args.dist or (ws.project or ws.patches.parent) / "dist").resolve()  # beside patches/
        if dist.exists() and not dist.is_dir():
            raise SeriesError(f"--dist {dist} is a file; pass the folder of the wheels")
        if dist == ws.workdir or ws.workdir in dist.parents:
            raise SeriesError(f"--dist {dist} is inside the work directory {ws.workdir}, which the tool rebuilds; "
                              "pass a folder outside it")  # fmt: skip
        wheel_pin = load_wheel_pin(ws.pin_file, pin)
        default = [wheel_pin.pin.name, *(s.name for s in wheel_pin.standalones if s.subpackage == "pytorch")]
        args.package = list(dict.fromkeys(getattr(args, "package", None) or default))
        if unknown := [p for p in args.package if p not in wheel_pin.packages]:
            raise SeriesError(f"--package {unknown[0]} is not one of the wheels: {', '.join(wheel_pin.packages)}")
    return ws


def _lock(args: argparse.Namespace, ws: Workspace, held: ExitStack) -> None:
    # the work directory's lock, and the lock of the series folder `export` or `forward` rewrites (for every workdir)
    if args.command != "status":
        given_as = WORKDIR_ENV if args.workdir is None and os.environ.get(WORKDIR_ENV) else "--workdir"
        held.enter_context(lock.workdir_lock(ws.workdir, f"patchseries {args.command}", given_as))
    written = {"export": ws.patches, "forward": getattr(args, "to", None) or ws.patches / FORWARD_DIR}.get(args.command)
    if written is not None and written.is_dir():
        held.enter_context(lock.series_lock(written))


def _default_tree(ws: Workspace) -> Path:  # the tree `edit` (`edit --git`, for a pinned commit) makes: export's default
    pin = load_pin(ws.pin_file)
    return ws.workdir / EDIT_DIR / (f"git-{pin.commit[:12]}" if pin.commit else f"sdist-{pin.version}")


def _print_table(rows: list[Any]) -> bool:  # one line per patch; whether any conflicts
    width = max(len(row.patch) for row in rows)
    for row in rows:
        print(f"{row.patch:<{width}}  {row.status}{f' ({row.detail})' if row.detail else ''}")
    return any(row.status == "conflicts" for row in rows)


def _package(value: str) -> str:  # as pip spells it too (pytorch-lightning): PEP 503's name, with the wheels' `_`
    return canonicalize_name(name_option(value)).replace("-", "_")


def cmd_base(args: argparse.Namespace, ws: Workspace) -> int:  # fetch, apply, edit (print the tree) and test
    from patchseries.job import BaseChoice, get_source, prepare, run_main_job, summary

    choice, log = BaseChoice(checkout=args.checkout, use_git=args.git, force_base=args.force_base), make_log()
    if args.command == "test":
        result = run_main_job(ws, choice, args.torch, log, args.installer, tuple(args.pytest_args))
        print(summary(result))
        return result.exit_status
    pin, patches = load_pin(ws.pin_file), snapshot_series(ws.patches, ws.scratch / "series")
    if args.command == "apply":
        print(prepare(ws, choice, log).base.path)
    elif args.command == "edit":
        print(edit_tree(ws, pin, patches, get_source(ws, pin, choice), log))
    else:  # fetch
        print(tool_tree(ws, pin, patches, get_source(ws, pin, choice), log)[0].path)
    return 0


def cmd_export(args: argparse.Namespace, ws: Workspace) -> int:
    given, pin = args.tree or _default_tree(ws), load_pin(ws.pin_file)
    tree, edit = given.resolve(), ws.command("edit", *(["--git"] if pin.commit else []))  # no sdist has its base
    if not (tree / ".git").exists() and args.tree is not None:
        what = "is not a git repository (it has no .git)" if given.exists() else "does not exist"
        raise SeriesError(f"--tree {given} {what}; pass the tree to export (a clone with branches base and series)")
    if not (tree / ".git").exists():  # a place taken (a dangling link) is moved away first: edit would refuse it
        mv = f"move it away ({shell('mv', given, kept_path(given))}) and " if os.path.lexists(given) else ""
        raise SeriesError(f"there is no tree to export at {given}; {mv}make one to edit with `{edit}`, or pass --tree")
    export.refuse_another_base(tree, pin, ws, edit, args.branch)
    names = export.export_series(
        tree, ws.patches, branch=args.branch, lacks=pin.sdist_lacks, drop_lacking=args.drop_missing,
        author=args.author, refuse_placeholder_authors=True, edit=edit, log=print,
    )  # fmt: skip
    print(f"exported {len(names)} patches from {tree} ({args.branch}) to {ws.patches}")
    if unlisted := sorted(path.name for path in ws.patches.glob("*.patch") if path.name not in names):
        print(f"left {', '.join(unlisted)} in {ws.patches}: series does not list {'them' if unlisted[1:] else 'it'}, "
              "and export writes and removes only the series' own patches")  # fmt: skip
    return 0


def cmd_check(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.forward import check_onto

    pin, patches, checkout = load_pin(ws.pin_file), snapshot_series(ws.patches, ws.scratch / "series"), args.checkout
    if args.onto:
        return int(_print_table(check_onto(checkout, args.onto, patches, ws.scratch)))
    status = _drift(ws, checkout, ws.patches, pin, patches)
    if os.path.lexists(forward_dir := ws.patches / FORWARD_DIR):  # a release series with its forward series: check both
        forward_pin = load_pin(forward_dir / "base.toml")
        listed = (forward_dir / "series").is_file()  # none yet (or gone): forward writes it, as check then says
        forward_patches = snapshot_series(forward_dir, ws.scratch / "series-master") if listed else []
        print(f"{FORWARD_DIR}/ (onto {forward_pin.commit[:12]}):")
        drift = _drift(ws, checkout, forward_dir, forward_pin, forward_patches) if listed or not checkout else 0
        if checkout is not None and not drift:
            drift = _forward_drift(checkout, ws, pin, patches, forward_pin, forward_dir)
        status = max(status, drift)
    return status


def _forward_drift(checkout: Path, ws: Workspace, pin: Pin, patches: list[Patch], target: Pin, folder: Path) -> int:
    """Whether the forward series is what ``forward`` writes from the release series now (its ``From:`` aside)."""
    from patchseries.forward import forward_series

    (fresh := ws.scratch / FORWARD_DIR).mkdir(parents=True)
    results = forward_series(checkout, pin, patches, target, fresh, ws.scratch)
    conflicts = [r.patch for r in results if r.status == "conflicts"]
    names = dict.fromkeys(["series", *listed_names(folder / "series"), *listed_names(fresh / "series")])
    differ = [n for n in names if not all((d / n).is_file() for d in (folder, fresh))
              or without_author((folder / n).read_bytes()) != without_author((fresh / n).read_bytes())]  # fmt: skip
    if not conflicts and not differ:
        print(f"ok: {FORWARD_DIR}/ is what forward writes from the release series")
        return 0
    if conflicts:  # forward cannot write it: the patch must be carried onto that commit by hand
        print(f"drift: {FORWARD_DIR}/: the release series conflicts at its pinned commit ({', '.join(conflicts)}); "
              f"forward cannot write it until that patch applies there")  # fmt: skip
        return 1
    held = {*export.last_held(None, folder, str(checkout.resolve())), *recorded_blobs(fresh)}  # as forward's holds
    copies = [shell("cp", folder / n, kept_path(folder / n)) for n in export.unkept(folder, [*names], held)]
    remedy = " && ".join([*copies, ws.command("forward", "--checkout", checkout)])
    print(f"drift: {FORWARD_DIR}/ is not what forward writes from the release series ({', '.join(differ)}); `{remedy}`")
    return 1


def _drift(ws: Workspace, checkout: Path | None, patches_dir: Path, pin: Pin, patches: list[Patch]) -> int:
    fix, held = _reexport(ws, checkout, patches_dir, pin, patches)
    if checkout is not None:  # upstream's tag (or the pinned commit) has every file a patch touches
        base = pin.commit or f"refs/tags/{pin.tag}"
        report = export.drift_report(checkout, patches, patches_dir, ws.scratch, base=base, reexport=fix, held=held)
    elif patches_dir != ws.patches or not pin.sdist_url:
        print(f"not checked: {len(patches)} patches pinned to upstream commit {pin.where[:12]}; pass --checkout PATH")
        return 0
    else:
        sdist = tool_tree(ws, pin, patches, resolve_source(ws, pin, None, False, False), make_log())[0].path
        report = export.drift_report(sdist, patches, patches_dir, ws.scratch, pin.sdist_lacks, reexport=fix, held=held)
    if report.problems:
        print("\n".join(f"drift: {problem}" for problem in report.problems))
        return 1
    print(f"ok: {len(patches)} patches equal a fresh export and apply without whitespace errors")
    if report.unchecked:
        files = sorted({path for paths in report.unchecked.values() for path in paths})
        print(f"not checked: {len(files)} upstream files that the sdist base lacks ({', '.join(files)}), changed by "
              f"{', '.join(name[:4] for name in report.unchecked)}; `{ws.command('check', '--checkout', 'PATH')}` "
              f"(PATH: an upstream clone at tag {pin.tag}) checks those hunks too")  # fmt: skip
    return 0


def _reexport(
    ws: Workspace, checkout: Path | None, patches_dir: Path, pin: Pin, patches: list[Patch]
) -> tuple[str, set[tuple[str, str]] | None]:  # fmt: skip
    """The remedy (``forward``, else ``export`` of the first edit tree, after ``edit``) and what its export holds."""
    given = ("--checkout", checkout) if checkout is not None else ()
    holds = export.last_held(None, patches_dir, str(checkout.resolve())) if checkout else set()  # forward's, from it
    if patches_dir != ws.patches:  # the forward series beside the release series of --patches
        return ws.command("forward", *given), holds
    release = ws.patches.parent
    if pin.commit and (release / "series").is_file() and (release / "base.toml").is_file():
        to = () if ws.patches == release / FORWARD_DIR else ("--to", ws.patches)
        return ws.command_on(release, "forward", *given, *to), holds
    takes = False
    with suppress(SeriesError):  # `edit --checkout` only where edit takes that checkout
        takes = checkout is not None and bool(resolve_source(ws, pin, checkout, False, False))
    edits, default = ws.workdir / EDIT_DIR, _default_tree(ws)
    lacking = any(path.startswith(pin.sdist_lacks) for patch in patches for path in patch.touched_existing)
    candidates = [
        *([(edits / checkout_tree_name(checkout, pin), ("edit", *given))] if checkout and takes else []),
        *([(default, ("edit",))] if not lacking else []),
        (edits / f"git-{pin.commit[:12] or pin.tag}", ("edit", "--git")),
    ]
    tree, edit = next((c for c in candidates if (c[0] / ".git").exists()), candidates[0])
    command = ws.command("export", *(("--tree", tree) if tree != default else ()))
    if not (tree / ".git").exists():
        return f"{ws.command(*edit)} && {command}", None
    return command, export.last_held(tree, ws.patches)


def cmd_forward(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries.forward import forward_series

    patches, target_dir = snapshot_series(ws.patches, ws.scratch / "series"), args.to or ws.patches / FORWARD_DIR
    pin = load_pin(ws.scratch / "series" / "base.toml")  # read with the series, under its lock (an export may switch)
    target, check = load_pin(target_dir / "base.toml"), ws.command("check", "--checkout", args.checkout)
    if not target.commit:
        raise SeriesError(f'{target_dir / "base.toml"} pins no upstream commit ([base] commit = "...")')
    results = forward_series(args.checkout, pin, patches, target, target_dir, ws.scratch, args.author, check, print)
    if _print_table(results):
        print(f"error: conflicts; {target_dir} was left as it was", file=sys.stderr)
        return 1
    print(f"written: {target_dir} ({sum(r.status == 'forwarded' for r in results)} patches onto {target.commit[:12]})")
    return 0


def cmd_matrix(args: argparse.Namespace, ws: Workspace) -> int:
    from patchseries import matrix

    if page := args.write_docs and args.write_docs.resolve():  # a link's page is the one written, not the link replaced
        matrix.check_table_page(page)  # now, not after a run of minutes
    out_dir, log, saved, made_on = ws.reports / "matrix", make_log(), args.from_json, None
    if args.from_json:
        rows, made_on = matrix.from_json(args.from_json.read_text(errors="replace"), str(args.from_json))
    else:
        rows = matrix.run_matrix(ws, args.torch or list(matrix.DEFAULT_VERSIONS), log, installer=args.installer)
    out_dir.mkdir(parents=True, exist_ok=True)
    if saved is None:  # what this run measured
        write_file(saved := out_dir / "matrix.json", matrix.to_json(rows, made_on))
    table, missing = matrix.to_markdown(rows, made_on), matrix.missing_results(rows)
    write_file(out_dir / "matrix.md", table)
    if page and not missing:  # a table is replaced only by a complete one
        matrix.update_table_page(page, table)
    written = [saved, out_dir / "matrix.md", *([page] if page and not missing else [])]
    print(f"{table}\nwritten: {', '.join(str(path) for path in written if path != args.from_json)}")
    if not missing:
        return 0
    kept = f"; {args.write_docs} was left as it was (a table is replaced only by a complete one)" if page else ""
    print(f"error: matrix incomplete, no result for torch {', '.join(torch for torch, _ in missing)} "
          f"({'; '.join(f'torch {torch}: {why}' for torch, why in missing)}); the results are saved in {saved}{kept}",
          file=sys.stderr)  # fmt: skip
    return 2


def cmd_status(args: argparse.Namespace, ws: Workspace) -> int:
    for patch in read_series(ws.series_file):
        print(f"{patch.name}\n  {patch.subject}")
        for key in ("Upstream-Status", "Forwarded", "Origin", "Bug"):
            print(f"  {key + ':':<17}{patch.trailer(key) or 'MISSING'}")
    return 0


def cmd_wheels(args: argparse.Namespace, ws: Workspace) -> int:
    """wheels (build into --dist) and test-wheels (install, test): the series read once and held for the run."""
    from patchseries.wheeltest import run_wheel_test

    patches, pin_file = snapshot_series(ws.patches, ws.scratch / "series"), ws.scratch / "series" / "base.toml"
    wheel_pin, log = load_wheel_pin(pin_file, load_pin(pin_file)).for_series(patches), make_log()
    if args.command == "test-wheels":
        rebuild, statuses = ws.command("wheels", "--dist", args.dist), []  # into where this run looks
        for torch, package in [(torch, package) for torch in args.torch for package in args.package]:
            status, summary = run_wheel_test(ws, wheel_pin, patches, package, torch, args.dist, log, rebuild,
                                             args.installer, tuple(args.pytest_args))  # fmt: skip
            print(summary, flush=True)
            statuses.append(status)
        return 1 if 1 in statuses else (5 if 5 in statuses else 0)
    built, kept = build_wheels(ws, wheel_pin, patches, args.dist, log)
    built = {wheel: in_it for wheel, in_it in built.items() if wheel not in kept}
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


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    # the usage lines and "see ... --help" name the interpreter the tool runs under, as every remedy writes it
    parser = _Parser(prog=tool_command(), description=DESCRIPTION, epilog=EPILOG, formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"patchseries {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands: list[tuple[str, Any, str, list[Option], dict[str, Any]]] = [  # handler, overview line, options, settings
        ("fetch", cmd_base, "get the pinned base (the tool's tree, as apply)", BASE, {}),
        ("apply", cmd_base, "the tool's tree: base + series on branch series", BASE, {}),
        ("edit", cmd_base, "make a tree of your own to change the series in (export reads it)", BASE, {}),
        ("test", cmd_base, "the main job: apply, install, run the series' tests", [
            *BASE, ("--torch", f"torch release to test with (default {DEFAULT_TORCH})", {"default": DEFAULT_TORCH}),
            INSTALLER, PYTEST,
        ], {"prog": _test_prog(), "description": TEST_DESCRIPTION}),
        ("export", cmd_export, "regenerate patches/ from a branch", [
            ("--tree", "the repository to export from (default: edit's sdist tree)", PATH),
            ("--branch", "the branch to export (default: series)", {**NAME, "default": "series"}),
            ("--drop-missing", "allow dropping hunks for upstream files the tree's base lacks", FLAG), AUTHOR,
        ], {}),
        ("check", cmd_check, "drift check, or with --onto: standing against a ref", [
            ("--onto", "report each patch against REF of --checkout (e.g. master)", {**NAME, "metavar": "REF"}),
            ("--checkout", "an upstream clone: where REF is; without --onto, the base of a full drift check", PATH),
        ], {}),
        ("forward", cmd_forward, f"regenerate the forward series ({FORWARD_DIR}/) onto its pinned commit", [
            ("--checkout", "an upstream clone with the release tag and pinned commit", {**PATH, "required": True}),
            ("--to", f"the forward series (default: {FORWARD_DIR}/)", {**PATH, "metavar": "DIR"}), AUTHOR,
        ], {}),
        ("status", cmd_status, "list each patch's upstream status trailers", [], {}),
        ("matrix", cmd_matrix, "the series' tests before/after, per torch version", [
            ("--torch", "a torch release (repeatable; default: the list in docs)", {"action": "append"}), INSTALLER,
            ("--write-docs --write-readme", "replace the matrix table of page PATH", {**PATH, "dest": "write_docs"}),
            ("--from-json", "render a saved matrix.json instead of running", {**PATH, "metavar": "JSON"}),
        ], {}),
        ("wheels", cmd_wheels, "build the release wheels into dist/", [DIST], {}),
        ("test-wheels", cmd_wheels, "install the wheels of dist/ with torch and run the acceptance suite", [
            DIST, ("--torch", f"a torch release (repeatable; default {DEFAULT_TORCH})", {"action": "append"}),
            ("--package", "a wheel to test (repeatable; pip or import name)", {"action": "append", "type": _package}),
            INSTALLER, PYTEST,
        ], {}),
    ]  # fmt: skip
    for name, handler, summary, options, settings in commands:
        command = sub.add_parser(name, help=summary, formatter_class=raw, **settings)
        for flags, help_text, option_settings in [*COMMON, *options]:
            command.add_argument(*flags.split(), help=help_text, **option_settings)
        command.set_defaults(handler=handler)
    return parser
