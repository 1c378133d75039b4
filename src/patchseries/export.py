"""Regenerate ``patches/`` from a branch, guarded by git, and prove the committed patches are a faithful export."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from patchseries import interrupts, series
from patchseries.errors import SeriesError
from patchseries.gitcmd import ENCODING_ERRORS, TOOL_IDENTITY, commit_of, git, out, uncommitted_files, worktrees
from patchseries.paths import Workspace, kept_path, shell, tool_command
from patchseries.pin import Pin
from patchseries.progress import Log, quiet
from patchseries.series import EXPORT_STAGING, RECORD, Patch, blob_id, cut_short, dropped_hunks, has_crlf, trailers
from patchseries.trees import BASE_REF, TOOL_ATTRIBUTES, BaseRecord, fetch_advice, hold, refuse_operation_in_progress
from patchseries.trees import held as held_by

AUTHOR_ENV = "PATCHSERIES_AUTHOR"  # the author of every written patch when --author is not given
# no control character: git drops a newline from a name (`Eve\nBcc: x` would become `EveBcc: x`)
_IDENTITY = re.compile(r"^(?P<name>[^<>\x00-\x1f]*[^<>\s])\s*<(?P<email>[^<>\s@]+@[^<>\s@]+)>$")


def export_series(
    repo: Path, patches_dir: Path, branch: str, base: str = BASE_REF, lacks: tuple[str, ...] = (),
    drop_lacking: bool = False, author: str | None = None, refuse_placeholder_authors: bool = False,
    edit: str = tool_command("edit"), log: Log = quiet, writer: str = "",
) -> list[str]:  # fmt: skip
    """Write ``base..branch`` as patches and ``series`` into ``patches_dir``, renamed in; what it replaces is kept."""
    repo, patches_dir = repo.resolve(), patches_dir.resolve()
    refuse_operation_in_progress(repo)  # a stopped `git rebase -i` has not moved the branch yet
    branch = branch if branch.startswith("refs/") else f"refs/heads/{branch}"  # never a tag named so
    label, base_label = branch.removeprefix("refs/heads/"), base.removeprefix("refs/heads/")  # as git names them
    if git("check-ref-format", branch, check=False).returncode != 0:
        raise SeriesError(f"--branch {label!r} is not a branch name; pass the name of a branch of {repo}")
    if not commit_of(repo, branch):
        raise SeriesError(f"{repo} has no branch {label!r}; make a tree with `{edit}`, or pass --branch")
    if not commit_of(repo, base):
        raise SeriesError(f"{repo} has no branch {base_label!r} to export the series against; export from a tree that "
                          f"`{edit}` made (its branch base is the pinned release)")  # fmt: skip
    if not _is_ancestor(repo, base, branch):
        raise SeriesError(f"{label} of {repo} is not built on {base_label!r} (the pinned base): its patches would not "
                          f"apply to it; rebase it onto {base_label}, then export; nothing was written")  # fmt: skip
    if out("rev-list", "--merges", f"{base}..{branch}", cwd=repo):
        raise SeriesError(f"{base_label}..{label} contains merge commits; a patch series must be linear (rebase it)")
    if not out("rev-list", f"{base}..{branch}", cwd=repo):
        raise SeriesError(f"branch {label!r} has no commits on top of {base_label!r}; nothing to export")
    for worktree in worktrees(repo):
        _refuse_work_outside(worktree, repo, branch, label, base_label)
    rebase = shell("git", "-C", repo, "rebase", "-i", base_label)  # where a commit is dropped or reworded
    authors = out("log", "--format=%an <%ae>", f"{base}..{branch}", cwd=repo).splitlines()  # as format-patch writes
    placeholder = next((a for a in authors if is_placeholder(a)), None) if refuse_placeholder_authors else None
    if placeholder and author is None:  # parse_identity refuses a placeholder --author
        raise SeriesError(f"patches would have the placeholder author {placeholder}; pass --author 'Name <email>' (or "
                          f"set {AUTHOR_ENV}), or commit with your own identity; nothing was written")  # fmt: skip
    patches_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=EXPORT_STAGING, dir=patches_dir) as made:
        staging = Path(made)
        source, commits = (repo, f"{commit_of(repo, base)}..{commit_of(repo, branch)}")  # read once: a branch may move
        if author is not None:
            source, commits = _authored(repo, base, branch, author, staging / "authored")
        written = dict(series.format_patches(source, commits, staging))  # name: blob id; the series file last
        names = [*written][:-1]
        interrupts.stage("export-staged")
        given = "{} <{}>".format(*parse_identity(author)) if author else ""  # as written, not as git stored it
        _refuse_am_misreads(source, commits, staging, names, rebase, given)
        committed = series.read_series(patches_dir / "series") if lacks and (patches_dir / "series").is_file() else []
        if not drop_lacking and (dropped := dropped_hunks(repo, base, committed, lacks, [staging / n for n in names])):
            raise SeriesError(f"export would drop {'; '.join(dropped)}: the base of {repo} lacks those files (the "
                              "sdist ships no docs/ or upstream tests/), so applying left those hunks out. Make the "
                              f"change in a tree of an upstream base ({edit} --git, or --checkout PATH instead of "
                              "--git) and export it (--tree, the path edit prints), or pass --drop-missing to drop "
                              "them")  # fmt: skip
        wrote = f"{blob_id(writer.encode())} {series.WRITER}\n" * bool(writer)  # forward's checkout, as (name, blob)
        (staging / RECORD).write_text("".join(f"{blob} {name}\n" for name, blob in written.items()) + wrote)
        removed = [name for name in series.listed_names(patches_dir / "series") if name not in written]
        held = {*last_held(repo, patches_dir, writer), *written.items()}
        if lost := unkept(patches_dir, [*removed, *written], held):
            _refuse_losing(patches_dir, lost)
        scope = [*removed, *written] if held_by(repo) is not None else removed  # noted if not held; no record: removals
        unseen = [n for n in scope if (f := patches_dir / n).is_file() and (n, blob_id(f.read_bytes())) not in held]
        hold(repo, held)  # until the switch is done: a killed one leaves old and new files, both held
        _switch(patches_dir, staging, [*written, RECORD], removed)
        hold(repo, set(written.items()))
    for leftover in cut_short(patches_dir):  # a killed export's, once the series is whole again (the lock is held)
        shutil.rmtree(leftover)
    if unseen:
        in_git = sorted({*written, *removed} & {*series.committed_blobs(patches_dir)})
        restore = f"; `{shell('git', '-C', patches_dir, 'checkout', 'HEAD', '--', *in_git)}` puts back what git held"
        log(f"note: replaced or removed {', '.join(unseen)}, which the tree exported did not hold (a change committed "
            f"since it was made, or by hand){restore * bool(in_git)}")  # fmt: skip
    return names


def last_held(tree: Path | None, folder: Path, writer: str = "") -> set[tuple[str, str]]:
    """What an export may replace besides git's: what ``tree``'s record holds, or forward's last from ``writer``."""
    if not writer:
        return (held_by(tree) if tree is not None else None) or set()
    return last if (series.WRITER, blob_id(writer.encode())) in (last := series.recorded_blobs(folder)) else set()


