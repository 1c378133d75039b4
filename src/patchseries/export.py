"""Regenerate ``patches/`` from a branch, and prove the committed patches are a faithful export (drift check)."""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from pathlib import Path

from patchseries.base import BASE_BRANCH
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, git, out, uncommitted_files
from patchseries.paths import partial_path, remove
from patchseries.series import Patch

# Options that make the output independent of the machine, the git version's signature and user configuration.
FORMAT_PATCH_OPTIONS = (
    "--zero-commit",
    "--no-signature",
    "--no-numbered",
    "--full-index",
    "--no-renames",
    "--no-cover-letter",
    "--no-thread",
    "--no-to",
    "--no-cc",
    "--subject-prefix=PATCH",
    "--stat=80",
    "--encode-email-headers",
    "--no-add-header",
)
_FORMAT_CONFIG = ("-c", "format.useAutoBase=false")
SERIES_HEADER = (
    "# Applied in this order by `git am`; regenerate with `patchseries export`, never edit patches by hand.\n"
)


def export_series(repo: Path, patches_dir: Path, branch: str, base: str = BASE_BRANCH) -> list[str]:
    """Write ``base..branch`` of ``repo`` as ``NNNN-*.patch`` files plus ``series`` into ``patches_dir``.

    Other files in ``patches_dir`` (the pin) are kept; stale ``*.patch`` files are removed. A tree with uncommitted
    changes is refused: export writes commits only, and those changes would silently stay behind.
    """
    dirty = uncommitted_files(repo)
    if dirty:
        shown = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        raise SeriesError(
            f"{repo} has uncommitted changes ({shown}), which export would leave out; commit them on {branch} "
            f"(git commit, or git commit --fixup and git rebase -i --autosquash {base}) or stash them, then export"
        )
    if git("rev-parse", "--verify", "--quiet", branch, cwd=repo, check=False).returncode != 0:
        raise SeriesError(f"{repo} has no branch {branch!r}; run `patchseries apply` first, or pass --branch")
    if out("rev-list", "--merges", f"{base}..{branch}", cwd=repo):
        raise SeriesError(f"{base}..{branch} contains merge commits; a patch series must be linear (rebase it)")
    if not out("rev-list", f"{base}..{branch}", cwd=repo):
        raise SeriesError(f"branch {branch!r} has no commits on top of {base!r}; nothing to export")
    staging = partial_path(patches_dir / "export")
    remove(staging)
    git(*_FORMAT_CONFIG, "format-patch", *FORMAT_PATCH_OPTIONS, "--output-directory", staging, f"{base}..{branch}",
        cwd=repo)  # fmt: skip
    names = sorted(p.name for p in staging.glob("*.patch"))
    for stale in patches_dir.glob("*.patch"):
        stale.unlink()
    for name in names:
        shutil.move(str(staging / name), patches_dir / name)
    remove(staging)
    (patches_dir / "series").write_text(SERIES_HEADER + "".join(f"{name}\n" for name in names))
    return names


def format_one(repo: Path, commit: str) -> str:
    """The patch file that :func:`export_series` writes for ``commit`` (empty for a merge or an empty commit)."""
    return git(*_FORMAT_CONFIG, "format-patch", *FORMAT_PATCH_OPTIONS, "--stdout", "-1", commit, cwd=repo).stdout


def drift_problems(base_repo: Path, patches: list[Patch], patches_dir: Path) -> list[str]:
    """Re-apply the committed patches to a scratch clone of the base, re-export them, and list every difference.

    Each patch must also apply with no whitespace error (``git apply --check --whitespace=error``).
    """
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="patchseries-drift-") as tmp:
        scratch = Path(tmp) / "tree"
        git("clone", "--quiet", "--shared", "--branch", BASE_BRANCH, base_repo, scratch)
        git("checkout", "--quiet", "-b", "drift-check", cwd=scratch)
        for patch in patches:
            check = git("apply", "--check", "--whitespace=error", patch.path, cwd=scratch, check=False)
            if check.returncode != 0:
                reason = (check.stderr.strip().splitlines() or ["does not apply"])[-1]
                problems.append(f"{patch.name}: {reason}")
                return problems
            git("am", "--quiet", "--committer-date-is-author-date", patch.path, cwd=scratch, env=TOOL_IDENTITY)
        exported = Path(tmp) / "exported"
        exported.mkdir()
        export_series(scratch, exported, branch="drift-check", base=BASE_BRANCH)
        committed = sorted(p.name for p in patches)
        fresh = sorted(p.name for p in exported.glob("*.patch"))
        if committed != fresh:
            problems.append(f"patch names differ from a fresh export: {committed} vs {fresh}")
        for name in sorted(set(committed) & set(fresh)):
            if not filecmp.cmp(patches_dir / name, exported / name, shallow=False):
                problems.append(f"{name} differs from a fresh export; re-export it with `patchseries export`")
        if (patches_dir / "series").read_text() != (exported / "series").read_text():
            problems.append("series file differs from a fresh export; re-export with `patchseries export`")
    return problems
