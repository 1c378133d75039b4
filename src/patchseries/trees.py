"""The trees: the pinned base and the series on branch ``series``, built in scratch and renamed into place; the tool's
tree is reused or replaced only while its record describes it, else left as it is; an edit tree is never rewritten."""

from __future__ import annotations

import fnmatch
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchseries import gitcmd
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, add_excludes, failure_cause, git, git_path, has_path, out
from patchseries.interrupts import stage, write_file
from patchseries.paths import Workspace, kept_path, remove, shell
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.series import Patch, dropped_hunks, fingerprint, format_patches, keep_cr

BASE_BRANCH, SERIES_BRANCH = "base", "series"
BASE_REF, SERIES_REF = f"refs/heads/{BASE_BRANCH}", f"refs/heads/{SERIES_BRANCH}"  # never a tag of the same name
EDIT_DIR = "edit"
RECORD = "patchseries-tree"  # in .git of the tool's tree: RECORD_KEYS
RECORD_KEYS = ("source", "fingerprint", "base", "head")  # BaseSource.key, the series', commits of base and series
BASE_RECORD = "patchseries-base"  # in .git of every tree the tool makes: BaseRecord
FILES = "patchseries-files"  # in .git of the tool's tree: the untracked files its runs made, with their digests
_STAGE_WRITES = ("*.egg-info/", "__pycache__/")  # what the tool's installs and tests write anywhere (and build/ atop)
# what building, installing or testing the tree creates: ignored, so that it never makes the tree look modified
BUILD_ARTIFACTS = (*_STAGE_WRITES, "build/", ".pytest_cache/", ".coverage", ".coverage.*", "coverage.xml")
_IN_PROGRESS = {  # what it is, how to finish it, how to abort it
    "rebase-merge": ("a git rebase", "git rebase --continue", "git rebase --abort"),
    "rebase-apply": ("a git am or git rebase", "git am/rebase --continue", "git am/rebase --abort"),
    "MERGE_HEAD": ("a git merge", "git commit", "git merge --abort"),
    "CHERRY_PICK_HEAD": ("a git cherry-pick", "git cherry-pick --continue", "git cherry-pick --abort"),
    "REVERT_HEAD": ("a git revert", "git revert --continue", "git revert --abort"),
    "BISECT_LOG": ("a git bisect", "git bisect reset", "git bisect reset"),
}
TOOL_ATTRIBUTES = "* merge=text !diff -text -ident -filter -working-tree-encoding\n"  # git's merge, the blobs' bytes
_MODE_CHANGE = re.compile(r"(?m)^ ?(?:mode change \d{6} =>|create mode) (\d{6}) (.+)$")  # `git apply --summary`
_FAILED_FILE = re.compile(r"(?:patch failed: |Merge conflict in |error: |for ')([\w./-]+/[\w./-]+)")


@dataclass(frozen=True)
class BaseTree:
    path: Path
    source: str  # "sdist", "checkout" or "git"

    @property
    def base_commit(self) -> str:
        return out("rev-parse", BASE_REF, cwd=self.path)


@dataclass(frozen=True)
class BaseSource:
    kind: str  # "sdist", "checkout" or "git"
    tree_name: str  # <workdir>/trees/<tree_name>, <workdir>/edit/<tree_name>
    key: str  # recorded in the tool's tree: reused only for the same key
    location: str = ""  # the checkout's path or the clone URL
    ref: str = ""  # the commit or tag to build from
    forced: bool = False  # --force-base took a commit that is not the pinned one


@dataclass(frozen=True)
class BaseRecord:  # the pin's base, the series folder and base commit a tree was made for: export writes it only there
    base: str
    patches: str
    commit: str = ""

    @staticmethod
    def read(repo: Path) -> BaseRecord | None:
        fields = _read_json(path, "base", "patches") if (path := _base_record(repo)) else None
        return BaseRecord(fields["base"], fields["patches"], str(fields.get("commit", ""))) if fields else None


