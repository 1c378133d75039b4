"""The tool's trees (``<workdir>/trees/<base>``) and the person's edit trees (``<workdir>/edit/<base>``).

Every tree is built in a fresh folder of the run's scratch space (``<workdir>/tmp``, which each run empties): the base,
the series applied with ``git am`` on branch ``series``, its records last; then one rename puts it in place. A failure
or a kill leaves only scratch. A tree under ``trees/`` is the tool's while its record still describes it
(:func:`changes_since_built`): reused for the same base and series, else replaced. Anything else there is left as it
is, and the run stops with one line. An edit tree is made once and never written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchseries import gitcmd
from patchseries.atomic import write_file
from patchseries.base import BASE_REF, BaseSource, BaseTree, build_base, kept_download, resolve_source
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, failure_cause, git, git_path, has_path, out
from patchseries.interrupts import stage
from patchseries.paths import Workspace, kept_path, remove, shell
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.series import Patch, dropped_hunks, fingerprint, keep_cr

RECORD = "patchseries-tree"  # in a tool's tree's .git: Record
BASE_RECORD = "patchseries-base"  # in the .git of every tree the tool makes: BaseRecord
FILES = "patchseries-files"  # in a tool's tree's .git: the untracked files its runs made, with their digests
SERIES_BRANCH = "series"
SERIES_REF = f"refs/heads/{SERIES_BRANCH}"
EDIT_DIR = "edit"  # <workdir>/edit/<base>: trees made for a person to change the series in
# what `git status` does not show but a person may be in the middle of: what it is, how to finish it, how to abort it
_IN_PROGRESS = {
    "rebase-merge": ("a git rebase", "git rebase --continue", "git rebase --abort"),
    "rebase-apply": ("a git am or git rebase", "git am/rebase --continue", "git am/rebase --abort"),
    "MERGE_HEAD": ("a git merge", "git commit", "git merge --abort"),
    "CHERRY_PICK_HEAD": ("a git cherry-pick", "git cherry-pick --continue", "git cherry-pick --abort"),
    "REVERT_HEAD": ("a git revert", "git revert --continue", "git revert --abort"),
    "BISECT_LOG": ("a git bisect", "git bisect reset", "git bisect reset"),
}
_FAILED_FILE = re.compile(r"(?:patch failed: |Merge conflict in |error: |for ')([\w./-]+/[\w./-]+)")
_MODE_CHANGE = re.compile(r"(?m)^ mode change \d{6} => (\d{6}) (.+)$")  # `git apply --summary`


@dataclass(frozen=True)
class Record:
    """What the tool built in a tree of its own."""

    source: str  # BaseSource.key: "sdist <sha256>", "checkout <path> <commit>", "git <url> <ref>"
    fingerprint: str  # of the series' patch files
    base: str  # commit of branch base
    head: str  # commit of branch series, as applied


@dataclass(frozen=True)
class BaseRecord:
    """What the tool made a tree for (an edit tree or its own): the pin's base and the series folder, so that
    ``export`` writes the tree only into a series of that base."""

    base: str
    patches: str

    @staticmethod
    def read(repo: Path) -> BaseRecord | None:
        try:
            common = Path(out("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo))
            fields = _read_json(common / BASE_RECORD)
            return BaseRecord(str(fields["base"]), str(fields["patches"]))
        except (KeyError, TypeError, SeriesError):
            return None


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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _write_json(repo: Path, name: str, value: object) -> None:
    write_file(repo / ".git" / name, json.dumps(value, sort_keys=True) + "\n")


def read_record(tree: Path) -> Record | None:
    """The record of ``tree``, or None when it has none that is readable."""
    fields = _read_json(tree / ".git" / RECORD)
    try:
        return Record(**{name: str(fields[name]) for name in ("source", "fingerprint", "base", "head")})
    except (KeyError, TypeError):
        return None


def tool_tree(
    ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, log: Log
) -> tuple[BaseTree, ApplyResult]:
    """The tool's tree of ``source`` with ``patches`` applied on branch ``series``: reused, replaced or made."""
    tree = ws.trees / source.tree_name
    if source.kind == "sdist":  # the kept download is checked on every run, also when the tree is reused
        kept_download(ws, pin)
    if tree.exists() or tree.is_symlink():
        why = changes_since_built(tree)
        if why is not None:
            kept = kept_path(tree)
            raise SeriesError(
                f"{tree} is not as the tool built it ({why}); it may hold your work, so it is left as it is: move it "
                f"away ({shell('mv', tree, kept)}), and {_commits_remedy(ws, pin, patches, source, kept)}, and re-run; "
                "nothing was changed"
            )
        record = read_record(tree)
        assert record is not None  # changes_since_built checked it
        if (record.source, record.fingerprint) == (source.key, fingerprint(patches)):
            log(f"series already applied on {tree} (branch {SERIES_BRANCH}); reusing it")
            return BaseTree(tree, source.kind), ApplyResult(tree=tree, head=record.head, reused=True)
        log(f"{tree} holds another base or series, unchanged since the tool built it: building a fresh one")
    return BaseTree(tree, source.kind), _build(ws, pin, patches, source, tree, log, own=True)