def unkept(folder: Path, names: list[str], held: set[tuple[str, str]]) -> list[str]:
    """The files ``names`` of ``folder`` whose bytes (line endings aside) neither git (HEAD), ``held`` (``last_held``)
    nor another file of ``folder`` (``cp F F.mine``; a link holds nothing of its own) holds."""
    held = held | set(series.committed_blobs(folder).items())
    others = [p for p in folder.iterdir() if p.name not in names and p.is_file() and not p.is_symlink()]
    kept = {blob_id(p.read_bytes()) for p in others}

    def holds(name: str) -> bool:  # its bytes, or as they were before a conversion to CRLF
        data = (folder / name).read_bytes()
        return any(b in kept or (name, b) in held for b in (blob_id(data), blob_id(data.replace(b"\r\n", b"\n"))))

    return [name for name in names if (folder / name).is_file() and not holds(name)]


def _refuse_losing(folder: Path, lost: list[str]) -> None:  # files of a person's (unkept): the remedy commits them
    # a folder in no repository, or one its repository ignores, is committed in a repository of its own
    tracked = git("-C", folder, "rev-parse", check=False).returncode == 0
    ignored = tracked and git("-C", folder, "check-ignore", "-q", ".", check=False).returncode == 0
    init = [] if tracked and not ignored else [("init", "-q")]
    add = [("add", "-A", "."), ("add", "-f", "--", *lost)]  # what an ignore rule (``*.patch``) hides, by name
    steps = [*init, *add, ("commit", "-q", "-m", "My series changes", "--", ".")]
    commit = " && ".join(shell("git", "-C", folder, *step) for step in steps)
    more = f" (and {len(lost) - 1} more: {', '.join(lost[1:4])})" if len(lost) > 1 else ""
    raise SeriesError(f"export would overwrite or remove {folder / lost[0]}{more}, changes of yours "
                      "that git does not hold (a patch of yours, a hand edit?); commit them "
                      f"(`{commit}`) and re-run; nothing was written")  # fmt: skip