def held(repo: Path) -> set[tuple[str, str]] | None:  # the series the tree last held (made from, exported), if known
    fields = _read_json(path) if (path := _base_record(repo)) else None
    seen = fields.get("seen") if isinstance(fields, dict) else None  # [name, blob] pairs; an older tool's: a map
    return None if seen is None else {(name, blob) for name, blob in (seen.items() if isinstance(seen, dict) else seen)}


def hold(repo: Path, series: set[tuple[str, str]]) -> None:  # export wrote ``series`` from ``repo``: its record now
    if path := _base_record(repo):  # a tree edit did not make (a clone) gets one, with that key only
        write_file(path, json.dumps({**(_read_json(path) or {}), "seen": sorted(series)}, sort_keys=True) + "\n")


def _base_record(repo: Path) -> Path | None:  # in the common git directory: one for all worktrees of a tree
    common = git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo, check=False).stdout.strip()
    return Path(common) / BASE_RECORD if common else None


@dataclass
class ApplyResult:
    head: str
    applied: list[str] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    reused: bool = False


def resolve_source(ws: Workspace, pin: Pin, checkout: Path | None, use_git: bool, force_base: bool) -> BaseSource:
    """The base a run uses; a checkout that is not clean or not at the pinned tag (or commit) is refused here."""
    if checkout is not None:
        path, head, forced = _checked_checkout(pin, checkout, force_base)
        return BaseSource("checkout", checkout_tree_name(path, pin), f"checkout {path} {head}", str(path), head, forced)
    if use_git:
        ref = pin.commit or pin.tag
        return BaseSource("git", f"git-{pin.commit[:12] or pin.tag}", f"git {pin.git_url} {ref}", pin.git_url, ref)
    if not pin.sdist_url:
        raise SeriesError(f"this series is pinned to upstream commit {pin.commit[:12]}, which no sdist ships; pass "
                          "--checkout PATH (an upstream clone that has it) or --git")  # fmt: skip
    return BaseSource("sdist", f"sdist-{pin.version}", f"sdist {pin.sdist_sha256}")


def checkout_tree_name(checkout: Path, pin: Pin) -> str:  # a series pinned to a commit (master/) has its own
    key = f"{checkout.resolve()}{f' {pin.commit}' if pin.commit else ''}"
    return f"checkout-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def _checked_checkout(pin: Pin, checkout: Path, force_base: bool) -> tuple[Path, str, bool]:
    checkout = checkout.resolve()
    if not (checkout / ".git").exists():
        raise SeriesError(f"--checkout {checkout} is not a git checkout")
    if gitcmd.uncommitted_files(checkout):
        raise SeriesError(f"--checkout {checkout} has uncommitted changes; commit or stash them first")
    if not (head := gitcmd.commit_of(checkout, "HEAD")):
        need = f"the commit {pin.commit[:12]}" if pin.commit else f"the tag {pin.tag}"
        raise SeriesError(f"--checkout {checkout} has no commits; pass a clone of upstream that has {need}")
    wanted = pin.commit or gitcmd.commit_of(checkout, f"refs/tags/{pin.tag}")
    if force_base:
        return checkout, head, head != wanted
    if pin.commit:  # a series against an upstream commit: that commit of the clone, wherever HEAD is
        if not has_path(checkout, "", pin.commit):
            raise SeriesError(f"--checkout {checkout} does not have the pinned commit {pin.commit[:12]}; "
                              f"{fetch_advice(checkout)}, or pass --force-base to use the clone's HEAD")  # fmt: skip
        return checkout, pin.commit, False
    if head != wanted:
        where = f"tag {pin.tag} is {wanted[:12]}" if wanted else f"it has no tag {pin.tag}"
        raise SeriesError(f"--checkout {checkout} is at {head[:12]}, but {where}; check out {pin.tag} "
                          "or pass --force-base")  # fmt: skip
    return checkout, head, False


