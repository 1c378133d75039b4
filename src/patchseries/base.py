"""Get the pinned base as a git repository: from the PyPI sdist, a user's checkout, or an upstream clone.

Every source ends the same way: a repository under the work directory whose branch ``base`` is the pinned
release. The user's own checkout is only ever read (it is cloned with ``--shared``), never modified. A repository
that exists is never deleted or re-cloned: when the base it should have changes, only its branch ``base`` moves, so
branch ``series`` and a contributor's work in the tree stay (see :mod:`patchseries.apply` for re-applying).
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from patchseries import gitcmd
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, add_excludes, git, out
from patchseries.interrupts import stage
from patchseries.paths import Workspace, partial_path, remove
from patchseries.pin import Pin
from patchseries.progress import Log

BASE_BRANCH = "base"
# Files that building or installing the tree creates; ignored so that they never make the tree look modified.
BUILD_ARTIFACTS = ("*.egg-info/", "__pycache__/", "build/", ".pytest_cache/", ".coverage*", "coverage.xml")


@dataclass(frozen=True)
class BaseTree:
    """A repository holding the pinned base on branch ``base``."""

    path: Path
    source: str  # "sdist", "checkout" or "git"

    @property
    def base_commit(self) -> str:
        return out("rev-parse", BASE_BRANCH, cwd=self.path)

    @property
    def has_upstream_tests(self) -> bool:
        """Whether the base commit ships upstream's ``tests/`` (an upstream checkout does, the sdist does not).

        Asked of the commit, not the work tree, where the series' tests and the harness also live.
        """
        return git("cat-file", "-e", f"{BASE_BRANCH}:tests", cwd=self.path, check=False).returncode == 0


def sdist_base(ws: Workspace, pin: Pin, log: Log) -> BaseTree:
    """The base built from the pinned sdist: the same commit id on every machine."""
    if not pin.has_sdist:
        raise SeriesError(
            f"this series is pinned to upstream commit {pin.commit[:12]}, which no sdist ships; pass --checkout PATH "
            "(an upstream clone that has it) or --git"
        )
    tree = ws.trees / f"sdist-{pin.version}"
    if _usable(tree, pin.base_commit) and _made_from(tree, pin.sdist_sha256):
        return BaseTree(tree, "sdist")
    archive = download_sdist(ws, pin, log)
    log(f"making the base repository from {archive.name}")
    building = partial_path(tree)
    remove(building)
    try:
        commit = _build_base(ws, pin, archive, building)
        if _is_repository(tree):
            _move_base(tree, str(building), BASE_BRANCH, commit, log)
            remove(building)
        else:
            _refuse_what_it_did_not_make(tree)
            building.rename(tree)
    except BaseException as exc:
        remove(building)  # a half-made base (a full disk, a git failure, an interrupt) is never left behind
        if isinstance(exc, OSError) and exc.filename is None and not isinstance(exc, shutil.Error):
            # a write that failed (a full disk) names no file: name the tree being built, whose disk to check
            raise OSError(exc.errno, exc.strerror or str(exc), str(tree)) from exc
        raise
    return BaseTree(tree, "sdist")


def _build_base(ws: Workspace, pin: Pin, archive: Path, building: Path) -> str:
    """Unpack ``archive`` into ``building`` and commit it as the pinned base; the commit id."""
    with tempfile.TemporaryDirectory(dir=ws.workdir) as tmp:
        _safe_extract(archive, Path(tmp))
        stage("fetch-unpacked")
        unpacked = Path(tmp) / pin.sdist_root
        if not unpacked.is_dir():
            raise SeriesError(
                f"{archive.name} has no top-level folder {pin.sdist_root!r}; check [sdist].root in the pin"
            )
        for egg_info in unpacked.glob("src/*.egg-info"):
            shutil.rmtree(egg_info)
        shutil.move(str(unpacked), building)
    _init_fixed_commit(building, pin)
    commit = out("rev-parse", "HEAD", cwd=building)
    if pin.base_commit and commit != pin.base_commit:
        raise SeriesError(
            f"the sdist gave base commit {commit[:12]}, the pin expects {pin.base_commit[:12]}; "
            "the sdist or the base recipe changed, update [sdist].base_commit only if that is intended"
        )
    return commit


def download_sdist(ws: Workspace, pin: Pin, log: Log) -> Path:
    """Download the sdist once, verify its sha256, and refuse (deleting it) on mismatch."""
    target = ws.downloads / pin.sdist_filename
    if target.is_file():  # kept only after its sha256 matched the pin: another digest now means the pin changed
        cached = _sha256(target)
        if cached != pin.sdist_sha256:
            raise SeriesError(
                f"sha256 mismatch for {pin.sdist_filename}: the pin says {pin.sdist_sha256}, the download kept in "
                f"{target} (checked when it was made) has {cached}; correct the pin, or if the pin is right, remove "
                "that file and re-run"
            )
        return target
    ws.downloads.mkdir(parents=True, exist_ok=True)
    log(f"downloading {pin.sdist_url}")
    partial = partial_path(target)
    try:
        with urllib.request.urlopen(pin.sdist_url, timeout=120) as response, partial.open("wb") as sink:
            shutil.copyfileobj(response, sink)
            stage("fetch-download")
    except (urllib.error.URLError, OSError) as exc:
        remove(partial)
        raise SeriesError(f"cannot download {pin.sdist_url}: {getattr(exc, 'reason', exc)}") from None
    except BaseException:  # an interrupt: a half-downloaded file is never kept
        remove(partial)
        raise
    actual = _sha256(partial)
    if actual != pin.sdist_sha256:
        remove(partial)
        raise SeriesError(
            f"sha256 mismatch for {pin.sdist_filename}: expected {pin.sdist_sha256}, got {actual}; refusing to use it"
        )
    partial.replace(target)
    return target


def checkout_base(ws: Workspace, pin: Pin, checkout: Path, force_base: bool, log: Log) -> BaseTree:
    """A private clone of the user's checkout, which must be clean and at the pinned tag unless forced."""
    checkout = checkout.resolve()
    if not (checkout / ".git").exists():
        raise SeriesError(f"--checkout {checkout} is not a git checkout")
    if not gitcmd.is_clean(checkout):
        raise SeriesError(f"--checkout {checkout} has uncommitted changes; commit or stash them first")
    if git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=checkout, check=False).returncode != 0:
        wanted = f"the commit {pin.commit[:12]}" if pin.commit else f"the tag {pin.tag}"
        raise SeriesError(f"--checkout {checkout} has no commits; pass a clone of upstream that has {wanted}")
    head = out("rev-parse", "HEAD", cwd=checkout)
    if pin.commit:  # a series against an upstream commit: use that commit of the clone, wherever HEAD is
        head = head if force_base else _pinned_commit(checkout, pin.commit)
    else:
        tagged = git("rev-parse", "--verify", "--quiet", f"refs/tags/{pin.tag}^{{commit}}", cwd=checkout, check=False)
        tag_commit = tagged.stdout.strip()
        if head != tag_commit and not force_base:
            where = f"tag {pin.tag} is {tag_commit[:12]}" if tag_commit else f"it has no tag {pin.tag}"
            raise SeriesError(
                f"--checkout {checkout} is at {head[:12]}, but {where}; check out {pin.tag} or pass --force-base"
            )
    tree = ws.trees / f"checkout-{hashlib.sha256(str(checkout).encode()).hexdigest()[:8]}"
    if _usable(tree, head):
        return BaseTree(tree, "checkout")
    if _is_repository(tree):
        _move_base(tree, str(checkout), head, head, log)
        return BaseTree(tree, "checkout")
    log(f"cloning {checkout} at {head[:12]} (shared, read-only for the original)")
    return _clone(tree, str(checkout), ["--shared", "--no-checkout"], head, "checkout")


