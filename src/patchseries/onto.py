"""`check --onto REF`: where each patch stands against another upstream ref (such as master).

Each patch is tried in series order on a scratch clone at REF and reported as

- ``already upstream``: its changes are present at REF (they reverse-apply, CHANGELOG entries aside, or a commit on
  REF has the same patch id);
- ``applies cleanly``: ``git am --3way`` applies it (later patches are tried on top of it);
- ``conflicts``: it does not apply; the conflicting files are listed and the patch is skipped.

CHANGELOG files are left out of the "already upstream" test because upstream files an entry under whichever release
ships it, so a backport's entry never sits where the backport put it.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, git, out, patch_id_of_file, patch_ids
from patchseries.series import Patch, keep_cr
from patchseries.trees import abort_am, failed_files

_CHANGELOGS = "--exclude=*CHANGELOG.md"


@dataclass(frozen=True)
class Standing:
    patch: str
    status: str  # "already upstream", "applies cleanly" or "conflicts"
    detail: str = ""


def check_onto(upstream: Path, ref: str, since: str, patches: list[Patch]) -> list[Standing]:
    """Report each patch against ``ref`` of the repository ``upstream``; ``since`` bounds the patch-id search."""
    if git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=upstream, check=False).returncode != 0:
        raise SeriesError(f"{upstream} has no ref {ref!r}; fetch it first or pass another --onto")
    upstream_ids = upstream_patch_ids(upstream, since, ref, sorted({c.path for p in patches for c in p.changes}))
    standings = []
    with tempfile.TemporaryDirectory(prefix="patchseries-onto-") as tmp:
        scratch = Path(tmp) / "tree"
        git("clone", "--quiet", "--shared", "--no-checkout", upstream, scratch)
        git("checkout", "--quiet", "--detach", out("rev-parse", f"{ref}^{{commit}}", cwd=upstream), cwd=scratch)
        for patch in patches:
            standings.append(_standing(scratch, patch, upstream_ids))
    return standings


def already_upstream(repo: Path, patch: Patch, upstream_ids: dict[str, str]) -> str:
    """Why ``repo``'s checked-out tree already has ``patch``'s changes, or ``""`` if it does not."""
    patch_id = patch_id_of_file(patch.path)
    if patch_id in upstream_ids:
        return f"same patch id as {upstream_ids[patch_id][:12]}"
    code_changes = [c for c in patch.changes if not c.path.endswith("CHANGELOG.md")]
    reverse = git("apply", "--check", "--reverse", _CHANGELOGS, patch.path, cwd=repo, check=False)
    if code_changes and reverse.returncode == 0:
        return "changes present, CHANGELOG entries aside"
    return ""


def _standing(repo: Path, patch: Patch, upstream_ids: dict[str, str]) -> Standing:
    present = already_upstream(repo, patch, upstream_ids)
    if present:
        return Standing(patch.name, "already upstream", present)
    proc = git("am", "--3way", *keep_cr(patch.path), patch.path, cwd=repo, env=TOOL_IDENTITY, check=False)
    if proc.returncode == 0:
        return Standing(patch.name, "applies cleanly")
    files = failed_files(repo, proc)
    abort_am(repo)
    return Standing(patch.name, "conflicts", ", ".join(files) or _last_line(proc))


def upstream_patch_ids(repo: Path, since: str, ref: str, paths: Sequence[str] = ()) -> dict[str, str]:
    """``{patch id: commit}`` for the commits in ``since..ref``, their diffs limited to ``paths`` if given.

    Limiting the diffs to the files the series touches keeps the log small on a long-lived branch, and matches an
    upstream commit that made the same change alongside changes to other files.
    """
    if git("rev-parse", "--verify", "--quiet", since, cwd=repo, check=False).returncode != 0:
        return {}
    return dict(patch_ids(repo, f"{since}..{ref}", paths=paths))


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr + proc.stdout).strip().splitlines()
    return lines[-1] if lines else "does not apply"