def download_sdist(ws: Workspace, pin: Pin, log: Log) -> Path:
    """The sdist in ``downloads/``, checked on every run; a download is moved there once its sha256 matches the pin."""
    target = ws.downloads / pin.sdist_filename
    for folder in (ws.downloads, ws.scratch):
        folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.scratch) as scratch:
        if (sdist := target if target.is_file() else Path(scratch) / pin.sdist_filename) != target:
            log(f"downloading {pin.sdist_url}")
            try:
                with urllib.request.urlopen(pin.sdist_url, timeout=120) as response, sdist.open("xb") as sink:
                    shutil.copyfileobj(response, sink)
                    stage("fetch-download")
            except (OSError, http.client.HTTPException, UnicodeError) as exc:  # what urlopen raises for an address
                raise SeriesError(f"cannot download {pin.sdist_url}: {getattr(exc, 'reason', exc)}") from None
        digest, mismatch = hashlib.sha256(sdist.read_bytes()).hexdigest(), f"sha256 mismatch for {pin.sdist_filename}"
        if digest != pin.sdist_sha256 and sdist != target:
            raise SeriesError(f"{mismatch}: expected {pin.sdist_sha256}, got {digest}; refusing to use it")
        if digest != pin.sdist_sha256:  # kept only after its sha256 matched: another digest is a changed pin or file
            raise SeriesError(f"{mismatch}: the pin says {pin.sdist_sha256}, the download kept in {target} has "
                              f"{digest}; correct the pin, or if the pin is right, move that file away "
                              f"({shell('mv', target, kept_path(target))}) and re-run")  # fmt: skip
        sdist.replace(target)
    return target


def safe_extract(archive: Path, dest: Path) -> None:  # an entry outside ``dest``, a link or a ``.git`` is refused
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (dest / member.name).resolve()
                if not target.is_relative_to(dest.resolve()) or member.issym() or member.islnk():
                    raise SeriesError(f"{archive.name} contains an unsafe entry {member.name!r}")
                if ".git" in Path(member.name).parts:  # its config would be the tree's, and run its commands
                    raise SeriesError(f"{archive.name} contains a git directory entry {member.name!r}; refusing it")
                # never the packager's ids: run as root, tarfile would chown to them, and git refuses the tree
                member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - Python without extraction filters; members were checked above
                tar.extractall(dest)  # noqa: S202
    except tarfile.TarError as exc:
        raise SeriesError(f"{archive.name} is not a readable tar archive: {exc}") from None


def build_base(ws: Workspace, pin: Pin, source: BaseSource, work: Path, log: Log) -> BaseTree:
    """A fresh repository inside the scratch folder ``work``, branch ``base`` checked out and no other ref."""
    if source.kind == "sdist":
        archive = download_sdist(ws, pin, log)
        log(f"making the base repository from {archive.name}")
        (work / "sdist").mkdir()
        safe_extract(archive, work / "sdist")
        stage("fetch-unpacked")
        if not (repo := work / "sdist" / pin.sdist_root).is_dir():
            raise SeriesError(f"{archive.name} has no top-level folder {pin.sdist_root!r}; check "
                              "[sdist].root in the pin")  # fmt: skip
        for egg_info in repo.glob("src/*.egg-info"):
            shutil.rmtree(egg_info)
        _init_fixed_commit(repo, pin)
        commit = out("rev-parse", "HEAD", cwd=repo)
        if pin.base_commit and commit != pin.base_commit:
            raise SeriesError(f"the sdist gave base commit {commit[:12]}, the pin expects "
                              f"{pin.base_commit[:12]}; the sdist or the base recipe changed, update "
                              "[sdist].base_commit only if that is intended")  # fmt: skip
    else:
        repo, network = work / "clone", source.kind == "git"
        # a full clone of a pinned commit (not every host serves one by name shallowly); a tag's, one commit deep
        shallow = ["--depth", "1", "--branch", pin.tag] if network and not pin.commit else []
        log(f"cloning {source.location} at {source.ref[:12]}" + " (read-only for the original)" * (not network))
        try:  # over the network with the person's configuration (a proxy, url.insteadOf), as their own git would
            git("clone", "--quiet", "--no-checkout", *shallow, "--", source.location, repo, user_config=network)
        except SeriesError as exc:
            if network:
                raise SeriesError(f"cannot clone {source.location} (is it reachable from here?): {exc}") from None
            raise
        git("checkout", "--quiet", "-B", BASE_BRANCH, "HEAD" if shallow else source.ref, cwd=repo)
        refs = [ref for ref in out("for-each-ref", "--format=%(refname)", cwd=repo).splitlines() if ref != BASE_REF]
        git("update-ref", "--no-deref", "--stdin", cwd=repo, stdin="".join(f"delete {ref}\n" for ref in refs))
    add_excludes(repo, BUILD_ARTIFACTS)
    return BaseTree(repo, source.kind)