def edit_tree(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, log: Log) -> Path:
    """A new tree for a person to change the series in: base + series on branch ``series``; an existing one is
    refused, as the tool never writes it again (``export`` only reads it)."""
    tree = ws.workdir / EDIT_DIR / source.tree_name
    if tree.exists() or tree.is_symlink():
        raise SeriesError(
            f"{tree} exists, and it is yours: the tool never rewrites it; edit it and export it "
            f"({ws.command('export', '--tree', tree)}), or move it away ({shell('mv', tree, kept_path(tree))}) to make "
            "a fresh one"
        )
    _build(ws, pin, patches, source, tree, log, own=False)
    log(f"made {tree}: branch {SERIES_BRANCH} is the series on branch base; change it there (git rebase -i base), "
        "then export it")  # fmt: skip
    return tree


def _build(
    ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, tree: Path, log: Log, own: bool
) -> ApplyResult:
    """Build base and series in a fresh scratch folder, then rename it to ``tree``; a tree there (the tool's,
    unchanged) goes back in place if that rename is interrupted, and otherwise with the scratch folder."""
    ws.scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=ws.scratch, prefix=f"{tree.name}-"))
    try:
        base = build_base(ws, pin, source, work, log)
        result = apply_series(base, patches, pin, log)
        _write_json(base.path, BASE_RECORD, asdict(BaseRecord(pin.identity, str(ws.patches))))
        if own:
            _write_json(
                base.path, RECORD, asdict(Record(source.key, fingerprint(patches), base.base_commit, result.head))
            )
        tree.parent.mkdir(parents=True, exist_ok=True)
        old = tree.exists() or tree.is_symlink()
        if old:
            tree.rename(work / "old")
        try:
            stage("replace-between-renames")
            base.path.rename(tree)
        except BaseException:
            if old and not tree.exists():
                (work / "old").rename(tree)
            raise
    except OSError as exc:  # a full disk names no file: the tree it was building is the path to check
        if exc.filename is None and not isinstance(exc, shutil.Error):
            raise OSError(exc.errno, exc.strerror or str(exc), str(tree)) from exc
        raise
    finally:
        stage("scratch-remove")
        shutil.rmtree(work, ignore_errors=True)  # what is left, the next run's scratch clean-up removes
    result.tree = tree
    return result