def _switch(folder: Path, staging: Path, written: list[str], removed: list[str]) -> None:
    """Rename ``written`` in, then remove ``removed``; an interrupt puts back what was there (hard links in staging)."""
    (old := staging / "old").mkdir()
    for name in (name for name in [*written, *removed] if (folder / name).is_file()):
        os.link(folder / name, old / name)
    # meanwhile the record names the old and the new files: a run killed halfway leaves none of them "yours"
    (staging / "both").write_bytes(b"".join(r.read_bytes() for r in (folder / RECORD, staging / RECORD) if r.is_file()))
    os.replace(staging / "both", folder / RECORD)
    try:
        for name in written:
            os.replace(staging / name, folder / name)
            interrupts.stage("export-switch")
        for name in (name for name in removed if (folder / name).is_file()):
            (folder / name).unlink()  # only a file: a folder the series names is none of export's
    except BaseException:
        for name in [*written, *removed]:
            if (old / name).is_file():
                os.replace(old / name, folder / name)
            elif name in written:
                (folder / name).unlink(missing_ok=True)
        raise


def parse_identity(text: str, given_as: str = "--author") -> tuple[str, str]:
    """``Name <email>`` -> ``(name, email)``; a refusal names where ``text`` came from (``given_as``)."""
    if (match := _IDENTITY.match(text.strip())) and not is_placeholder(match["email"]):
        return match["name"], match["email"]
    shown, fix = (f"--author {text!r}", "pass --author 'Your Name <you@example.com>'")
    if given_as != "--author":
        shown = f"{given_as}={text!r}"
        fix = f"set {given_as} to 'Your Name <you@example.com>', or unset it to keep the commits' own authors"
    why = "has an @invalid placeholder address" if match else "is not an identity of the form 'Name <email>'"
    raise SeriesError(f"{shown} {why}; {fix}")


def refuse_another_base(repo: Path, pin: Pin, ws: Workspace, edit: str, branch: str = "series") -> None:
    """Refuse to export ``repo`` into a series of another base (by ``edit``'s record, else by its branch ``base``)."""
    record = BaseRecord.read(repo)
    refuse_operation_in_progress(repo)  # a stopped rebase first: the base check would name another remedy
    if not (commit := commit_of(repo, BASE_REF)):
        return  # no branch base: export_series says so
    if record is not None and record.commit not in ("", commit):  # a commit on base would be in no patch
        raise SeriesError(f"the branch base of {repo} moved since the tool made the tree ({record.commit[:12]} -> "
                          f"{commit[:12]}): the commits on it would be in no patch; put {branch} on it and base back "
                          f"({_onto_series(repo, record.commit, branch)}), so that they are exported as its patches, "
                          "and export again; nothing was written")  # fmt: skip
    if record is not None:
        if record.base == pin.identity and (not pin.commit or commit == pin.commit):
            return
        where = f"{record.base}, for {record.patches}"
        other = Path(record.patches) != ws.patches and "--force-base" not in record.base  # it has no series to go to
        remedy = f"export it into that series ({ws.command_on(record.patches, 'export', '--tree', repo)})" * other
    else:
        if commit in (pin.commit or pin.base_commit, commit_of(repo, f"refs/tags/{pin.tag}") if pin.tag else ""):
            return
        where = f"commit {commit[:12]}"
        remedy = f"export it into the series of its base (--patches DIR), or tag its base if it is {pin.where}"
    raise SeriesError(f"the base of {repo} is {where}, but {ws.pin_file} pins {pin.identity}: exporting would replace "
                      f"that series with patches against another base; {remedy}{', or ' * bool(remedy)}make a tree for "
                      f"this series ({edit}); nothing was written")  # fmt: skip


