"""Apply the series to a base repository with ``git am --3way``, all or nothing."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from patchseries.base import BASE_BRANCH, BaseTree
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, git, git_path, out
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.series import Patch, fingerprint

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


def apply_series(base: BaseTree, patches: list[Patch], pin: Pin, log: Log) -> ApplyResult:
    """Put the series on branch ``series`` of ``base``; on any failure leave the repository on ``base``, unchanged."""
    repo = base.path
    recover_interrupted(repo)
    stamp = f"{fingerprint(patches)} {base.base_commit}\n"
    marker = git_path(repo, _MARKER)
    if _is_current(repo, marker, stamp):
        log(f"series already applied on {repo} (branch {SERIES_BRANCH}); reusing it")
        return ApplyResult(tree=repo, head=out("rev-parse", "HEAD", cwd=repo), reused=True)

    marker.unlink(missing_ok=True)
    if git("rev-parse", "--verify", "--quiet", SERIES_BRANCH, cwd=repo, check=False).returncode == 0:
        # Keep unexported commits a contributor may have made on the old branch.
        git("branch", "--quiet", "--force", f"{SERIES_BRANCH}-previous", SERIES_BRANCH, cwd=repo)
    git("checkout", "--quiet", "--force", "-B", _WIP_BRANCH, BASE_BRANCH, cwd=repo)
    result = ApplyResult(tree=repo, head="")
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
        _am(repo, patch, options)
        result.applied.append(patch.name)
        log(f"applied {patch.name}")
    git("branch", "--quiet", "-M", SERIES_BRANCH, cwd=repo)
    marker.write_text(stamp)
    result.head = out("rev-parse", "HEAD", cwd=repo)
    return result


def excluded_paths(base: BaseTree, patch: Patch, pin: Pin) -> list[str]:
    """Paths a patch modifies that this kind of base does not ship (upstream docs and tests, for the sdist).

    Existence is checked at ``HEAD``, the tree with the earlier patches applied: a file that an earlier patch of the
    series added is not excluded.
    """
    if base.source != "sdist":
        return []
    return [
        path for path in patch.touched_existing if path.startswith(pin.sdist_lacks) and not _exists(base.path, path)
    ]


def recover_interrupted(repo: Path) -> None:
    """Abort a ``git am`` left over by an interrupted run, so a re-run starts from a known state."""
    if git_path(repo, "rebase-apply").exists():
        git("am", "--abort", cwd=repo, check=False)
        git("checkout", "--quiet", "--force", BASE_BRANCH, cwd=repo)
    git("branch", "--quiet", "-D", _WIP_BRANCH, cwd=repo, check=False)


def _am(repo: Path, patch: Patch, options: list[str]) -> None:
    proc = git(
        "am", "--3way", "--committer-date-is-author-date", *options, patch.path,
        cwd=repo, env=TOOL_IDENTITY, check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        return
    files = failed_files(repo, proc)
    abort_am(repo)
    git("checkout", "--quiet", "--force", BASE_BRANCH, cwd=repo)
    git("branch", "--quiet", "-D", _WIP_BRANCH, cwd=repo, check=False)
    where = ", ".join(files) if files else "see `git am` output"
    raise SeriesError(f"{patch.name} does not apply: {where}; nothing was applied and the base is unchanged")


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


def _is_current(repo: Path, marker: Path, stamp: str) -> bool:
    if not marker.is_file() or marker.read_text() != stamp:
        return False
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False).stdout.strip()
    return branch == SERIES_BRANCH


def _exists(repo: Path, path: str) -> bool:
    return git("cat-file", "-e", f"HEAD:{path}", cwd=repo, check=False).returncode == 0