def changes_since_built(tree: Path) -> str | None:
    """None when ``tree`` is as the tool built it; else, in words, what is not: no readable record, an operation in
    progress, refs other than the recorded ``base`` and ``series`` (a commit, a branch, a tag, a stash), ``HEAD`` not
    on ``series``, a linked worktree, or an uncommitted file the tool's runs did not make."""
    record = read_record(tree)
    if record is None:
        return f"it has no readable record of what the tool built (.git/{RECORD})"
    refs = git("for-each-ref", "--format=%(refname) %(objectname)", cwd=tree, check=False)
    if refs.returncode != 0:
        return "git cannot read it"
    try:
        refuse_operation_in_progress(tree)
    except SeriesError as exc:
        return str(exc).split(";")[0]
    found = dict(line.split(" ", 1) for line in refs.stdout.splitlines())
    expected = {BASE_REF: record.base, SERIES_REF: record.head}
    if found != expected:
        changed = sorted(ref for ref in found.keys() | expected.keys() if found.get(ref) != expected.get(ref))
        return f"its refs changed ({', '.join(changed)})"
    head = git("symbolic-ref", "--quiet", "HEAD", cwd=tree, check=False).stdout.strip()
    if head != SERIES_REF:
        return f"HEAD is {head or 'detached'}, not {SERIES_REF}"
    linked = [path for path in gitcmd.worktrees(tree) if path != tree.resolve()]
    if linked:
        return f"a linked worktree, {linked[0]}"
    recorded = _read_json(tree / ".git" / FILES) or {}
    added = [name for name, digest in _untracked(tree).items() if recorded.get(name) != digest]
    # the person's global gitignore is not the tool's; an edit to a file marked assume-unchanged is not in `git status`
    files = sorted({*gitcmd.uncommitted_files(tree, own_ignores_only=True), *gitcmd.hidden_files(tree), *added})
    if files:
        shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        return f"{len(files)} uncommitted file{'s' * (len(files) > 1)} ({shown})"
    return None


def _untracked(tree: Path) -> dict[str, str]:
    """Every untracked file, ignored ones included, with a digest of its content (a link: its target)."""
    found = {}
    for name in filter(None, git("ls-files", "--others", "-z", cwd=tree).stdout.split("\0")):
        path = tree / name
        found[name] = f"-> {os.readlink(path)}" if path.is_symlink() else _digest(path)
    return found


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


@contextmanager
def recording(tree: Path) -> Iterator[None]:
    """Around the stages that write into the tool's ``tree``: the untracked files there when they end, however they
    end, are the tool's (a person's ``build/`` or edited acceptance copy, made since, is not)."""
    try:
        yield
    finally:
        _write_json(tree, FILES, _untracked(tree))


def _commits_remedy(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, kept: Path) -> str:
    """What to do with the commits of the refused ``tree`` once moved to ``kept``: export them from there; or, where
    its base lacks files the series changes (the sdist: docs/, tests/), which export refuses to drop, carry the
    commits on top of the applied series onto an edit tree of upstream's tag and export from there."""
    export = f"export your commits from there ({ws.command('export', '--tree', kept)})"
    tree = ws.trees / source.tree_name
    if source.kind != "sdist" or not dropped_hunks(tree, BASE_REF, patches, pin.sdist_lacks):
        return export
    upstream = ws.workdir / EDIT_DIR / resolve_source(ws, pin, None, True, False).tree_name  # what `edit --git` makes
    edit = ws.command("edit", "--git")
    record = read_record(tree)
    head = record.head if record is not None else ""
    tip = git("rev-parse", "--verify", "--quiet", SERIES_REF, cwd=tree, check=False).stdout.strip()
    lacking = "the sdist it is built on lacks files the series changes"
    ancestor = git("merge-base", "--is-ancestor", head or tip, tip or head, cwd=tree, check=False).returncode == 0
    if not (head and tip and head != tip and ancestor):  # no commits on top of the applied series to carry
        return f"export your commits from an edit tree of upstream's tag ({edit}), as {lacking}"
    steps = [
        *([shell("mv", upstream, kept_path(upstream))] if upstream.exists() or upstream.is_symlink() else []),
        edit,
        shell("git", "-C", upstream, "fetch", kept, SERIES_REF),
        shell("git", "-C", upstream, "cherry-pick", f"{head[:12]}..FETCH_HEAD"),
        ws.command("export", "--tree", upstream),
    ]
    return f"carry your commits onto upstream's tag to export them, as {lacking} ({' && '.join(steps)})"


