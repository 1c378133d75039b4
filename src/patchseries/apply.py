"""Apply the series to a base with ``git am --3way``, in a tree of the tool's built fresh for that base and series.

:func:`tool_tree` reuses the tree of a base and series while it is exactly as built, replaces it while it is the
tool's and unchanged, and otherwise refuses, leaving it as it is (:mod:`patchseries.trees`). A series that does not
apply leaves nothing behind: it was applied in a new folder, which is removed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from patchseries import scratch
from patchseries.base import BaseSource, BaseTree, build_base, kept_download, resolve_source
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, failure_cause, git, git_path, has_path, out
from patchseries.paths import Workspace, kept_path, remove, shell
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.series import Patch, dropped_hunks, file_sections, fingerprint, keep_cr, section_path
from patchseries.trees import (
    BASE_REF,
    SERIES_REF,
    BaseRecord,
    Record,
    building_path,
    changes_since_built,
    read_record,
    refuse_unless_built,
    remove_leftovers,
    replace_tree,
)

SERIES_BRANCH = "series"
EDIT_DIR = "edit"  # <workdir>/edit/<base>: trees made for a person to change the series in; the tool never writes them
_FAILED_FILE = re.compile(r"(?:patch failed: |Merge conflict in |error: |for ')([\w./-]+/[\w./-]+)")
_NEW_MODE = re.compile(r"(?m)^new mode ([0-7]{6})$")  # a diff section's header: the file mode the patch sets


@dataclass
class ApplyResult:
    """What :func:`tool_tree` did."""

    tree: Path
    head: str
    applied: list[str] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    reused: bool = False
    where: str = f"branch {SERIES_BRANCH}"


def tool_tree(
    ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, log: Log
) -> tuple[BaseTree, ApplyResult]:
    """The tool's tree of ``source`` with ``patches`` applied on branch ``series``: reused, replaced or made."""
    tree = ws.trees / source.tree_name
    wanted = fingerprint(patches)
    if source.kind == "sdist":  # the kept download is checked on every run, also when the tree is reused
        kept_download(ws, pin)
    remove_leftovers(tree)
    if tree.is_dir() and not tree.is_symlink() and not any(tree.iterdir()):
        tree.rmdir()  # empty: nothing of anyone's is in it (a rename an interrupt cut short)
    if tree.exists() or tree.is_symlink():
        why = changes_since_built(tree)
        if why is not None:
            refuse_unless_built(tree, why, lambda kept: _commits_remedy(ws, pin, patches, source, tree, kept))
        record = read_record(tree)
        assert record is not None  # changes_since_built checked it
        if (record.source, record.fingerprint) == (source.key, wanted):
            log(f"series already applied on {tree} (branch {SERIES_BRANCH}); reusing it")
            return BaseTree(tree, source.kind), ApplyResult(tree=tree, head=record.head, reused=True)
        log(f"{tree} holds another base or series, unchanged since the tool built it: building a fresh one")
    with _building(tree) as building:
        base = build_base(ws, pin, source, building, log)
        result = apply_series(base, patches, pin, log)
        BaseRecord(pin.identity, str(ws.patches)).write(building)
        Record(source.key, wanted, base.base_commit, result.head).write(building)
        replace_tree(tree, building)
    result.tree = tree
    return BaseTree(tree, source.kind), result


def _commits_remedy(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, tree: Path, kept: Path) -> str:
    """What to do with the commits of the refused tool tree ``tree`` once it is moved to ``kept``: export them from
    there. A tree whose base lacks files the series changes (the sdist: docs/, upstream tests/) cannot export the
    series (export refuses to drop those hunks), so its commits on top of the series the tool applied are carried into
    an edit tree of upstream's tag and exported from there."""
    export = f"export your commits from there ({ws.command('export', '--tree', kept)})"
    if source.kind != "sdist" or not dropped_hunks(tree, BASE_REF, patches, pin.sdist_lacks):
        return export
    upstream = ws.workdir / EDIT_DIR / resolve_source(ws, pin, None, True, False).tree_name  # what `edit --git` makes
    edit = ws.command("edit", "--git")
    record = read_record(tree)
    head = record.head if record is not None else ""
    tip = git("rev-parse", "--verify", "--quiet", SERIES_REF, cwd=tree, check=False).stdout.strip()
    on_top = bool(head and tip) and git("merge-base", "--is-ancestor", head, tip, cwd=tree, check=False).returncode == 0
    lacking = "the sdist it is built on lacks files the series changes"
    if not on_top or head == tip:  # no commits on top of the series the tool applied: none a command can carry
        return f"export your commits from an edit tree of upstream's tag ({edit}), as {lacking}"
    steps = [
        *([shell("mv", upstream, kept_path(upstream))] if upstream.exists() or upstream.is_symlink() else []),
        edit,
        shell("git", "-C", upstream, "fetch", kept, SERIES_REF),
        shell("git", "-C", upstream, "cherry-pick", f"{head[:12]}..FETCH_HEAD"),
        ws.command("export", "--tree", upstream),
    ]
    return f"carry your commits onto upstream's tag to export them, as {lacking} ({' && '.join(steps)})"