def _refuse_work_outside(worktree: Path, exported: Path, branch: str, label: str, base_label: str) -> None:
    """Refuse uncommitted changes, commits on top of ``branch`` and, in the tree exported, forked off it."""
    if dirty := uncommitted_files(worktree, user_config=True):  # what the person's own gitignore hides is not work
        shown = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        raise SeriesError(f"{worktree} has uncommitted changes ({shown}), which export would leave out; "
                          f"commit them on {label} (git commit, or git commit --fixup and git rebase -i "
                          f"--autosquash {base_label}) or stash them, then export")  # fmt: skip
    if (head := _head(worktree)) == branch or not (beyond := out("rev-list", f"{branch}..HEAD", cwd=worktree).split()):
        return
    where = f"branch {head.removeprefix('refs/heads/')}" if head else "a detached HEAD"
    if not _is_ancestor(worktree, branch, "HEAD"):  # forked off it: in the tree exported, not another checkout of it
        fork = git("merge-base", "HEAD", branch, cwd=worktree, check=False).stdout.strip()
        if worktree != exported or head and (not fork or _is_ancestor(worktree, fork, base_label)):
            return  # a stale test worktree, say; or another series, on a branch
        steps = [] if head else [("switch", "-q", "-c", f"kept-{beyond[0][:12]}")]  # a branch holds them, then
        keep = " && ".join(shell("git", "-C", worktree, *s) for s in [*steps, ("switch", "-q", "--detach", label)])
        raise SeriesError(
            f"{worktree} has {len(beyond)} commit(s) on {where}, off {label}, which export would leave out; replay "
            f"them on {label} ({shell('git', '-C', worktree, 'rebase', '-q', label)}) and export again, which then "
            f"names how {label} moves to them, or keep them apart ({keep}){', or export that branch' * bool(head)}"
        )
    at = next((w for w in worktrees(worktree) if _head(w) == branch), None)  # git moves it there by a merge
    move = ("-C", at, "merge", "-q", "--ff-only", beyond[0]) if at else ("-C", worktree, "branch", "-f", label, "HEAD")
    raise SeriesError(f"{worktree} has {len(beyond)} commit(s) on {where}, on top of {label}, which "
                      f"export would leave out; put them on {label} ({shell('git', *move)}) and export "
                      "again, or export that branch (--branch NAME)")  # fmt: skip


def _onto_series(repo: Path, base: str, branch: str) -> str:  # ``branch`` rebased onto the moved base, where it is
    branch = branch.removeprefix("refs/heads/")
    heads = {_head(w): w for w in reversed(worktrees(repo))}  # the main worktree's checkout first
    at = heads.get(f"refs/heads/{branch}", repo)
    moves = [(at, "checkout", "-q", branch)] if at == repo else []  # off base, if that is checked out here
    if (on_base := heads.get("refs/heads/base")) is not None and not (moves and on_base == repo):
        moves.append((on_base, "checkout", "-q", "--detach"))  # git moves no branch checked out
    steps = [*moves, (at, "rebase", "-q", "base"), (repo, "branch", "-f", "base", base)]
    return " && ".join(shell("git", "-C", *step) for step in steps)


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return git("merge-base", "--is-ancestor", older, newer, cwd=repo, check=False).returncode == 0


def _head(worktree: Path) -> str:  # the branch checked out there, "" for a detached HEAD
    return git("symbolic-ref", "--quiet", "HEAD", cwd=worktree, check=False).stdout.strip()


