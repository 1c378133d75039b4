"""The tool's trees: built fresh for one base and one series, reused or replaced only while exactly as built.

A tree under ``<workdir>/trees/`` is the tool's while it is exactly what the tool built, which the tool can show: the
record it wrote into the tree's ``.git`` last, in one rename (:class:`Record`: the base's source and commit, the series'
fingerprint and the head it made), still matches the tree: a real ``.git`` directory, exactly the refs ``base`` and
``series`` at the recorded commits, ``HEAD`` on ``series``, no commit only in a reflog, no uncommitted file, no
operation in progress, no linked worktree but the tool's own. Such a tree is reused for the same base and series and
otherwise replaced by a fresh one (:func:`replace_tree`). Anything else (a person's edit or commit, another branch, a
stash, a moved or unreadable ``.git``, a folder without a record) is left exactly as it is, and the run stops with one
line that names it (:func:`changes_since_built`). Nothing is ever force-checked-out, renamed, reset or deleted in a tree
the tool cannot show it made unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from patchseries import gitcmd, scratch
from patchseries.atomic import write_file
from patchseries.errors import SeriesError
from patchseries.gitcmd import git, git_path, hidden_files, uncommitted_files
from patchseries.interrupts import stage
from patchseries.paths import kept_path, partial_path, shell

RECORD = "patchseries-tree"  # in the tree's .git directory
BASE_RECORD = "patchseries-base"  # in the .git directory of every tree the tool makes (BaseRecord)
FILES = "patchseries-files"  # in each worktree's git directory: the untracked files the tool's runs made (digests)
_OLD_RECORD = "patchseries-applied"  # what versions before the disposable trees wrote: "<fingerprint> <base> <head>"
BASE_BRANCH = "base"
BASE_REF = f"refs/heads/{BASE_BRANCH}"  # never a tag or remote ref of the same name
SERIES_REF = "refs/heads/series"
# what `git status` cannot show but a person may be in the middle of: what it is, how to finish it, how to abort it
_IN_PROGRESS = {
    "rebase-merge": ("a git rebase", "git rebase --continue", "git rebase --abort"),
    "rebase-apply": ("a git am or git rebase", "git am/rebase --continue", "git am/rebase --abort"),
    "MERGE_HEAD": ("a git merge", "git commit", "git merge --abort"),
    "CHERRY_PICK_HEAD": ("a git cherry-pick", "git cherry-pick --continue", "git cherry-pick --abort"),
    "REVERT_HEAD": ("a git revert", "git revert --continue", "git revert --abort"),
    "BISECT_LOG": ("a git bisect", "git bisect reset", "git bisect reset"),
}
# linked worktrees the tool makes beside a tree (its base checked out, for upstream's gates and the matrix)
TOOL_WORKTREE_SUFFIXES = ("base", "before-series")


@dataclass(frozen=True)
class Record:
    """What the tool built in a tree."""

    source: str  # where the base came from: "sdist <sha256>", "checkout <path> <commit>", "git <url> <ref>"
    fingerprint: str  # of the series' patch files (patchseries.series.fingerprint)
    base: str  # commit of branch base
    head: str  # commit of branch series, as applied

    def write(self, tree: Path) -> None:
        write_file(tree / ".git" / RECORD, json.dumps(asdict(self), sort_keys=True) + "\n")


@dataclass(frozen=True)
class BaseRecord:
    """What the tool made a tree for (a person's, by ``edit``, or its own): the pin's base
    (:attr:`patchseries.pin.Pin.identity`) and the series folder, so that ``export`` writes the tree only into a
    series of that base."""

    base: str
    patches: str

    def write(self, tree: Path) -> None:
        write_file(tree / ".git" / BASE_RECORD, json.dumps(asdict(self), sort_keys=True) + "\n")

    @staticmethod
    def read(repo: Path) -> BaseRecord | None:
        try:
            common = Path(git("rev-parse", "--git-common-dir", cwd=repo).stdout.strip())
            fields = json.loads(
                ((common if common.is_absolute() else repo / common) / BASE_RECORD).read_bytes().decode()
            )
            return BaseRecord(str(fields["base"]), str(fields["patches"]))
        except (OSError, ValueError, KeyError, TypeError, SeriesError):
            return None


def read_record(tree: Path) -> Record | None:
    """The record of ``tree``, or None when it has none that this version can read.

    A tree made by an earlier version has the old record, without the source: unchanged, it is replaced once.
    """
    path = tree / ".git" / RECORD
    try:
        fields = json.loads(path.read_bytes().decode())
        return Record(**{key: str(fields[key]) for key in ("source", "fingerprint", "base", "head")})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        old = (tree / ".git" / _OLD_RECORD).read_bytes().decode().split()
    except (OSError, ValueError):
        return None
    return Record("", old[0], old[1], old[2]) if len(old) == 3 else None


def changes_since_built(tree: Path) -> str | None:
    """None when ``tree`` is exactly what the tool built (see the module's docstring); else what differs, in words."""
    if tree.is_symlink() or not tree.is_dir():
        return "it is not a folder the tool made"
    dot_git = tree / ".git"
    if dot_git.is_symlink() or not dot_git.is_dir():
        return "its .git is missing or is not a directory"
    record = read_record(tree)
    if record is None:
        return f"it has no readable record of what the tool built (.git/{RECORD})"
    try:
        refuse_operation_in_progress(tree)
    except SeriesError as exc:
        return str(exc).split(";")[0]
    refs = git("for-each-ref", "--format=%(refname) %(objectname)", cwd=tree, check=False)
    if refs.returncode != 0:
        return "git cannot read it"
    found = dict(line.split(" ", 1) for line in refs.stdout.splitlines() if " " in line)
    expected = {BASE_REF: record.base, SERIES_REF: record.head}
    if found != expected:
        differing = sorted(ref for ref in found.keys() | expected.keys() if found.get(ref) != expected.get(ref))
        return f"its refs changed ({', '.join(differing)})"
    head = git("symbolic-ref", "--quiet", "HEAD", cwd=tree, check=False).stdout.strip()
    if head != SERIES_REF:
        return f"HEAD is {head or 'detached'}, not {SERIES_REF}"
    try:  # the person's global gitignore is not the tool's: a file of theirs it hides would go with the tree
        edited = uncommitted_files(tree, own_ignores_only=True)
    except SeriesError:
        return "git cannot read its work tree"
    if edited:
        shown = ", ".join(edited[:3]) + (", ..." if len(edited) > 3 else "")
        return f"{len(edited)} uncommitted file{'s' if len(edited) > 1 else ''} ({shown})"
    hidden = hidden_files(tree)  # the tool marks none; an edit to one is invisible to `git status`
    if hidden:
        shown = ", ".join(hidden[:3]) + (", ..." if len(hidden) > 3 else "")
        return f"{len(hidden)} file{'s' if len(hidden) > 1 else ''} marked assume-unchanged or skip-worktree ({shown})"
    linked = linked_worktrees(tree)
    others = [path for path in linked if path not in tool_worktrees(tree)]
    if others:
        return f"a linked worktree, {others[0]}"
    for worktree in [tree, *linked]:
        unrecorded = unrecorded_files(worktree)
        if unrecorded:
            shown = ", ".join(unrecorded[:3]) + (", ..." if len(unrecorded) > 3 else "")
            where = "" if worktree == tree else f" in its worktree {worktree}"
            return f"{len(unrecorded)} file{'s' if len(unrecorded) > 1 else ''}{where} the tool did not make ({shown})"
    edited_worktrees = [path for path in linked if uncommitted_files(path)]
    if edited_worktrees:
        return f"its worktree {edited_worktrees[0]} has uncommitted files"
    moved = [path for path in linked if worktree_moved(tree, path)]
    if moved:
        return f"its worktree {moved[0]} is not detached at branch base (a commit or checkout of yours?)"
    # a commit of a person's that a reset or a checkout left behind is theirs still, in the reflogs of every worktree
    reflogged = git("rev-list", "--reflog", "--not", BASE_REF, SERIES_REF, cwd=tree, check=False).stdout.split()
    if reflogged:
        return f"{len(reflogged)} commit(s) only in its reflog ({reflogged[0][:12]}: yours, reset or checked out away?)"
    return None


def worktree_moved(tree: Path, worktree: Path) -> bool:
    """Whether a worktree the tool made beside ``tree`` (detached at branch ``base``) has moved: a commit made there,
    or a checkout, which removing the worktree would lose."""
    head = git("rev-parse", "--verify", "--quiet", "HEAD", cwd=worktree, check=False).stdout.strip()
    base = git("rev-parse", "--verify", "--quiet", BASE_REF, cwd=tree, check=False).stdout.strip()
    on_branch = git("symbolic-ref", "--quiet", "HEAD", cwd=worktree, check=False).returncode == 0
    return on_branch or not head or head != base


def unrecorded_files(worktree: Path) -> list[str]:
    """The untracked files of ``worktree``, ignored ones included, that the tool's runs did not make: not in the list
    :func:`record_files` wrote, or changed since. A build artifact's name (``build/``, ``.coverage*``) says nothing of
    who made the file (a person's ``build/`` must not go with the tree); the list does."""
    recorded_at = git_path(worktree, FILES)
    try:
        recorded = json.loads(recorded_at.read_bytes().decode()) if recorded_at.is_file() else {}
    except ValueError:
        recorded = {}
    return [name for name, digest in _untracked_files(worktree).items() if recorded.get(name) != digest]


def record_files(tree: Path) -> None:
    """Record the untracked files of ``tree`` and its worktrees (the acceptance suite's copies, the harness, what
    installing and testing made) as the tool's: called when a run that found the tree as built is done writing it."""
    for worktree in gitcmd.worktrees(tree):
        write_file(git_path(worktree, FILES), json.dumps(_untracked_files(worktree), sort_keys=True) + "\n")


@contextmanager
def recording(tree: Path) -> Iterator[None]:
    """Around the stages that write into the tool's ``tree``: what they made is recorded however they end."""
    try:
        yield
    finally:
        record_files(tree)


def _untracked_files(worktree: Path) -> dict[str, str]:
    """Every untracked file (ignored ones included) with a digest of its content; a folder git lists as one entry
    (a nested repository) or a link by what it is."""
    names = git("ls-files", "--others", "-z", cwd=worktree).stdout.split("\0")
    return {name: _digest(worktree / name) for name in names if name}


def _digest(path: Path) -> str:
    if path.is_symlink():
        return f"link {os.readlink(path)}"
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def refuse_unless_built(tree: Path, why: str, export: Callable[[Path], str] | None = None) -> None:
    """Stop, naming ``tree`` and ``why`` it is not the tool's to reuse or replace, and where to move it
    (:func:`patchseries.paths.kept_path`, a free name); ``export``: what to do with the commits of the tree moved
    there (its commands with the run's own options), when it may hold commits."""
    kept = kept_path(tree)  # once: the export must read the folder the move makes
    then = f", and {export(kept)}" if export is not None else ""
    raise SeriesError(
        f"{tree} is not as the tool built it ({why}); it may hold your work, so it is left as it is: move it away "
        f"({shell('mv', tree, kept)}){then}, and re-run; nothing was changed"
    )


def linked_worktrees(tree: Path) -> list[Path]:
    """The linked worktrees of ``tree``'s repository (not ``tree`` itself)."""
    return [path for path in gitcmd.worktrees(tree) if path != tree.resolve()]


def tool_worktrees(tree: Path) -> list[Path]:
    """Where the tool checks out a tree's base beside it (see :func:`patchseries.base.base_worktree`)."""
    return [tree.with_name(f"{tree.name}-{suffix}").resolve() for suffix in TOOL_WORKTREE_SUFFIXES]


def replace_tree(tree: Path, built: Path) -> None:
    """Put the freshly built ``built`` at ``tree``, whose old content (if any) was shown to be the tool's unchanged.

    The tool's worktrees of the old tree go first, each only while clean. An interrupt between the renames puts the old
    tree back; a SIGKILL there leaves it under ``<tree>.old`` (claimed as that very folder) and no tree: the next run
    removes it and builds afresh.
    """
    if tree.exists() or tree.is_symlink():
        for worktree in tool_worktrees(tree):
            remove_tool_worktree(tree, worktree)
    old = tree.with_name(tree.name + ".old")
    moved = False
    try:
        if tree.exists() or tree.is_symlink():
            scratch.claim(old, moving_here=tree)
            tree.rename(old)
            moved = True
        stage("replace-between-renames")
        scratch.move_out(built, tree)
    except BaseException:  # an interrupt (or a failure) between the renames: the old tree goes back in place
        if moved and old.exists() and not (tree.exists() or tree.is_symlink()):
            old.rename(tree)
        scratch.release(old)
        raise
    if moved:  # only what this run moved there: a person's folder at <tree>.old, with no tree before, is theirs
        scratch.remove(old)


def remove_tool_worktree(tree: Path, worktree: Path) -> None:
    """Remove one of the tool's worktrees of ``tree``: refused if it has uncommitted files (a person's edits)."""
    git("worktree", "prune", cwd=tree, check=False)  # forgets worktrees whose folder is gone
    if not (worktree.exists() or worktree.is_symlink()):
        return
    if worktree.is_symlink() or worktree.resolve() not in linked_worktrees(tree):
        refuse_unless_built(worktree, f"it is not a worktree of {tree}")
    if uncommitted_files(worktree):
        refuse_unless_built(worktree, "it has uncommitted files")
    if worktree_moved(tree, worktree):
        refuse_unless_built(worktree, "it is not detached at branch base (a commit or checkout of yours?)")
    git("worktree", "remove", "--force", worktree, cwd=tree)


def building_path(tree: Path) -> Path:
    """Where a tree is built before it is renamed into place (after :func:`remove_leftovers`), claimed."""
    remove_leftovers(tree)
    return scratch.claim(partial_path(tree))


def remove_leftovers(tree: Path) -> None:
    """What a SIGKILLed run can leave beside ``tree`` under the tool's names (the half-built tree, the sdist unpacked
    beside it, an old tree between two renames): removed at the start of every run on ``tree`` (see
    :mod:`patchseries.scratch`: only what the tool claimed)."""
    building = partial_path(tree)
    for leftover in (building, unpack_path(building)):
        scratch.remove_leftover(leftover)
    old = tree.with_name(tree.name + ".old")
    # the old tree of a killed replace is removed only while still as built: a commit made in it since is kept
    if not (old.exists() or old.is_symlink()) or changes_since_built(old) is None:
        scratch.remove_leftover(old)


def unpack_path(building: Path) -> Path:
    """Where the sdist is unpacked before it becomes ``building``."""
    return building.with_name(building.name + ".unpack")


def refuse_operation_in_progress(repo: Path) -> None:
    """Refuse a repository with a rebase, am, merge, cherry-pick, revert or bisect stopped in any of its worktrees."""
    for worktree in gitcmd.worktrees(repo):
        for name, (what, finish, abort) in _IN_PROGRESS.items():
            if git_path(worktree, name).exists():
                raise SeriesError(
                    f"{what} is in progress in {worktree}; finish it ({finish}) or abort it ({abort}), then re-run"
                )