def refuse_operation_in_progress(repo: Path) -> None:
    """Refuse a repository with a rebase, am, merge, cherry-pick, revert or bisect stopped in any of its worktrees."""
    for worktree in gitcmd.worktrees(repo):
        for name, (what, finish, abort) in _IN_PROGRESS.items():
            if git_path(worktree, name).exists():
                raise SeriesError(
                    f"{what} is in progress in {worktree}; finish it ({finish}) or abort it ({abort}), then re-run"
                )


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
        if _already_present(repo, patch, options):
            log(f"{patch.name}: already present in the base, skipped")
            result.already_present.append(patch.name)
            continue
        # no hooks: a person's global core.hooksPath must not veto or rewrite the tool's commits
        proc = git(
            "-c", "core.hooksPath=/dev/null", "am", "--3way", "--committer-date-is-author-date", *keep_cr(patch.path),
            *options, patch.path, cwd=repo, env=TOOL_IDENTITY, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            where = ", ".join(failed_files(repo, proc)) or failure_cause(proc).rstrip(".")
            raise SeriesError(f"{patch.name} does not apply: {where}; nothing was applied and no tree was changed")
        result.applied.append(patch.name)
        log(f"applied {patch.name}")
    result.head = out("rev-parse", "HEAD", cwd=repo)
    return result


def _already_present(repo: Path, patch: Patch, options: list[str]) -> bool:
    """Whether the base has ``patch`` already: its reverse applies and each file mode it sets is the base's (which
    ``git apply --check --reverse`` does not compare)."""
    if git("apply", "--check", "--reverse", *options, patch.path, cwd=repo, check=False).returncode != 0:
        return False
    modes = _MODE_CHANGE.findall(out("apply", "--summary", *options, patch.path, cwd=repo))
    return all(out("ls-tree", "HEAD", "--", path, cwd=repo).split(" ")[0] == mode for mode, path in modes)


def excluded_paths(base: BaseTree, patch: Patch, pin: Pin) -> list[str]:
    """Paths a patch modifies that the sdist base does not ship (upstream docs and tests), checked at ``HEAD``: a
    file an earlier patch of the series added is not excluded."""
    if base.source != "sdist":
        return []
    return [
        path for path in patch.touched_existing if path.startswith(pin.sdist_lacks) and not has_path(base.path, path)
    ]


def failed_files(repo: Path, proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The files a failed ``git am`` names: unmerged after a three-way merge, or reported by ``git apply``."""
    unmerged = out("diff", "--name-only", "--diff-filter=U", cwd=repo).splitlines()
    reported = {m.group(1) for m in _FAILED_FILE.finditer(proc.stdout + proc.stderr) if "/" in m.group(1)}
    return sorted(set(unmerged) | reported)


def abort_am(repo: Path) -> None:
    """Abort a stopped ``git am`` in a scratch clone of the tool's, back to a clean tree at the commit before the
    patch; where ``git am --abort`` fails (an object missing), its state is dropped and the tree reset."""
    git("am", "--abort", cwd=repo, env=TOOL_IDENTITY, check=False)
    state = git_path(repo, "rebase-apply")
    if state.exists():
        git("am", "--quit", cwd=repo, env=TOOL_IDENTITY, check=False)
        remove(state)
        reset = git("reset", "--quiet", "--hard", cwd=repo, env=TOOL_IDENTITY, check=False)
        if reset.returncode != 0:
            raise SeriesError(f"cannot undo a failed git am in the scratch clone {repo}: {failure_cause(reset)}")