def _init_fixed_commit(repo: Path, pin: Pin) -> None:
    date = f"{pin.release_date}T00:00:00+0000"
    env = {**TOOL_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    git("init", "--quiet", cwd=repo)
    git("add", "--all", "--force", ".", cwd=repo)
    message = f"{pin.name} {pin.version} from {pin.sdist_filename}\n\nsha256: {pin.sdist_sha256}\n"
    git("commit", "--quiet", "--no-verify", "-m", message, cwd=repo, env=env)
    git("branch", "-M", BASE_BRANCH, cwd=repo)


def fetch_advice(repo: Path) -> str:  # names no command: which remote has a ref, and as what, the tool cannot know
    shallow = out("rev-parse", "--is-shallow-repository", cwd=repo) == "true"
    return f"fetch it into {repo} from the remote that has it" + (" (--unshallow: it is shallow)" if shallow else "")


def tool_tree(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource,
              log: Log) -> tuple[BaseTree, ApplyResult]:  # fmt: skip
    """The tool's tree of ``source`` with ``patches`` applied on branch ``series``: reused, replaced or made."""
    tree = ws.trees / source.tree_name
    if source.kind == "sdist":  # the pinned sha256 is checked on every run, also when the tree is reused
        download_sdist(ws, pin, log)
    _retire(_aside(tree), tree, log)  # a killed run's
    if tree.exists() or tree.is_symlink():
        if (why := changes_since_built(tree)) is not None:
            kept, move = _move_aside(tree)
            raise SeriesError(f"{tree} is not as the tool built it ({why}); it may hold your work, so it is left as it "
                              f"is: move it away ({move}){_commits_remedy(ws, pin, patches, source, tree, kept)}, and "
                              "re-run; nothing was changed")  # fmt: skip
        record = _read_json(tree / ".git" / RECORD)
        if (record["source"], record["fingerprint"]) == (source.key, fingerprint(patches)):
            log(f"series already applied on {tree} (branch {SERIES_BRANCH}); reusing it")
            return BaseTree(tree, source.kind), ApplyResult(head=record["head"], reused=True)
        log(f"{tree} holds another base or series, unchanged since the tool built it: building a fresh one")
    return BaseTree(tree, source.kind), _build(ws, pin, patches, source, tree, log)


def _move_aside(tree: Path) -> tuple[Path, str]:  # where a person's tree goes, and how (its worktrees' links with it)
    move, (_, *linked) = shell("mv", tree, kept := kept_path(tree)), gitcmd.worktrees(tree)
    inside = [kept / path.relative_to(tree.resolve()) for path in linked if path.is_relative_to(tree.resolve())]
    return kept, move + (f" && {shell('git', '-C', kept, 'worktree', 'repair', *inside)}" * bool(linked))


def edit_tree(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, log: Log) -> Path:
    """A new tree for a person to change the series in; the tool never writes it again (``export`` reads it)."""
    if (tree := ws.workdir / EDIT_DIR / source.tree_name).exists() or tree.is_symlink():
        raise SeriesError(f"{tree} exists, and it is yours: the tool never rewrites it; edit it and export it "
                          f"({ws.command('export', '--tree', tree)}), or move it away "
                          f"({_move_aside(tree)[1]}) to make a fresh one")  # fmt: skip
    _build(ws, pin, patches, source, tree, log)
    log(f"made {tree}: branch {SERIES_BRANCH} is base + the series; change it (git rebase -i base), then export it")
    return tree


def _build(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, tree: Path, log: Log) -> ApplyResult:
    """Build base and series in a fresh scratch folder and rename it to ``tree`` (the tool's tree there goes too)."""
    ws.scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=ws.scratch, prefix=f"{tree.name}-"))
    try:
        base = build_base(ws, pin, source, work, log)
        result = apply_series(base, patches, pin, log)
        identity = f"{pin.name} {source.ref[:12]} (--force-base)" if source.forced else pin.identity
        with tempfile.TemporaryDirectory(dir=ws.scratch) as made:  # the series it holds: what an export of it writes
            seen = format_patches(base.path, f"{BASE_REF}..{SERIES_REF}", Path(made))  # and its series file
        _write_json(base.path, BASE_RECORD, {"base": identity, "patches": str(ws.patches), "commit": base.base_commit,
                                             "seen": seen})  # fmt: skip
        if tree.parent == ws.trees:  # the tool's own; from now on a reflog entry is the person's
            git("reflog", "expire", "--expire=now", "--all", cwd=base.path)
            record = (source.key, fingerprint(patches), base.base_commit, result.head)
            _write_json(base.path, RECORD, dict(zip(RECORD_KEYS, record, strict=True)))
        tree.parent.mkdir(parents=True, exist_ok=True)
        if old := tree.exists() or tree.is_symlink():
            if tree.parent != ws.trees:  # an edit tree is never replaced: this one appeared while it was built
                raise SeriesError(f"{tree} appeared while the tool made it; it is left as it is, nothing was made")
            tree.rename(_aside(tree))
            if (why := changes_since_built(_aside(tree))) is not None:  # changed since checked: moved back, refused
                _aside(tree).rename(tree)
                raise SeriesError(f"{tree} changed while the tool rebuilt it ({why}); it is left as it is: re-run")
        try:
            stage("replace-between-renames")
            base.path.rename(tree)
        except BaseException:
            if old and not tree.exists():
                _aside(tree).rename(tree)
            raise
    except OSError as exc:  # a full disk names no file: the tree it was building is the path to check
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(tree)) from exc
        raise
    finally:
        _retire(_aside(tree), tree, log)
        shutil.rmtree(work, ignore_errors=True)  # what is left, the next run's scratch clean-up removes
    return result