def _pinned_commit(checkout: Path, commit: str) -> str:
    if git("cat-file", "-e", f"{commit}^{{commit}}", cwd=checkout, check=False).returncode != 0:
        raise SeriesError(
            f"--checkout {checkout} does not have the pinned commit {commit[:12]}; fetch it (git fetch origin), or "
            "pass --force-base to use the clone's HEAD instead"
        )
    return commit


def git_base(ws: Workspace, pin: Pin, log: Log) -> BaseTree:
    """A shallow clone of upstream at the pinned tag (or a full clone at the pinned commit)."""
    if pin.commit:
        tree = ws.trees / f"git-{pin.commit[:12]}"
        if _is_repository(tree):
            if not _usable(tree, pin.commit):
                raise SeriesError(
                    f"{tree} has no branch {BASE_BRANCH} at {pin.commit[:12]}; restore it (git -C {tree} branch -f "
                    f"{BASE_BRANCH} {pin.commit}), or move the tree away (it may hold your work) and re-run"
                )
            return BaseTree(tree, "git")
        log(f"cloning {pin.git_url} at {pin.commit[:12]}")
        try:  # a full clone: an unreleased commit cannot be fetched shallowly by name from every host
            return _clone(tree, pin.git_url, ["--no-checkout"], pin.commit, "git")
        except SeriesError as exc:
            raise SeriesError(f"cannot clone {pin.git_url} (is GitHub reachable from here?): {exc}") from None
    tree = ws.trees / f"git-{pin.tag}"
    if _is_repository(tree):
        if not _usable(tree, ""):
            raise SeriesError(
                f"{tree} has no branch {BASE_BRANCH}; restore it (git -C {tree} branch {BASE_BRANCH} {pin.tag}), "
                "or move the tree away (it may hold your work) and re-run"
            )
        return BaseTree(tree, "git")
    log(f"cloning {pin.git_url} at tag {pin.tag}")
    try:
        return _clone(tree, pin.git_url, ["--depth", "1", "--branch", pin.tag, "--no-checkout"], "HEAD", "git")
    except SeriesError as exc:
        raise SeriesError(f"cannot clone {pin.git_url} at {pin.tag} (is GitHub reachable from here?): {exc}") from None


