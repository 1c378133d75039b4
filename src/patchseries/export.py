"""Regenerate ``patches/`` from a branch, and prove the committed patches are a faithful export (drift check)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from patchseries.atomic import commit_rewrite, discard_uncommitted, start_rewrite
from patchseries.errors import SeriesError
from patchseries.gitcmd import ENCODING_ERRORS, TOOL_IDENTITY, git, has_path, out, uncommitted_files, worktrees
from patchseries.interrupts import stage
from patchseries.ownership import Unexported, unexported
from patchseries.paths import Workspace, kept_path, shell, tool_command
from patchseries.pin import Pin
from patchseries.series import (
    Patch,
    author_header,
    crlf_problem,
    dropped_hunks,
    file_sections,
    has_crlf,
    keep_cr,
    listed_names,
    parse_patch,
    read_series,
    section_path,
)
from patchseries.trees import BASE_REF, BaseRecord, refuse_operation_in_progress

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
    "--no-attach",
)
# What a repository's own configuration (a person's edit tree) could change in a patch, set to git's defaults: the
# same patch bytes on every machine (the global and system configuration are never read: gitcmd.NEUTRAL_CONFIG)
_FORMAT_SETTINGS = (
    "format.useAutoBase=false", "format.signOff=false", "format.notes=false", "format.suffix=.patch",
    "format.filenameMaxLength=64", "format.from=false", "format.forceInBodyFrom=false", "format.mboxrd=false",
    "format.noprefix=false", "diff.context=3", "diff.interHunkContext=0", "diff.algorithm=myers",
    "diff.indentHeuristic=true", "diff.suppressBlankEmpty=false", "diff.orderFile=/dev/null", "diff.srcPrefix=a/",
    "diff.dstPrefix=b/",
)  # fmt: skip
_FORMAT_CONFIG = tuple(option for setting in _FORMAT_SETTINGS for option in ("-c", setting))
AUTHOR_ENV = "PATCHSERIES_AUTHOR"  # the author of every written patch when --author is not given
# no control character: git drops a newline from a name (`Eve\nBcc: x` would become `EveBcc: x`)
_IDENTITY = re.compile(r"^(?P<name>[^<>\x00-\x1f]*[^<>\s])\s*<(?P<email>[^<>\s@]+@[^<>\s@]+)>$")
SERIES_HEADER = (
    "# Applied in this order by `git am`; regenerate with `patchseries export`, never edit patches by hand.\n"
)


def export_series(
    repo: Path,
    patches_dir: Path,
    branch: str,
    base: str = BASE_REF,
    lacks: tuple[str, ...] = (),
    drop_lacking: bool = False,
    author: str | None = None,
    refuse_placeholder_authors: bool = False,
    upstream_edit: str = tool_command("edit", "--git"),
    replace_unexported: bool = False,
    edit: str = tool_command("edit"),
) -> list[str]:
    """Write ``base..branch`` of ``repo`` as ``NNNN-*.patch`` files plus ``series`` into ``patches_dir``.

    The patches the old ``series`` lists are replaced or removed only where their bytes show that an export wrote them
    (:mod:`patchseries.ownership`), else the export is refused, naming the file: ``series`` may list a patch of a
    person's. ``replace_unexported``: replace them all (``forward``, whose scratch clone has no commit of an earlier
    forward to show that one wrote them). Every other file is kept (the pin, and a ``*.patch`` that ``series`` does not
    list, which is a contributor's), and overwriting one with other content is refused. The folder is rewritten as one
    step (:mod:`patchseries.atomic`): an interrupted export leaves the old series or the new one. A tree with
    uncommitted changes is refused: export writes commits only, and those changes would silently stay behind. So is an
    export that would drop a committed patch's hunks for upstream files the tree's base lacks (``lacks``, e.g. ``docs/``
    on the sdist base, where applying left them out), unless ``drop_lacking``.

    ``upstream_edit`` and ``edit``: the commands a refusal names to make an edit tree (of an upstream base, of this
    series), with the run's own options (:meth:`patchseries.paths.Workspace.command`).

    ``author`` (``Name <email>``) is the ``From:`` of every patch, else each commit's own author; with
    ``refuse_placeholder_authors`` (what ``export`` and ``forward`` write into ``patches/``) an ``@invalid`` author is
    refused, so that no placeholder identity reaches a committed patch.

    Relative paths are taken from the current directory (git runs in ``repo``, where they would mean other folders).
    An export that makes no patch over a ``series`` that lists some is refused: it would only delete the series.
    """
    repo, patches_dir = repo.resolve(), patches_dir.resolve()
    # a stopped `git rebase -i` has not moved the branch yet: exporting now would write the old series as the new one
    refuse_operation_in_progress(repo)
    label, branch = branch, branch if branch.startswith("refs/") else f"refs/heads/{branch}"  # never a tag named so
    base_label = base.removeprefix("refs/heads/")
    for worktree in worktrees(repo):  # the branch may be checked out, and edited, in any of them
        dirty = uncommitted_files(worktree, user_config=True)  # what the person's own gitignore hides is not work
        if dirty:
            shown = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
            raise SeriesError(
                f"{worktree} has uncommitted changes ({shown}), which export would leave out; commit them on {label} "
                f"(git commit, or git commit --fixup and git rebase -i --autosquash {base_label}) or stash them, "
                "then export"
            )
    if git("check-ref-format", branch, check=False).returncode != 0:  # `series^` would be a commit, not a branch
        raise SeriesError(f"--branch {label!r} is not a branch name; pass the name of a branch of {repo}")
    if git("rev-parse", "--verify", "--quiet", branch, cwd=repo, check=False).returncode != 0:
        raise SeriesError(f"{repo} has no branch {label!r}; make a tree with `{edit}`, or pass --branch")
    if git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", cwd=repo, check=False).returncode != 0:
        raise SeriesError(
            f"{repo} has no branch {base_label!r} to export the series against; export from a tree that `{edit}` "
            "made (its branch base is the pinned release)"
        )
    if git("merge-base", "--is-ancestor", base, branch, cwd=repo, check=False).returncode != 0:
        # its patches would be made against another tree than the base: written, they would not apply
        raise SeriesError(
            f"{label} of {repo} is not built on {base_label!r} (the pinned base): its patches would not apply to it; "
            f"rebase it onto {base_label}, then export; nothing was written"
        )
    if out("rev-list", "--merges", f"{base}..{branch}", cwd=repo):
        raise SeriesError(f"{base_label}..{label} contains merge commits; a patch series must be linear (rebase it)")
    if not out("rev-list", f"{base}..{branch}", cwd=repo):
        raise SeriesError(f"branch {label!r} has no commits on top of {base_label!r}; nothing to export")
    for worktree in worktrees(repo):
        _refuse_work_beyond(worktree, branch, label)
    _refuse_what_am_cannot_apply(repo, f"{base}..{branch}", base_label)
    staging = start_rewrite(patches_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="patchseries-export-") as tmp:
            source, commits = (repo, f"{base}..{branch}")
            if author is not None:
                source, commits = _authored(repo, base, branch, author, tmp)
            git(*_FORMAT_CONFIG, "format-patch", *FORMAT_PATCH_OPTIONS, "--output-directory", staging, commits,
                cwd=source)  # fmt: skip
            stage("export-staged")
        names = sorted(p.name for p in staging.glob("*.patch"))
        listed = listed_names(patches_dir / "series")
        if not names and listed:
            raise SeriesError(
                f"export of {base_label}..{label} of {repo} made no patch, while {patches_dir / 'series'} lists "
                f"{len(listed)} ({listed[0]}, ...); refusing to empty the series, nothing was written"
            )
        placeholders = [n for n in names if refuse_placeholder_authors and is_placeholder(_from(staging / n))]
        if placeholders:
            raise SeriesError(
                f"{len(placeholders)} patches ({placeholders[0]}, ...) would have the placeholder author "
                f"{_from(staging / placeholders[0])}; pass --author 'Name <email>' (or set {AUTHOR_ENV}), or commit "
                "with your own identity; nothing was written"
            )
        committed = read_series(patches_dir / "series") if lacks and (patches_dir / "series").is_file() else []
        dropped = [] if drop_lacking else dropped_hunks(repo, base, committed, lacks, [staging / n for n in names])
        if dropped:
            raise SeriesError(
                f"export would drop {'; '.join(dropped)}: the base of {repo} lacks those files (the sdist ships no "
                f"docs/ or upstream tests/), so applying left those hunks out. Make the change in a tree of an "
                f"upstream base ({upstream_edit}, or --checkout PATH instead of --git) and export from there, or pass "
                "--drop-missing to drop them"
            )
        _refuse_overwriting_unlisted(patches_dir, staging, [n for n in names if n not in listed])
        if not replace_unexported:
            _refuse_losing(repo, base, branch, patches_dir, staging, names, listed, lacks if drop_lacking else ())
        (staging / "series").write_text(SERIES_HEADER + "".join(f"{name}\n" for name in names))
        commit_rewrite(patches_dir, [*names, "series"], sorted(set(listed) - set(names)))
    finally:
        discard_uncommitted(patches_dir)
    return names


def parse_identity(text: str, given_as: str = "--author") -> tuple[str, str]:
    """``Name <email>`` -> ``(name, email)``; anything else, or an ``@invalid`` placeholder address, is refused,
    naming where it came from (``given_as``: ``--author``, or ``$PATCHSERIES_AUTHOR``)."""
    shown = f"--author {text!r}" if given_as == "--author" else f"{given_as}={text!r}"
    match = _IDENTITY.match(text.strip())
    if match is None:
        raise SeriesError(f"{shown} is not an identity of the form 'Name <email>'; {_fix(given_as)}")
    if is_placeholder(match.group("email")):
        raise SeriesError(f"{shown} has an @invalid placeholder address; {_fix(given_as)}")
    return match.group("name"), match.group("email")


def _fix(given_as: str) -> str:
    if given_as == "--author":
        return "pass --author 'Your Name <you@example.com>'"
    return f"set {given_as} to 'Your Name <you@example.com>', or unset it to keep the commits' own authors"


def refuse_another_base(repo: Path, pin: Pin, ws: Workspace) -> None:
    """Refuse to export ``repo`` into a series whose ``base.toml`` pins another base than its branch ``base``: the
    series would be replaced by patches against that other base (the sdist tree's export over the forward series).
    The base is known by the record ``edit`` wrote, else by its commit (the
    pinned commit, the sdist's base commit, or the tag of the pinned release in the person's own clone)."""
    record = BaseRecord.read(repo)
    commit = git("rev-parse", "--verify", "--quiet", f"{BASE_REF}^{{commit}}", cwd=repo, check=False).stdout.strip()
    if not commit:
        return  # no branch base: export_series says so
    if record is not None:
        if record.base == pin.identity and (not pin.commit or commit == pin.commit):
            return
        where = f"{record.base}, for {record.patches}"
        remedy = f"export it into that series ({ws.command_on(record.patches, 'export', '--tree', repo)})"
    else:
        tagged = git("rev-parse", "--verify", "--quiet", f"refs/tags/{pin.tag}^{{commit}}", cwd=repo, check=False)
        if commit and commit in (pin.commit or pin.base_commit, tagged.stdout.strip() if pin.tag else ""):
            return
        where = f"commit {commit[:12]}"
        remedy = f"export it into the series of its base (--patches DIR), or tag its base if it is {pin.where}"
    raise SeriesError(
        f"the base of {repo} is {where}, but {ws.pin_file} pins {pin.identity}: exporting would replace that series "
        f"with patches against another base; {remedy}, or make a tree for this series ({ws.command('edit')}); nothing "
        "was written"
    )


def _refuse_work_beyond(worktree: Path, branch: str, label: str) -> None:
    """Refuse a worktree whose HEAD holds commits on top of the exported branch that export would silently leave out
    (a ``git checkout -b wip`` or a detached HEAD, committed on)."""
    head = git("symbolic-ref", "--quiet", "HEAD", cwd=worktree, check=False).stdout.strip()
    if head == branch:
        return
    if git("merge-base", "--is-ancestor", branch, "HEAD", cwd=worktree, check=False).returncode != 0:
        return  # another line of work, not built on this branch
    beyond = out("rev-list", f"{branch}..HEAD", cwd=worktree).split()
    if beyond:
        where = f"branch {head.removeprefix('refs/heads/')}" if head else "a detached HEAD"
        raise SeriesError(
            f"{worktree} has {len(beyond)} commit(s) on {where}, on top of {label}, which export would leave out; put "
            f"them on {label} ({shell('git', '-C', worktree, 'branch', '-f', label, 'HEAD')}) and export again, or "
            "export that branch (--branch NAME)"
        )


def _refuse_what_am_cannot_apply(repo: Path, commits: str, base_label: str) -> None:
    """Refuse a commit that changes no file (its patch would have no diff, which ``git am`` and the series' reader
    refuse), and a commit message with a line where ``git am`` ends the message and looks for the diff (``---``,
    ``diff -``, ``Index: ``): applied, the patch would lose the rest of its message, and be drift for good."""
    rebase = shell("git", "-C", repo, "rebase", "-i", base_label)
    for commit in out("rev-list", "--reverse", commits, cwd=repo).split():
        message = git("cat-file", "commit", commit, cwd=repo).stdout.split("\n\n", 1)[-1]
        subject = message.split("\n", 1)[0]
        if git("diff-tree", "--quiet", "-r", commit, cwd=repo, check=False).returncode == 0:
            raise SeriesError(
                f"commit {commit[:12]} ({subject}) changes no file: its patch would have no diff, which `git am` "
                f"cannot apply; drop it ({rebase}, `drop`); nothing was written"
            )
        body = message.split("\n\n", 1)[1] if "\n\n" in message else ""  # the first paragraph is the subject
        cut = next((line for line in body.splitlines() if _ends_message(line)), None)
        if cut is not None:
            raise SeriesError(
                f"commit {commit[:12]} ({subject}) has the line {cut!r} in its message, where `git am` ends a message "
                f"and starts the diff: applied, the patch would lose the rest of it; reword it ({rebase}, `reword`), "
                "e.g. indent that line; nothing was written"
            )


def _ends_message(line: str) -> bool:
    """Whether ``git am`` (git mailinfo's ``patchbreak``) takes ``line`` of a message for the start of the diff."""
    if line.startswith(("diff -", "Index: ")):
        return True
    if not line.startswith("---"):
        return False
    rest = line[3:]
    return (rest.startswith(" ") and rest[1:2] not in ("", " ", "\t")) or not rest.strip()


def is_placeholder(identity: str) -> bool:
    """Whether an identity's address is in the reserved ``.invalid`` domain (``series@invalid``)."""
    domain = identity.strip().rstrip(">").rsplit("@", 1)[-1].lower()
    return "@" in identity and (domain == "invalid" or domain.endswith(".invalid"))


def _from(patch: Path) -> str:
    match = author_header(patch.read_text(errors=ENCODING_ERRORS))
    return " ".join(match.group("identity").split()) if match else ""


def _authored(repo: Path, base: str, branch: str, author: str, tmp: str) -> tuple[Path, str]:
    """A scratch clone holding ``base..branch`` re-committed with ``author`` (messages, trees and author dates kept),
    and the range of those commits; ``repo`` itself is not changed."""
    name, email = parse_identity(author)
    scratch = Path(tmp) / "authored"
    git("clone", "--quiet", "--shared", "--no-checkout", repo, scratch)
    commits = out("rev-list", "--reverse", f"{base}..{branch}", cwd=repo).split()
    start = parent = out("rev-parse", f"{commits[0]}^", cwd=repo)
    for commit in commits:
        message = git("cat-file", "commit", commit, cwd=repo).stdout.split("\n\n", 1)[1]
        date = out("log", "-1", "--format=%ad", "--date=raw", commit, cwd=repo)
        identity = {**TOOL_IDENTITY, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
        tree = out("rev-parse", f"{commit}^{{tree}}", cwd=repo)
        parent = git("commit-tree", tree, "-p", parent, cwd=scratch, env=identity, stdin=message).stdout.strip()
    return scratch, f"{start}..{parent}"


def _refuse_overwriting_unlisted(patches_dir: Path, staging: Path, unlisted: list[str]) -> None:
    """A file an export would write over that ``series`` does not list is a contributor's: refuse to change it."""
    clobbered = [
        name
        for name in unlisted
        if (patches_dir / name).exists() and (patches_dir / name).read_bytes() != (staging / name).read_bytes()
    ]
    if clobbered:
        raise SeriesError(
            f"export would overwrite {', '.join(clobbered)}, which series does not list (a file of yours?); move "
            f"it out of {patches_dir} and re-run"
        )


def _refuse_losing(
    repo: Path, base: str, branch: str, patches_dir: Path, staging: Path, names: list[str], listed: list[str],
    droppable: tuple[str, ...],
) -> None:  # fmt: skip
    """Refuse an export that would remove or overwrite a file ``series`` lists that no export can be shown to have
    written (:mod:`patchseries.ownership`); a patch that only loses its hunks for the ``droppable`` files its base
    lacks (``--drop-missing``) is replaced by its export."""
    consented = [n for n in names if droppable and _drops_only(patches_dir / n, staging / n, repo, base, droppable)]
    at_stake = [name for name in listed if name not in consented]
    written = [staging / name for name in names]
    lost = unexported(patches_dir, at_stake, written, repo, base, branch, lambda commit: _exported(repo, commit))
    if lost:
        raise SeriesError(_losing(lost, repo, branch, base.removeprefix("refs/heads/")))


def _exported(repo: Path, commit: str) -> bytes:
    """The bytes an export without ``--author`` writes for ``commit`` of ``repo``."""
    return format_one(repo, commit).encode(errors=ENCODING_ERRORS)


def _drops_only(old: Path, new: Path, repo: Path, base: str, lacks: tuple[str, ...]) -> bool:
    """Whether the patch ``new`` is ``old`` less its hunks for files ``base`` of ``repo`` lacks, and nothing else:
    what ``--drop-missing`` allows an export to drop (compared as the drift check compares)."""
    try:
        lost = [p for p in parse_patch(old).touched_existing if p.startswith(lacks) and not has_path(repo, p, base)]
    except (SeriesError, OSError):
        return False
    texts = [path.read_text(errors=ENCODING_ERRORS) for path in (old, new)]
    return bool(lost) and _comparable(texts[0], lost) == _comparable(texts[1], [])


def _losing(lost: list[Unexported], repo: Path, branch: str, base_label: str) -> str:
    """The refusal of an export that would remove or overwrite files of ``lost``, naming the first and its remedies
    (each runs as written): put a patch of the person's on the branch, or keep a copy of the file."""
    first, label = lost[0], branch.removeprefix("refs/heads/")
    others = [u.path.name for u in lost[1:]]
    more = f" (and {len(others)} more: {', '.join(others[:3])}{', ...' if len(others) > 3 else ''})" if others else ""
    keep = f"keep a copy of it ({shell('cp', first.path, kept_path(first.path))}) and export again"
    if first.on_branch:
        why = f"its change is commit {first.on_branch[:12]} of {label}, whose patch differs from it (edited by hand?)"
        remedy = f"to keep your edits, make them on {label} first (git rebase -i {base_label}), or {keep}"
    else:
        why = "a patch of yours?"
        checked_out = git("symbolic-ref", "--quiet", "HEAD", cwd=repo, check=False).stdout.strip() == branch
        am = f" ({shell('git', '-C', repo, 'am', '--3way', first.path)})" if checked_out else " (git am)"
        remedy = f"put it on {label}{am} and export again, or {keep}"
    return (
        f"export would {'overwrite' if first.overwritten else 'remove'} {first.path}{more}, which series lists but "
        f"which neither an export of branch {label} of {repo} wrote nor git holds: {why}; {remedy}; nothing was written"
    )


def format_one(repo: Path, commit: str) -> str:
    """The patch file that :func:`export_series` writes for ``commit`` (empty for a merge or an empty commit)."""
    return git(*_FORMAT_CONFIG, "format-patch", *FORMAT_PATCH_OPTIONS, "--stdout", "-1", commit, cwd=repo).stdout


@dataclass
class DriftReport:
    """What the drift check found: ``problems`` fail it; ``unchecked`` lists, per patch, the paths this base lacks."""

    problems: list[str] = field(default_factory=list)
    unchecked: dict[str, list[str]] = field(default_factory=dict)


def drift_report(
    base_repo: Path,
    patches: list[Patch],
    patches_dir: Path,
    lacks: tuple[str, ...] = (),
    base: str = BASE_REF,
    reexport: str = tool_command("export"),
) -> DriftReport:
    """Re-apply the committed patches to a scratch clone of the base, re-export them, and list every difference.

    Each patch must also apply with no whitespace error (``git apply --check --whitespace=error``). On a base that
    lacks some upstream paths (``lacks``: the sdist has no ``docs/`` or upstream ``tests/``), the hunks for files the
    base does not have are left out, as :func:`patchseries.apply.apply_series` leaves them out, and reported as
    unchecked: the commit message and every other hunk must still equal a fresh export, byte for byte. Checking on a
    full upstream tree (``lacks=()``) checks everything. ``reexport``: the command that writes the series again, as
    each problem names it (with the run's own options: ``patchseries.cli``).
    """
    if git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", cwd=base_repo, check=False).returncode != 0:
        raise SeriesError(f"{base_repo} has no {base!r} to check the series against; fetch it (git fetch --tags)")
    report = DriftReport()
    with tempfile.TemporaryDirectory(prefix="patchseries-drift-") as tmp:
        scratch = Path(tmp) / "tree"
        git("clone", "--quiet", "--shared", "--no-checkout", base_repo, scratch)
        base_commit = out("rev-parse", f"{base}^{{commit}}", cwd=base_repo)
        git("branch", "--quiet", "drift-base", base_commit, cwd=scratch)
        git("checkout", "--quiet", "-b", "drift-check", base_commit, cwd=scratch)
        applied: list[Patch] = []
        for patch in patches:
            left_out = [p for p in patch.touched_existing if p.startswith(lacks) and not has_path(scratch, p)]
            if left_out:
                report.unchecked[patch.name] = left_out
            if len(left_out) == len(patch.changes):
                continue
            excludes = [f"--exclude={path}" for path in left_out]
            source = patch.path
            if has_crlf(patch.path):  # `git am` strips the CRs, `git apply` does not: check the rest on LF
                report.problems.append(crlf_problem(patch.path, reexport))
                source = Path(tmp) / patch.name
                source.write_bytes(patch.path.read_bytes().replace(b"\r\n", b"\n"))
            # cr-at-eol: a file's CRLF line endings are its own, no whitespace error
            check = git("-c", "core.whitespace=cr-at-eol", "apply", "--check", "--whitespace=error", *excludes, source,
                        cwd=scratch, check=False)  # fmt: skip
            if check.returncode != 0:
                reason = (check.stderr.strip().splitlines() or ["does not apply"])[-1]
                report.problems.append(f"{patch.name}: {reason}")
                return report
            git("am", "--quiet", "--committer-date-is-author-date", *keep_cr(source), *excludes, source, cwd=scratch,
                env=TOOL_IDENTITY)  # fmt: skip
            applied.append(patch)
        exported = Path(tmp) / "exported"
        exported.mkdir()
        export_series(scratch, exported, branch="drift-check", base="drift-base")
        report.problems += _differences(patches, applied, patches_dir, exported, report.unchecked, reexport)
    return report


def _differences(
    patches: list[Patch],
    applied: list[Patch],
    patches_dir: Path,
    exported: Path,
    unchecked: dict[str, list[str]],
    reexport: str,
) -> list[str]:
    committed = [p.name for p in applied]
    fresh = sorted(p.name for p in exported.glob("*.patch"))
    renumbered = applied != patches  # a patch that changes only files this base lacks was skipped: numbers moved
    strip = 5 if renumbered else 0
    if [c[strip:] for c in committed] != [f[strip:] for f in fresh]:
        return [f"patch names differ from a fresh export: {committed} vs {fresh}"]
    problems = []
    for name, fresh_name in zip(committed, fresh, strict=True):
        old, new = (
            (folder / n).read_text(errors=ENCODING_ERRORS)
            for folder, n in ((patches_dir, name), (exported, fresh_name))
        )
        left_out = unchecked.get(name)
        if (_comparable(old, left_out) != _comparable(new, [])) if left_out else old != new:
            keep = shell("cp", patches_dir / name, kept_path(patches_dir / name))  # export refuses to lose its bytes
            problems.append(
                f"{name} differs from a fresh export; keep a copy and re-export it with `{keep} && {reexport}`"
            )
    series = (patches_dir / "series").read_bytes().decode()  # as it is: read_text() would turn CRLF into LF
    if "\r" in series:
        problems.append(crlf_problem(patches_dir / "series", reexport, name="series file"))
    elif renumbered:  # the fresh series lacks the skipped patches: check the committed one's form instead
        numbered = [f"{i:04d}-" for i in range(1, len(patches) + 1)]
        expected = SERIES_HEADER + "".join(f"{p.name}\n" for p in patches)
        if [p.name[:5] for p in patches] != numbered or series != expected:
            problems.append(f"series file or patch numbers differ from what export writes; re-export with `{reexport}`")
    elif series != (exported / "series").read_text():
        problems.append(f"series file differs from a fresh export; re-export with `{reexport}`")
    return problems


def _comparable(text: str, left_out: list[str]) -> tuple[str, list[str]]:
    """A patch's message and its per-file diffs, less those of ``left_out``.

    The diffstat is dropped: it counts the left-out files too.
    """
    head, _, rest = text.partition("\n---\n")
    sections = file_sections(rest)
    return head, [section for section in sections if section_path(section) not in left_out]