def _aside(tree: Path) -> Path:  # beside it, not in scratch: a killed run's is checked by the next run, not emptied
    return tree.with_name(f".{tree.name}.replaced")


def _retire(aside: Path, tree: Path, log: Log) -> None:  # goes only as built: what a shell working in it wrote is kept
    if aside.is_dir() and not aside.is_symlink() and (why := changes_since_built(aside)) is not None:
        aside.rename(kept := kept_path(tree))
        repair = f" ({shell('git', '-C', kept, 'worktree', 'repair')})" if len(gitcmd.worktrees(kept)) > 1 else ""
        log(f"note: {tree} changed while the tool replaced it ({why}); kept as {kept}{repair}")
    if aside.is_symlink():  # only the link goes, never what it points to
        aside.unlink()
    shutil.rmtree(aside, ignore_errors=True)


def changes_since_built(tree: Path) -> str | None:  # None when ``tree`` is as the tool built it, else what is not
    if (record := _read_json(tree / ".git" / RECORD, *RECORD_KEYS)) is None:
        return f"it has no readable record of what the tool built (.git/{RECORD})"
    refs = git("for-each-ref", "--format=%(refname) %(objectname)", cwd=tree, check=False).stdout  # "": unreadable
    head = git("symbolic-ref", "--quiet", "HEAD", cwd=tree, check=False).stdout  # "": detached
    found = dict(line.split(" ", 1) for line in f"{refs}HEAD {head}".splitlines())
    expected = {BASE_REF: record["base"], SERIES_REF: record["head"], "HEAD": SERIES_REF}
    if found != expected:
        changed = sorted(ref for ref in found.keys() | expected.keys() if found.get(ref) != expected.get(ref))
        return f"its refs changed ({', '.join(changed)})"
    if linked := [path for path in gitcmd.worktrees(tree) if path != tree.resolve()]:
        return f"a linked worktree, {linked[0]}"
    # a commit the person made and then reset or checked out away: git keeps it in the reflog, and so does the tool
    if reflog_only := git("rev-list", "--reflog", "--not", BASE_REF, SERIES_REF, cwd=tree, check=False).stdout.split():
        return f"{len(reflog_only)} commit{'s' * (len(reflog_only) > 1)} only in its reflog ({reflog_only[0][:12]})"
    recorded = _read_json(tree / ".git" / FILES) or {}
    added = [name for name, digest in _untracked(tree).items() if recorded.get(name) != digest]
    # the person's global gitignore is not the tool's; an edit to a file marked assume-unchanged is not in `git status`
    tags = git("ls-files", "-v", "-z", cwd=tree).stdout.split("\0")  # assume-unchanged: lower case; skip-worktree: S
    hidden = [entry[2:] for entry in tags if entry[:1].islower() or entry[:1] == "S"]
    if files := sorted({*gitcmd.uncommitted_files(tree, own_ignores_only=True), *hidden, *added}):
        shown = ", ".join(files[:3]) + ", ..." * (len(files) > 3)
        return f"{len(files)} uncommitted file{'s' * (len(files) > 1)} ({shown})"
    return None