def _clone(tree: Path, source: str, options: list[str], commit: str, kind: str) -> BaseTree:
    _refuse_what_it_did_not_make(tree)
    building = partial_path(tree)
    remove(building)
    tree.parent.mkdir(parents=True, exist_ok=True)
    try:
        git("clone", "--quiet", *options, source, building)
        git("checkout", "--quiet", "-B", BASE_BRANCH, commit, cwd=building)
    except SeriesError:
        remove(building)
        raise
    add_excludes(building, BUILD_ARTIFACTS)
    building.rename(tree)
    return BaseTree(tree, kind)


def _refuse_what_it_did_not_make(tree: Path) -> None:
    """A tree folder without a repository (its ``.git`` moved or deleted) may hold a person's files: never remove it."""
    if tree.is_symlink() or (tree.exists() and (not tree.is_dir() or any(tree.iterdir()))):
        raise SeriesError(
            f"{tree} exists but is no git repository this tool can read (its .git is missing); it may hold your work: "
            "move it away, or restore its .git, and re-run"
        )
    if tree.exists():
        tree.rmdir()  # empty: nothing of anyone's is in it


def _is_repository(tree: Path) -> bool:
    """Whether ``tree`` is a repository made by an earlier run (which may hold a contributor's work)."""
    if not (tree / ".git").exists():
        return False
    if git("rev-parse", "--git-dir", cwd=tree, check=False).returncode != 0:
        raise SeriesError(f"{tree} is not a readable git repository; move it away (it may hold your work) and re-run")
    return True


def _move_base(tree: Path, source: str, ref: str, commit: str, log: Log) -> None:
    """Point branch ``base`` of an existing tree at ``commit`` (fetched from ``source``), keeping everything else."""
    git("fetch", "--quiet", "--no-tags", source, ref, cwd=tree)
    fetched = out("rev-parse", "FETCH_HEAD", cwd=tree)
    if fetched != commit:
        raise SeriesError(f"{source} moved while it was read ({ref} is {fetched[:12]}, not {commit[:12]}); re-run")
    if git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=tree, check=False).stdout.strip() == BASE_BRANCH:
        git("checkout", "--quiet", "--detach", cwd=tree)  # the work tree stays as it is
    old = git("rev-parse", "--verify", "--quiet", BASE_BRANCH, cwd=tree, check=False).stdout.strip()
    git("branch", "--quiet", "--force", BASE_BRANCH, commit, cwd=tree)
    log(f"moved branch {BASE_BRANCH} of {tree} from {old[:12] or 'nothing'} to {commit[:12]}; "
        "branch series and the work tree are kept")  # fmt: skip


def _made_from(tree: Path, sha256: str) -> bool:
    """Whether the base of ``tree`` was made from the sdist with this digest, which its commit message records: the
    pinned sha256 is checked on every run, not only when the sdist is downloaded."""
    message = git("log", "-1", "--format=%B", BASE_BRANCH, cwd=tree, check=False).stdout
    return f"sha256: {sha256}" in message.splitlines()


def _usable(tree: Path, expected_commit: str) -> bool:
    """Whether ``tree`` is a complete base repository (its ``base`` branch at the expected commit)."""
    if not (tree / ".git").is_dir():
        return False
    found = git("rev-parse", "--verify", "--quiet", BASE_BRANCH, cwd=tree, check=False).stdout.strip()
    return bool(found) and (not expected_commit or found == expected_commit)


def _init_fixed_commit(path: Path, pin: Pin) -> None:
    date = f"{pin.release_date}T00:00:00+0000"
    env = {**TOOL_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    git("init", "--quiet", cwd=path)
    git("add", "--all", "--force", ".", cwd=path)
    message = f"{pin.name} {pin.version} from {pin.sdist_filename}\n\nsha256: {pin.sdist_sha256}\n"
    git("commit", "--quiet", "--no-verify", "-m", message, cwd=path, env=env)
    git("branch", "-M", BASE_BRANCH, cwd=path)
    add_excludes(path, BUILD_ARTIFACTS)


def _safe_extract(archive: Path, dest: Path) -> None:
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (dest / member.name).resolve()
                if not str(target).startswith(str(dest.resolve())) or member.issym() or member.islnk():
                    raise SeriesError(f"{archive.name} contains an unsafe entry {member.name!r}")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - Python without extraction filters; members were checked above
                tar.extractall(dest)  # noqa: S202
    except tarfile.TarError as exc:
        raise SeriesError(f"{archive.name} is not a readable tar archive: {exc}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_worktree(ws: Workspace, repo: Path, suffix: str = "base") -> Path:
    """A worktree of ``repo``'s base commit next to it (objects shared, nothing copied), reset on every call."""
    worktree = ws.trees / f"{repo.name}-{suffix}"
    git("worktree", "prune", cwd=repo)
    if not (worktree / ".git").exists():
        remove(worktree)
        git("worktree", "add", "--quiet", "--force", "--detach", worktree, BASE_BRANCH, cwd=repo)
    git("checkout", "--quiet", "--force", "--detach", BASE_BRANCH, cwd=worktree)
    return worktree
