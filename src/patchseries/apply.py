"""Apply the series to a base repository with ``git am --3way``, all or nothing."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from patchseries.atomic import write_file
from patchseries.base import BASE_BRANCH, BaseTree
from patchseries.errors import SeriesError
from patchseries.gitcmd import ENCODING_ERRORS, TOOL_IDENTITY, git, git_path, has_path, out, uncommitted_files
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.series import Patch, fingerprint
from patchseries.treestate import TreeState, back_up, inspect_tree

SERIES_BRANCH = "series"
_WIP_BRANCH = "series-wip"
_MARKER = "patchseries-applied"
_FAILED_FILE = re.compile(r"(?:patch failed: |Merge conflict in |error: |for ')([\w./-]+/[\w./-]+)")


@dataclass
class ApplyResult:
    """What :func:`apply_series` did."""

    tree: Path
    head: str
    applied: list[str] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    reused: bool = False
    local: str | None = None  # the tree is not patches/: what differs ("1 uncommitted file (...)")
    where: str = f"branch {SERIES_BRANCH}"
    backups: list[str] = field(default_factory=list)


def apply_series(base: BaseTree, patches: list[Patch], pin: Pin, log: Log, discard: bool = False) -> ApplyResult:
    """Put the series on branch ``series`` of ``base``; on any failure leave the repository on ``base``, unchanged.

    A tree that already holds this series on this base is reused. If the contributor changed it since (uncommitted
    changes, other commits, another branch), it is left as it is and reported as ``local``: it is what will be
    tested, and it is not patches/. Re-applying over work that is not in patches/ is refused unless ``discard``,
    which first backs that work up (see :mod:`patchseries.treestate`).
    """
    repo = base.path
    recover_interrupted(repo)
    marker = git_path(repo, _MARKER)
    recorded = _read_marker(marker)
    wanted = (fingerprint(patches), base.base_commit)
    known = [BASE_BRANCH, *([recorded[2]] if recorded else [])]
    state = inspect_tree(repo, SERIES_BRANCH, known, {p.path.read_text(errors=ENCODING_ERRORS) for p in patches})
    if recorded and recorded[:2] == wanted:
        if state.head == recorded[2] and not state.uncommitted:
            log(f"series already applied on {repo} ({state.where}); reusing it")
            return ApplyResult(tree=repo, head=state.head, reused=True, where=state.where)
        if not discard:
            local = _local_description(state, recorded[2])
            log(f"tree: local changes, not patches/ ({local}): left as it is; export them to make them the "
                "series, or re-run with --discard to back them up and re-apply patches/")  # fmt: skip
            return ApplyResult(tree=repo, head=state.head, local=local, where=state.where)
    _refuse_a_branch_held_by_a_linked_worktree(repo)
    result = ApplyResult(tree=repo, head="")
    if state.has_work:
        if not discard:
            raise SeriesError(
                f"{repo} has {state.describe()}, which re-applying patches/ would lose; commit and export them "
                "first (python -m patchseries export), or re-run with --discard to back them up and re-apply"
            )
        result.backups = back_up(repo, state, SERIES_BRANCH)
        for backup in result.backups:
            log(f"backed up {backup}")
    # where a refused series returns the tree: what it was on, not `base` (which the next run would call local work)
    previous = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False).stdout.strip()
    previous = previous or out("rev-parse", "HEAD", cwd=repo)
    git("checkout", "--quiet", "--force", "-B", _WIP_BRANCH, BASE_BRANCH, cwd=repo)
    for patch in patches:
        excludes = excluded_paths(base, patch, pin)
        if excludes:
            result.excluded[patch.name] = excludes
            log(f"{patch.name}: excluding {', '.join(excludes)} (not shipped in the {base.source} base)")
        if len(excludes) == len(patch.changes):
            continue
        options = [f"--exclude={path}" for path in excludes]
        if git("apply", "--check", "--reverse", *options, patch.path, cwd=repo, check=False).returncode == 0:
            log(f"{patch.name}: already present in the base, skipped")
            result.already_present.append(patch.name)
            continue
        _am(repo, patch, options, previous)
        result.applied.append(patch.name)
        log(f"applied {patch.name}")
    git("branch", "--quiet", "-M", SERIES_BRANCH, cwd=repo)
    result.head = out("rev-parse", "HEAD", cwd=repo)
    write_file(marker, f"{wanted[0]} {wanted[1]} {result.head}\n")  # in one rename: never left empty
    return result


def excluded_paths(base: BaseTree, patch: Patch, pin: Pin) -> list[str]:
    """Paths a patch modifies that this kind of base does not ship (upstream docs and tests, for the sdist).

    Existence is checked at ``HEAD``, the tree with the earlier patches applied: a file that an earlier patch of the
    series added is not excluded.
    """
    if base.source != "sdist":
        return []
    return [
        path for path in patch.touched_existing if path.startswith(pin.sdist_lacks) and not has_path(base.path, path)
    ]


def recover_interrupted(repo: Path) -> None:
    """Undo what an interrupted run left on the tool's work branch (a stopped ``git am``), so a re-run starts clean.

    Only the tool's own branch ``series-wip`` is touched; a rebase or ``git am`` of the contributor's is left alone.
    """
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False).stdout.strip()
    _refuse_a_persons_wip_branch(repo, on_it=branch == _WIP_BRANCH)
    if branch == _WIP_BRANCH:
        if git_path(repo, "rebase-apply").exists():
            abort_am(repo)
        series = git("rev-parse", "--verify", "--quiet", SERIES_BRANCH, cwd=repo, check=False).returncode == 0
        git("checkout", "--quiet", "--force", SERIES_BRANCH if series else BASE_BRANCH, cwd=repo)
    git("branch", "--quiet", "-D", _WIP_BRANCH, cwd=repo, check=False)


def _refuse_a_branch_held_by_a_linked_worktree(repo: Path) -> None:
    """Re-applying moves ``series``: not while a linked worktree, whose edits the tool does not see, has it out."""
    current = str(repo.resolve())
    blocks = out("worktree", "list", "--porcelain", cwd=repo).split("\n\n")
    for block in blocks:
        fields = dict(line.partition(" ")[::2] for line in block.splitlines())
        held = fields.get("branch", "").removeprefix("refs/heads/")
        if held in (SERIES_BRANCH, _WIP_BRANCH) and str(Path(fields.get("worktree", "")).resolve()) != current:
            raise SeriesError(
                f"{repo}: branch {held} is checked out in the linked worktree {fields['worktree']}, whose work "
                "re-applying the series would not see; check out another branch there or remove it (git worktree "
                "remove), and re-run: nothing was changed"
            )


def _refuse_a_persons_wip_branch(repo: Path, on_it: bool) -> None:
    """``series-wip`` is the tool's only while it holds nothing but the tool's commits (and, checked out, no edits)."""
    if git("rev-parse", "--verify", "--quiet", _WIP_BRANCH, cwd=repo, check=False).returncode != 0:
        return
    committers = set(out("log", "--format=%ce", f"{BASE_BRANCH}..{_WIP_BRANCH}", cwd=repo).split())
    work = [f"commits by {', '.join(sorted(committers - {TOOL_IDENTITY['GIT_COMMITTER_EMAIL']}))}"]
    if committers <= {TOOL_IDENTITY["GIT_COMMITTER_EMAIL"]}:
        work = []
    if on_it and not git_path(repo, "rebase-apply").exists() and uncommitted_files(repo):  # not a stopped `git am`'s
        work.append("uncommitted edits")
    if work:
        what = ", ".join(work)
        raise SeriesError(
            f"{repo}: branch {_WIP_BRANCH} holds work that is not the tool's ({what}); rename it (git branch -m "
            f"{_WIP_BRANCH} NAME), commit or stash the edits, and re-run: nothing was changed"
        )


def _am(repo: Path, patch: Patch, options: list[str], previous: str) -> None:
    proc = git(
        "am", "--3way", "--committer-date-is-author-date", *options, patch.path,
        cwd=repo, env=TOOL_IDENTITY, check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        return
    files = failed_files(repo, proc)
    abort_am(repo)
    git("checkout", "--quiet", "--force", previous, cwd=repo)
    git("branch", "--quiet", "-D", _WIP_BRANCH, cwd=repo, check=False)
    where = ", ".join(files) if files else "see `git am` output"
    raise SeriesError(f"{patch.name} does not apply: {where}; nothing was applied and the tree is as it was")


def failed_files(repo: Path, proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The files a failed ``git am`` names: unmerged after a three-way merge, or reported by ``git apply``."""
    unmerged = out("diff", "--name-only", "--diff-filter=U", cwd=repo).splitlines()
    reported = {m.group(1) for m in _FAILED_FILE.finditer(proc.stdout + proc.stderr) if "/" in m.group(1)}
    return sorted(set(unmerged) | reported)


def abort_am(repo: Path) -> None:
    """Abort a stopped ``git am``; if aborting fails (e.g. an object is missing), drop its state instead."""
    git("am", "--abort", cwd=repo, check=False)
    if git_path(repo, "rebase-apply").exists():
        git("am", "--quit", cwd=repo, check=False)
        git("reset", "--quiet", "--hard", cwd=repo, check=False)


def _read_marker(marker: Path) -> tuple[str, str, str] | None:
    """``(series fingerprint, base commit, head)`` the tool last applied, or None (none yet, or an older format)."""
    fields = marker.read_text().split() if marker.is_file() else []
    return (fields[0], fields[1], fields[2]) if len(fields) == 3 else None


def _local_description(state: TreeState, applied_head: str) -> str:
    """What makes the tree differ from the series the tool applied."""
    parts = [state.describe()] if state.has_work else []
    if state.head != applied_head and not (state.unexported and state.branch == SERIES_BRANCH):
        parts.append(f"HEAD is {state.where}, not the applied series")
    return ", ".join(parts)