def _untracked(tree: Path) -> dict[str, str]:  # every untracked file, ignored ones too, with its content's digest
    names = git("ls-files", "--others", "-z", cwd=tree).stdout.split("\0")
    return {n: hashlib.sha256((tree / n).read_bytes()).hexdigest() if (tree / n).is_file() else "" for n in names if n}


@contextmanager
def recording(tree: Path, copies: bool = False) -> Iterator[None]:
    """The untracked files a stage of ``copies`` leaves are the tool's; of a test stage, only what builds rewrite."""
    before = {} if copies else _read_json(tree / ".git" / FILES) or {}
    try:
        yield
    finally:
        made = {name: digest for name, digest in _untracked(tree).items() if copies or _artifact(name)}
        _write_json(tree, FILES, {**before, **made})  # anything else made or changed meanwhile is the person's


def _artifact(path: str) -> bool:  # what installing and testing rewrite (coverage and pytest write to reports/)
    folders = [f"{part}/" for part in path.split("/")[:-1]]
    return path.startswith("build/") or any(fnmatch.fnmatch(f, pattern) for f in folders for pattern in _STAGE_WRITES)


def _read_json(path: Path, *keys: str) -> Any:  # None if unreadable, or if it lacks one of the string ``keys``
    fields = None
    with suppress(OSError, ValueError):
        fields = json.loads(path.read_bytes())
    valid = isinstance(fields, dict) and all(isinstance(fields.get(key), str) for key in keys)
    return fields if valid or not keys else None


def _write_json(repo: Path, name: str, value: object) -> None:
    write_file(repo / ".git" / name, json.dumps(value, sort_keys=True) + "\n")


def _commits_remedy(ws: Workspace, pin: Pin, patches: list[Patch], source: BaseSource, tree: Path, kept: Path) -> str:
    head = (_read_json(tree / ".git" / RECORD, "head") or {}).get("head", "")
    if not head or not git("rev-list", f"{head}..{SERIES_REF}", cwd=tree, check=False).stdout.strip():
        return ""
    if source.kind == "sdist" and dropped_hunks(tree, BASE_REF, patches, pin.sdist_lacks):  # export would drop them
        return (", where your commits stay: the sdist lacks files the series changes, so cherry-pick them onto an "
                f"edit tree of upstream's tag ({ws.command('edit', '--git')}) to export them")  # fmt: skip
    return f", and export your commits from there ({ws.command('export', '--tree', kept)})"


