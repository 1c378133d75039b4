"""The tool's trees: built fresh for one base and one series, reused or replaced only while exactly as built.

A tree under ``<workdir>/trees/`` is the tool's while it is exactly what the tool built, which the tool can show:
the record it wrote into the tree's ``.git`` last, in one rename (:class:`Record`: the base's source and commit, the
series' fingerprint and the head it made), still matches the tree: a real ``.git`` directory, exactly the refs
``base`` and ``series`` at the recorded commits, ``HEAD`` on ``series``, no uncommitted file, no operation in
progress, no linked worktree but the tool's own. Such a tree is reused for the same base and series and otherwise
replaced by a fresh one (:func:`replace_tree`). Anything else (a person's edit or commit, another branch, a stash, a
moved or unreadable ``.git``, a folder without a record) is left exactly as it is, and the run stops with one line
that names it (:func:`changes_since_built`). Nothing is ever force-checked-out, renamed, reset or deleted in a tree
the tool cannot show it made unchanged.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from patchseries import scratch
from patchseries.atomic import write_file
from patchseries.errors import SeriesError
from patchseries.gitcmd import git, git_path, hidden_files, uncommitted_files
from patchseries.interrupts import stage
from patchseries.paths import partial_path

RECORD = "patchseries-tree"  # in the tree's .git directory
_OLD_RECORD = "patchseries-applied"  # what versions before the disposable trees wrote: "<fingerprint> <base> <head>"
BASE_REF = "refs/heads/base"
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
    in_progress = [what for name, (what, _, _) in _IN_PROGRESS.items() if (dot_git / name).exists()]
    if in_progress:
        return f"{in_progress[0]} is in progress"
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
    unclaimed = _unclaimed_exclusions(tree)
    if unclaimed:
        return f"a file its .git/info/exclude hides is not the tool's ({unclaimed})"
    linked = linked_worktrees(tree)
    others = [path for path in linked if path not in tool_worktrees(tree)]
    if others:
        return f"a linked worktree, {others[0]}"
    edited_worktrees = [path for path in linked if uncommitted_files(path)]
    if edited_worktrees:
        return f"its worktree {edited_worktrees[0]} has uncommitted files"
    moved = [path for path in linked if worktree_moved(tree, path)]
    if moved:
        return f"its worktree {moved[0]} is not detached at branch base (a commit or checkout of yours?)"
    return None


def worktree_moved(tree: Path, worktree: Path) -> bool:
    """Whether a worktree the tool made beside ``tree`` (detached at branch ``base``) has moved: a commit made there,
    or a checkout, which removing the worktree would lose (found by the second hostile pass)."""
    head = git("rev-parse", "--verify", "--quiet", "HEAD", cwd=worktree, check=False).stdout.strip()
    base = git("rev-parse", "--verify", "--quiet", BASE_REF, cwd=tree, check=False).stdout.strip()
    on_branch = git("symbolic-ref", "--quiet", "HEAD", cwd=worktree, check=False).returncode == 0
    return on_branch or not head or head != base


def _unclaimed_exclusions(tree: Path) -> str | None:
    """The first line of the tree's ``.git/info/exclude`` that hides something the tool did not write, or None.

    The tool excludes its build artifacts' patterns and, one path a line, the acceptance suite's copies and the
    harness under ``tests/``; a line of a person's, or one of those files changed since, would hide their work from
    `git status`, and it would go with the replaced tree.
    """
    from patchseries.acceptance import is_copy  # here: acceptance imports the test run, which needs no trees
    from patchseries.base import BUILD_ARTIFACTS
    from patchseries.harness import harness_texts

    exclude = tree / ".git" / "info" / "exclude"
    lines = exclude.read_text(errors="surrogateescape").splitlines() if exclude.is_file() else []
    # a tracked file is never hidden by an exclude (the matrix's before-series worktree excludes the series' tests)
    tracked = set(git("ls-files", "-z", "--", "tests", cwd=tree).stdout.split("\0"))
    for line in lines:
        if not line.strip() or line.startswith("#") or line in BUILD_ARTIFACTS:
            continue
        if not line.startswith("/tests/"):
            return line
        path = line.removeprefix("/")
        target = tree / path
        claimed = path in tracked or not target.is_file() or is_copy(tree, path)
        if not claimed and (target.is_symlink() or target.read_bytes() not in harness_texts()):
            return path
    return None


def refuse_unless_built(tree: Path, why: str) -> None:
    """Stop, naming ``tree`` and ``why`` it is not the tool's to reuse or replace."""
    raise SeriesError(
        f"{tree} is not as the tool built it ({why}); it may hold your work, so it is left as it is: export it "
        f"(python -m patchseries export --tree {tree}) or move it away, and re-run; nothing was changed"
    )


def linked_worktrees(tree: Path) -> list[Path]:
    """The linked worktrees of ``tree``'s repository (not ``tree`` itself)."""
    listing = git("worktree", "list", "--porcelain", cwd=tree, check=False).stdout
    paths = [Path(line[len("worktree ") :]) for line in listing.splitlines() if line.startswith("worktree ")]
    return [path.resolve() for path in paths[1:] if path.exists()]  # the first is the main worktree


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
    try:
        if tree.exists() or tree.is_symlink():
            scratch.claim(old, moving_here=tree)
            tree.rename(old)
        stage("replace-between-renames")
        built.rename(tree)
    except BaseException:  # an interrupt (or a failure) between the renames: the old tree goes back in place
        if old.exists() and not (tree.exists() or tree.is_symlink()):
            old.rename(tree)
        scratch.release(old)
        raise
    finally:
        scratch.release(built)
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
    for leftover in (building, unpack_path(building), tree.with_name(tree.name + ".old")):
        scratch.remove_leftover(leftover)


def unpack_path(building: Path) -> Path:
    """Where the sdist is unpacked before it becomes ``building``."""
    return building.with_name(building.name + ".unpack")


def refuse_operation_in_progress(repo: Path) -> None:
    for name, (what, finish, abort) in _IN_PROGRESS.items():
        if git_path(repo, name).exists():
            raise SeriesError(
                f"{what} is in progress in {repo}; finish it ({finish}) or abort it ({abort}), then re-run"
            )