def edit_tree(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, log: Log) -> Path:
    """A new tree for a person to change the series in: base + series on branch ``series``, then theirs.

    It is made once and never written by the tool again (``export`` only reads it): an existing one is refused.
    """
    tree = ws.workdir / EDIT_DIR / source.tree_name
    if tree.exists() or tree.is_symlink():
        raise SeriesError(
            f"{tree} exists, and it is yours: the tool never rewrites it; edit it and export it "
            f"({ws.command('export', '--tree', tree)}), or move it away ({shell('mv', tree, kept_path(tree))}) to make "
            "a fresh one"
        )
    with _building(tree) as building:
        base = build_base(ws, pin, source, building, log)
        apply_series(base, patches, pin, log)
        BaseRecord(pin.identity, str(ws.patches)).write(building)
        scratch.move_out(building, tree)
    log(f"made {tree}: branch {SERIES_BRANCH} is the series on branch base; change it there (git rebase -i base), "
        "then export it")  # fmt: skip
    return tree


@contextmanager
def _building(tree: Path) -> Iterator[Path]:
    """The folder ``tree`` is built in; on any failure (a patch that does not apply, a full disk, an interrupt) it is
    removed, with its parent if that is left empty, and a failed write that names no file names ``tree``."""
    building = building_path(tree)
    try:
        yield building
    except BaseException as exc:
        scratch.remove(building)
        with contextlib.suppress(OSError):
            tree.parent.rmdir()  # and no empty folder of trees either
        if isinstance(exc, OSError) and exc.filename is None and not isinstance(exc, shutil.Error):
            raise OSError(exc.errno, exc.strerror or str(exc), str(tree)) from exc
        raise


def apply_series(base: BaseTree, patches: list[Patch], pin: Pin, log: Log) -> ApplyResult:
    """Apply ``patches`` on branch ``series`` of the fresh repository ``base``; raise if one does not apply."""
    repo = base.path
    result = ApplyResult(tree=repo, head="")
    git("checkout", "--quiet", "-b", SERIES_BRANCH, BASE_REF, cwd=repo)
    for patch in patches:
        excludes = excluded_paths(base, patch, pin)
        if excludes:
            result.excluded[patch.name] = excludes
            log(f"{patch.name}: excluding {', '.join(excludes)} (not shipped in the {base.source} base)")
        if len(excludes) == len(patch.changes):
            continue
        options = [f"--exclude={path}" for path in excludes]
        if _already_present(repo, patch, options, excludes):
            log(f"{patch.name}: already present in the base, skipped")
            result.already_present.append(patch.name)
            continue
        _am(repo, patch, options)
        result.applied.append(patch.name)
        log(f"applied {patch.name}")
    result.head = out("rev-parse", "HEAD", cwd=repo)
    return result


def _already_present(repo: Path, patch: Patch, options: list[str], excludes: list[str]) -> bool:
    """Whether the base has ``patch`` already: its reverse applies, and every file mode it sets is the base's.

    ``git apply --check --reverse`` does not compare file modes: a patch that only makes a file executable passed for
    one already present, and would be skipped.
    """
    if git("apply", "--check", "--reverse", *options, patch.path, cwd=repo, check=False).returncode != 0:
        return False
    for section in file_sections(patch.path.read_bytes().decode(errors="surrogateescape")):
        mode, path = _NEW_MODE.search(section), section_path(section)
        if mode and path not in excludes and out("ls-tree", "HEAD", "--", path, cwd=repo).split(" ")[0] != mode[1]:
            return False
    return True


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


def _am(repo: Path, patch: Patch, options: list[str]) -> None:
    # no hooks: a person's global core.hooksPath must not veto or rewrite the tool's commits
    proc = git(
        "-c", "core.hooksPath=/dev/null", "am", "--3way", "--committer-date-is-author-date", *keep_cr(patch.path),
        *options, patch.path,
        cwd=repo, env=TOOL_IDENTITY, check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        return
    # the files, else git am's own reason: its output is not shown
    where = ", ".join(failed_files(repo, proc)) or failure_cause(proc).rstrip(".")
    raise SeriesError(f"{patch.name} does not apply: {where}; nothing was applied and no tree was changed")


def failed_files(repo: Path, proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The files a failed ``git am`` names: unmerged after a three-way merge, or reported by ``git apply``."""
    unmerged = out("diff", "--name-only", "--diff-filter=U", cwd=repo).splitlines()
    reported = {m.group(1) for m in _FAILED_FILE.finditer(proc.stdout + proc.stderr) if "/" in m.group(1)}
    return sorted(set(unmerged) | reported)


def abort_am(repo: Path) -> None:
    """Abort a stopped ``git am`` in a scratch clone of the tool's, back to the commit before the patch with a clean
    tree, so that the next patch is tried on its own.

    If aborting fails (e.g. an object is missing), the am's state is dropped and the tree reset; what is left of the
    state is removed (the clone is the tool's), so that no later patch is reported as a conflict with the rebase
    directory. Every call has an identity: ``git am --quit`` fails without one.
    """
    git("am", "--abort", cwd=repo, env=TOOL_IDENTITY, check=False)
    state = git_path(repo, "rebase-apply")
    if not state.exists():
        return
    git("am", "--quit", cwd=repo, env=TOOL_IDENTITY, check=False)
    remove(state)
    reset = git("reset", "--quiet", "--hard", cwd=repo, env=TOOL_IDENTITY, check=False)
    if reset.returncode != 0:
        raise SeriesError(f"cannot undo a failed git am in the scratch clone {repo}: {failure_cause(reset)}")