def refuse_operation_in_progress(repo: Path) -> None:
    for worktree in gitcmd.worktrees(repo):
        for name, (what, finish, abort) in _IN_PROGRESS.items():
            if git_path(worktree, name).exists():
                raise SeriesError(f"{what} is in progress in {worktree}; finish it ({finish}) or abort "
                                  f"it ({abort}), then re-run")  # fmt: skip


def apply_series(base: BaseTree, patches: list[Patch], pin: Pin, log: Log) -> ApplyResult:
    repo, result = base.path, ApplyResult(head="")
    git("checkout", "--quiet", "-b", SERIES_BRANCH, BASE_REF, cwd=repo)
    (attributes := git_path(repo, "info/attributes")).write_text(TOOL_ATTRIBUTES)  # until the series is applied
    for patch in patches:
        # the hunks for files the sdist lacks (upstream docs and tests) and no earlier patch added
        lacking = [path for path in patch.touched_existing if path.startswith(pin.sdist_lacks)]
        if excludes := [path for path in lacking if base.source == "sdist" and not has_path(repo, path)]:
            result.excluded[patch.name] = excludes
            log(f"{patch.name}: excluding {', '.join(excludes)} (not shipped in the {base.source} base)")
        if len(excludes) == len(patch.changes):
            continue
        options = [f"--exclude={literal(path)}" for path in excludes]
        if already_present(repo, patch.path, options):
            log(f"{patch.name}: already present in the base, skipped")
            result.already_present.append(patch.name)
            continue
        proc = git(  # no hooks: a person's global core.hooksPath must not veto or rewrite the tool's commits
            "-c", "core.hooksPath=/dev/null", "am", "--3way", "--committer-date-is-author-date", *keep_cr(patch.path),
            *options, patch.path, cwd=repo, env=TOOL_IDENTITY, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            where = ", ".join(failed_files(repo, proc)) or failure_cause(proc).rstrip(".")
            raise SeriesError(f"{patch.name} does not apply: {where}; nothing was applied and no tree was changed")
        result.applied.append(patch.name)
        log(f"applied {patch.name}")
    result.head = out("rev-parse", "HEAD", cwd=repo)
    attributes.unlink()
    return result


def literal(path: str) -> str:  # git apply's --include and --exclude take wildmatch patterns: the path, [*?\ escaped
    return re.sub(r"[][*?\\]", r"\\\g<0>", path)


def already_present(repo: Path, patch: Path, options: list[str]) -> bool:  # its reverse applies, with HEAD's modes
    reverse = git("apply", "--cached", "--check", "--reverse", *options, patch, cwd=repo, check=False).returncode == 0
    modes = _MODE_CHANGE.findall(out("apply", "--summary", *options, patch, cwd=repo)) if reverse else []
    return reverse and all(out("ls-tree", "HEAD", "--", path, cwd=repo).startswith(mode) for mode, path in modes)


def failed_files(repo: Path, proc: subprocess.CompletedProcess[str]) -> list[str]:
    unmerged = out("diff", "--name-only", "--diff-filter=U", cwd=repo).splitlines()
    return sorted(set(unmerged) | {match.group(1) for match in _FAILED_FILE.finditer(proc.stdout + proc.stderr)})


def base_worktree(ws: Workspace, repo: Path, suffix: str = "base") -> Path:
    worktree = ws.scratch / f"{repo.name}-{suffix}"
    remove(worktree)
    git("worktree", "prune", cwd=repo)  # forgets the worktrees whose folder went with an earlier run's scratch
    git("worktree", "add", "--quiet", "--detach", worktree, BASE_REF, cwd=repo)
    return worktree