def _refuse_am_misreads(source: Path, commits: str, staging: Path, names: list[str], rebase: str, author: str) -> None:
    """Refuse a patch from which ``git am`` (mailsplit, mailinfo, stripspace) would not make its commit again."""
    for commit, name in zip(out("rev-list", "--reverse", commits, cwd=source).split(), names, strict=True):
        made, _, raw = git("log", "-1", "--format=format:%an <%ae>%n%B", commit, cwd=source).stdout.partition("\n")
        raw += "\n" * (not raw.endswith("\n"))  # git am ends a message with a newline: no patch differs for it
        if not (staging / name).stat().st_size:  # format-patch writes nothing for it
            raise SeriesError(f"commit {commit[:12]} ({raw.partition(chr(10))[0]}) changes no file: git am cannot "
                              f"apply its patch, which has no diff; drop it ({rebase}, `drop`)")  # fmt: skip
        fields, message, count, _ = series.am_reads(staging / name, cwd=source, within=staging)
        message = message.encode(errors=ENCODING_ERRORS).decode(errors="replace")  # git commits no other bytes as such
        read = {"author": f"{fields.get('Author')} <{fields.get('Email')}>", "subject": message.partition("\n")[0],
                "message": message.partition("\n")[2] + "\n" * (count != 1)}  # fmt: skip
        wrote = {"author": author or made, "subject": raw.partition("\n")[0], "message": raw.partition("\n")[2]}
        if differ := [key for key in read if read[key] != wrote[key]] or ["subject"] * (not raw.strip()):
            fix = f"reword it ({rebase}, `reword`), e.g. indent such a line, or drop a subject's [tag]"
            if differ == ["author"]:  # a name mailinfo cuts (quotes): the commit's, --author's or PATCHSERIES_AUTHOR's
                fix = f"use an author `git am` reads back as written (--author or {AUTHOR_ENV}, or amend the commit's)"
            raise SeriesError(
                f"commit {commit[:12]} ({wrote['subject']}): `git am` would read its patch's {' and '.join(differ)} "
                f"otherwise ({read[differ[0]][:60]!r}: it drops a subject's leading [tag], Re: or spaces, joins its "
                "lines, folds spaces and blank lines, takes From:/Date: lines that start a message as headers, ends a "
                f"message at a line ---, diff - or Index: and a mail at 'From <word> <date>'); {fix}; nothing was "
                "written"
            )
        trailers(message, f"commit {commit[:12]} ({wrote['subject']})")  # as status, forward and wheels read them


def is_placeholder(identity: str) -> bool:  # whether an address is in the reserved .invalid domain (series@invalid)
    domain = identity.strip().rstrip(">").rsplit("@", 1)[-1].lower()
    return "@" in identity and (domain == "invalid" or domain.endswith(".invalid"))


@contextmanager
def scratch_clone(repo: Path, commit: str, scratch: Path) -> Iterator[Path]:
    """A clone of ``repo`` (objects shared) at ``commit`` in a fresh folder of ``scratch``, which the lock empties."""
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        git("clone", "--quiet", "--shared", "--no-checkout", repo, tree := Path(tmp) / "tree")
        (tree / ".git/info").mkdir(exist_ok=True)
        (tree / ".git/info/attributes").write_text(TOOL_ATTRIBUTES)
        git("checkout", "--quiet", "--detach", commit, cwd=tree)
        yield tree


