"""What a contributor may have in a tree, and the backups kept before the tool rewrites it.

A tree holds work when it has uncommitted changes (staged, unstaged or untracked files) or commits on ``series`` (or
on a detached ``HEAD``) that are not in ``patches/``: neither applied by the tool (reachable from the head it recorded)
nor exported (their ``git format-patch`` output is not one of the series' patch files). The tool re-applies over such
a tree only when told to (``--discard``), and then first keeps a backup that no later run overwrites: uncommitted
changes as a ``git stash`` entry, commits as a ``refs/patchseries/backup/<time>`` ref.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.export import format_one
from patchseries.gitcmd import TOOL_IDENTITY, git, git_path, out, uncommitted_files

BACKUP_REFS = "refs/patchseries/backup/"
_IN_PROGRESS = {
    "rebase-merge": ("a git rebase", "git rebase --continue", "git rebase --abort"),
    "rebase-apply": ("a git am or git rebase", "git am/rebase --continue", "git am/rebase --abort"),
    "MERGE_HEAD": ("a git merge", "git commit", "git merge --abort"),
    "CHERRY_PICK_HEAD": ("a git cherry-pick", "git cherry-pick --continue", "git cherry-pick --abort"),
    "REVERT_HEAD": ("a git revert", "git revert --continue", "git revert --abort"),
    "BISECT_LOG": ("a git bisect", "git bisect reset", "git bisect reset"),
}


@dataclass(frozen=True)
class TreeState:
    """The state of a tree's work tree and branches, as far as re-applying the series is concerned."""

    head: str
    branch: str | None  # None when HEAD is detached
    uncommitted: tuple[str, ...]
    unexported: tuple[str, ...]  # commit ids

    @property
    def has_work(self) -> bool:
        """Whether re-applying the series would lose something."""
        return bool(self.uncommitted or self.unexported)

    @property
    def where(self) -> str:
        return f"branch {self.branch}" if self.branch else f"detached HEAD at {self.head[:12]}"

    def describe(self) -> str:
        parts = []
        if self.uncommitted:
            shown = ", ".join(self.uncommitted[:3]) + (", ..." if len(self.uncommitted) > 3 else "")
            parts.append(f"{_count(len(self.uncommitted), 'uncommitted file')} ({shown})")
        if self.unexported:
            parts.append(f"{_count(len(self.unexported), 'commit')} not in patches/")
        return ", ".join(parts) or "no uncommitted changes"


def inspect_tree(repo: Path, series_branch: str, known: list[str], patch_texts: set[str]) -> TreeState:
    """The state of ``repo``; refuses a tree where a rebase, merge or similar is in progress.

    ``known`` are commits whose history is not the contributor's work (the base, the head the tool applied);
    ``patch_texts`` the contents of the series' patch files, for recognising exported commits.
    """
    refuse_operation_in_progress(repo)
    head = out("rev-parse", "HEAD", cwd=repo)
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False).stdout.strip() or None
    tips = [series_branch] if _exists(repo, series_branch) else []
    if branch is None:
        tips.append(head)
    unexported: list[str] = []
    if tips:
        excluded = [f"^{commit}" for commit in known if _exists(repo, commit)]
        candidates = out("rev-list", *tips, *excluded, cwd=repo).split()
        unexported = [c for c in candidates if format_one(repo, c) not in patch_texts]
    return TreeState(head, branch, tuple(uncommitted_files(repo)), tuple(unexported))


def refuse_operation_in_progress(repo: Path) -> None:
    for name, (what, finish, abort) in _IN_PROGRESS.items():
        if git_path(repo, name).exists():
            raise SeriesError(
                f"{what} is in progress in {repo}; finish it ({finish}) or abort it ({abort}), then re-run"
            )


def back_up(repo: Path, state: TreeState, series_branch: str) -> list[str]:
    """Keep what ``state`` says would be lost: a stash entry and ``refs/patchseries/backup/`` refs; say where."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept: list[str] = []
    if state.uncommitted:
        message = f"patchseries backup {stamp}: uncommitted changes before re-applying patches/"
        git("stash", "push", "--quiet", "--include-untracked", "--message", message, cwd=repo, env=TOOL_IDENTITY)
        stash = out("rev-parse", "--short=12", "stash@{0}", cwd=repo)
        kept.append(f"uncommitted changes: git stash entry {stash} (restore: git -C {repo} stash apply {stash})")
    if state.unexported:
        tips = [series_branch] if _exists(repo, series_branch) else []
        if state.branch is None:
            tips.append(state.head)
        for tip in tips:
            ref = _new_ref(repo, f"{BACKUP_REFS}{stamp}", out("rev-parse", tip, cwd=repo))
            kept.append(f"{tip if tip == series_branch else 'detached HEAD'}: {ref} (restore: git -C {repo} "
                        f"branch recovered {ref})")  # fmt: skip
    return kept


def _new_ref(repo: Path, name: str, commit: str) -> str:
    """Create ``name`` (or ``name-2``, ``name-3``, ...): an existing backup ref is never overwritten."""
    for number in range(1, 1000):
        ref = name if number == 1 else f"{name}-{number}"
        if git("update-ref", "--create-reflog", ref, commit, "", cwd=repo, check=False).returncode == 0:
            return ref
    raise SeriesError(f"cannot create a backup ref {name} in {repo}; delete old ones (git for-each-ref {BACKUP_REFS})")


def _exists(repo: Path, rev: str) -> bool:
    return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo, check=False).returncode == 0


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