def _authored(repo: Path, base: str, branch: str, author: str, scratch: Path) -> tuple[Path, str]:
    name, email = parse_identity(author)
    git("clone", "--quiet", "--shared", "--no-checkout", repo, scratch)
    commits = out("rev-list", "--reverse", f"{base}..{branch}", cwd=repo).split()
    start = parent = out("rev-parse", f"{commits[0]}^", cwd=repo)
    for commit in commits:
        message = git("log", "-1", "--format=format:%B", commit, cwd=repo).stdout  # in UTF-8, as the name
        date, tree = out("log", "-1", "--format=%ad", "--date=raw", commit, cwd=repo), f"{commit}^{{tree}}"
        identity = {**TOOL_IDENTITY, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
        parent = git("commit-tree", tree, "-p", parent, cwd=scratch, env=identity, stdin=message).stdout.strip()
    return scratch, f"{start}..{parent}"


@dataclass
class DriftReport:  # what the drift check found: problems fail it; unchecked lists, per patch, paths the base lacks
    problems: list[str] = field(default_factory=list)
    unchecked: dict[str, list[str]] = field(default_factory=dict)


def drift_report(
    base_repo: Path, patches: list[Patch], patches_dir: Path, scratch: Path, lacks: tuple[str, ...] = (),
    base: str = BASE_REF, reexport: str = tool_command("export"), held: set[tuple[str, str]] | None = None,
) -> DriftReport:  # fmt: skip
    """The patches against a fresh export of them; then ``reexport``, copying what its export (``held``) refuses."""
    if not (base_commit := commit_of(base_repo, base)):
        raise SeriesError(f"{base_repo} has no {base!r} to check the series against; {fetch_advice(base_repo)}, re-run")
    report = DriftReport()
    with scratch_clone(base_repo, base_commit, scratch) as work:
        git("checkout", "--quiet", "-b", "drift-check", cwd=work)
        applied: list[Patch] = []
        for patch in patches:
            if left_out := [p for p in patch.touched_existing if p.startswith(lacks) and not (work / p).exists()]:
                report.unchecked[patch.name] = left_out
            if len(left_out) == len(patch.changes):
                continue
            excludes, source = [f"--exclude={path}" for path in left_out], patch.path
            if has_crlf(patch.path):  # `git am` strips the CRs, `git apply` does not: check the rest on LF
                report.problems.append(series.crlf_problem(patches_dir / patch.name))
                (source := work.parent / patch.name).write_bytes(patch.path.read_bytes().replace(b"\r\n", b"\n"))
            # cr-at-eol: a file's own CRLF line endings are no whitespace error
            check = git("-c", "core.whitespace=cr-at-eol", "apply", "--check", "--whitespace=error", *excludes, source,
                        cwd=work, check=False)  # fmt: skip
            if check.returncode != 0:
                report.problems.append(f"{patch.name}: {(check.stderr.strip().splitlines() or ['does not apply'])[-1]}")
                return report
            git("am", "--quiet", "--keep-cr", *excludes, source, cwd=work, env=TOOL_IDENTITY)  # LF now: its own CRs
            applied.append(patch)
        export_series(work, exported := work.parent / "exported", branch="drift-check", base=base_commit)
        report.problems += _differences(patches, applied, patches_dir, exported, report.unchecked)
        made = series.recorded_blobs(exported)  # what a tree `edit` makes of the series holds
    if report.problems:  # the copies the remedy's export makes (with no tree: of a tree edit makes)
        names = {"series", *(p.name for p in patches), *(f.name for f in patches_dir.glob("*.patch"))}  # may go
        mine = unkept(patches_dir, sorted(names), made if held is None else held)
        fix = " && ".join([*(shell("cp", patches_dir / n, kept_path(patches_dir / n)) for n in mine), reexport])
        report.problems.append(f"to write the series again (a copy of each file changed by hand kept): `{fix}`")
    return report


def _differences(patches: list[Patch], applied: list[Patch], patches_dir: Path, exported: Path,
                 unchecked: dict[str, list[str]]) -> list[str]:  # fmt: skip
    """The applied patches against a fresh export, numbers aside (the skipped moved them), then the series file."""
    fresh = sorted(exported.glob("*.patch"))
    if [p.name[5:] for p in applied] != [p.name[5:] for p in fresh]:
        return [f"patch names differ from a fresh export: {[p.name for p in applied]} vs {[p.name for p in fresh]}"]
    problems = []
    for patch, new in zip(applied, fresh, strict=True):
        left_out = unchecked.get(patch.name, [])
        old, now = (path.read_bytes().decode(errors=ENCODING_ERRORS) for path in (patch.path, new))  # CRs as they are
        if not has_crlf(patch.path) and _comparable(old, left_out) != _comparable(now, left_out):  # CRLF: said once
            problems.append(f"{patch.name} differs from a fresh export")
    text = (patches_dir / "series").read_bytes().decode()  # as it is: read_text() would turn CRLF into LF
    listed = series.SERIES_HEADER + "".join(f"{p.name}\n" for p in patches)
    if "\r" in text:
        problems.append(series.crlf_problem(patches_dir / "series", name="series file"))
    elif [p.name[:5] for p in patches] != [f"{i:04d}-" for i in range(1, len(patches) + 1)] or text != listed:
        problems.append("series file or patch numbers differ from what export writes")
    return problems


def _comparable(patch: str, left_out: list[str]) -> object:
    """A patch as it is, or without its diffstat and the file sections of ``left_out`` (which the stat counts too)."""
    if not left_out:
        return patch
    head, _, rest = patch.partition("\n---\n")
    return head, [section for section in series.file_sections(rest) if series.section_path(section) not in left_out]
