"""Get the pinned base as a git repository: from the PyPI sdist, a user's checkout, or an upstream clone.

:func:`resolve_source` says where the base comes from, checking what it can before anything is made (a checkout must
be clean and at the pinned tag or commit). :func:`build_base` then makes a fresh repository whose only branch,
``base``, is the pinned release, in a folder of the tool's (see :mod:`patchseries.trees`). The user's own checkout is
only ever read (the new repository borrows its objects, as ``git clone --shared`` does), never modified.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from patchseries import gitcmd, scratch
from patchseries.errors import SeriesError
from patchseries.gitcmd import TOOL_IDENTITY, add_excludes, git, out
from patchseries.interrupts import stage
from patchseries.paths import Workspace, partial_path, shell
from patchseries.pin import Pin
from patchseries.progress import Log
from patchseries.trees import BASE_BRANCH, BASE_REF, remove_tool_worktree, unpack_path

# Files that building or installing the tree creates; ignored so that they never make the tree look modified.
BUILD_ARTIFACTS = ("*.egg-info/", "__pycache__/", "build/", ".pytest_cache/", ".coverage*", "coverage.xml")


@dataclass(frozen=True)
class BaseTree:
    """A repository holding the pinned base on branch ``base``."""

    path: Path
    source: str  # "sdist", "checkout" or "git"

    @property
    def base_commit(self) -> str:
        return out("rev-parse", BASE_REF, cwd=self.path)

    @property
    def has_upstream_tests(self) -> bool:
        """Whether the base commit ships upstream's ``tests/`` (an upstream checkout does, the sdist does not).

        Asked of the commit, not the work tree, where the series' tests and the harness also live.
        """
        return git("cat-file", "-e", f"{BASE_REF}:tests", cwd=self.path, check=False).returncode == 0


@dataclass(frozen=True)
class BaseSource:
    """Where a run's base comes from, resolved before anything is made."""

    kind: str  # "sdist", "checkout" or "git"
    tree_name: str  # the tool's tree for this base: <workdir>/trees/<tree_name>
    key: str  # recorded in the tree (patchseries.trees.Record.source): a tree is reused only for the same key
    location: str = ""  # the checkout's path or the clone URL
    ref: str = ""  # the commit (checkout, git at a commit) or tag (git) to build from


def resolve_source(ws: Workspace, pin: Pin, checkout: Path | None, use_git: bool, force_base: bool) -> BaseSource:
    """The base a run uses; a checkout that is not clean or not at the pinned tag (or commit) is refused here."""
    if checkout is not None:
        path, head = _checked_checkout(pin, checkout, force_base)
        return BaseSource("checkout", checkout_tree_name(path), f"checkout {path} {head}", str(path), head)
    if use_git:
        ref = pin.commit or pin.tag
        return BaseSource("git", f"git-{pin.commit[:12] or pin.tag}", f"git {pin.git_url} {ref}", pin.git_url, ref)
    if not pin.has_sdist:
        raise SeriesError(
            f"this series is pinned to upstream commit {pin.commit[:12]}, which no sdist ships; pass --checkout PATH "
            "(an upstream clone that has it) or --git"
        )
    return BaseSource("sdist", f"sdist-{pin.version}", f"sdist {pin.sdist_sha256}")


def checkout_tree_name(checkout: Path) -> str:
    """The name of the trees (the tool's, and the edit tree) made on the upstream clone at ``checkout``."""
    return f"checkout-{hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:8]}"


def build_base(ws: Workspace, pin: Pin, source: BaseSource, dest: Path, log: Log) -> BaseTree:
    """Make a fresh repository at ``dest`` (which must not exist) with branch ``base`` checked out and no other ref."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.kind == "sdist":
        archive = download_sdist(ws, pin, log)
        log(f"making the base repository from {archive.name}")
        _build_base(ws, pin, archive, dest)
        return BaseTree(dest, source.kind)
    scratch.make_dir(dest)  # git clones into the empty folder: recorded as the tool's before anything is in it
    if source.kind == "checkout":
        # its own objects (hard links where it can): a --shared clone breaks when the checkout moves or prunes
        log(f"cloning {source.location} at {source.ref[:12]} (read-only for the original)")
        _clone(dest, source.location, ["--no-checkout"], source.ref)
    elif pin.commit:
        log(f"cloning {pin.git_url} at {pin.commit[:12]}")
        # a full clone: an unreleased commit cannot be fetched shallowly by name from every host
        _clone(dest, pin.git_url, ["--no-checkout"], pin.commit, network=True)
    else:
        log(f"cloning {pin.git_url} at tag {pin.tag}")
        _clone(dest, pin.git_url, ["--depth", "1", "--branch", pin.tag, "--no-checkout"], "HEAD", network=True)
    return BaseTree(dest, source.kind)


def _checked_checkout(pin: Pin, checkout: Path, force_base: bool) -> tuple[Path, str]:
    """The checkout's resolved path and the commit to use, refusing a checkout that is not clean or not pinned."""
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
        return checkout, head if force_base else _pinned_commit(checkout, pin.commit)
    tagged = git("rev-parse", "--verify", "--quiet", f"refs/tags/{pin.tag}^{{commit}}", cwd=checkout, check=False)
    tag_commit = tagged.stdout.strip()
    if head != tag_commit and not force_base:
        where = f"tag {pin.tag} is {tag_commit[:12]}" if tag_commit else f"it has no tag {pin.tag}"
        raise SeriesError(
            f"--checkout {checkout} is at {head[:12]}, but {where}; check out {pin.tag} or pass --force-base"
        )
    return checkout, head


def _clone(dest: Path, source: str, options: list[str], commit: str, network: bool = False) -> None:
    """Clone ``source`` into ``dest`` and keep only branch ``base`` at ``commit``: no remote, tag or other branch."""
    try:  # over the network with the person's configuration (a proxy, url.insteadOf), as their own git would
        git("clone", "--quiet", *options, "--", source, dest, user_config=network)  # a url "-u..." is no option
    except SeriesError as exc:
        if network:
            raise SeriesError(f"cannot clone {source} (is it reachable from here?): {exc}") from None
        raise
    git("checkout", "--quiet", "-B", BASE_BRANCH, commit, cwd=dest)
    git("remote", "remove", "origin", cwd=dest, check=False)
    others = [ref for ref in out("for-each-ref", "--format=%(refname)", cwd=dest).splitlines() if ref != BASE_REF]
    if others:
        git("update-ref", "--stdin", cwd=dest, stdin="".join(f"delete {ref}\n" for ref in others))
    git("reflog", "expire", "--expire=now", "--all", cwd=dest)  # the clone's HEAD is no commit of the tree's
    add_excludes(dest, BUILD_ARTIFACTS)


def _build_base(ws: Workspace, pin: Pin, archive: Path, building: Path) -> str:
    """Unpack ``archive`` into ``building`` and commit it as the pinned base; the commit id.

    It is unpacked beside ``building`` (:func:`patchseries.trees.unpack_path`), which the next build removes if a
    SIGKILL left it: a temporary folder of the work directory would outlive such a run for good.
    """
    unpacking = scratch.make_dir(scratch.claim(unpack_path(building)), marked=True)
    try:
        safe_extract(archive, unpacking)
        stage("fetch-unpacked")
        unpacked = unpacking / pin.sdist_root
        if not unpacked.is_dir():
            raise SeriesError(
                f"{archive.name} has no top-level folder {pin.sdist_root!r}; check [sdist].root in the pin"
            )
        for egg_info in unpacked.glob("src/*.egg-info"):
            shutil.rmtree(egg_info)
        scratch.make_dir(building)
        for child in unpacked.iterdir():  # into the folder the claim names, so that a killed run's is removed
            child.rename(building / child.name)
    finally:
        scratch.remove(unpacking)
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
    kept = kept_download(ws, pin)
    if kept is not None:
        return kept
    target = ws.downloads / pin.sdist_filename
    ws.downloads.mkdir(parents=True, exist_ok=True)
    log(f"downloading {pin.sdist_url}")
    # claimed: a person's file or folder at that name is refused, never removed; a link is never written through
    partial = scratch.claim(partial_path(target))
    try:
        with urllib.request.urlopen(pin.sdist_url, timeout=120) as response, partial.open("xb") as sink:
            scratch.own(partial)
            shutil.copyfileobj(response, sink)
            stage("fetch-download")
    except (urllib.error.URLError, OSError) as exc:
        scratch.remove(partial)
        raise SeriesError(f"cannot download {pin.sdist_url}: {getattr(exc, 'reason', exc)}") from None
    except BaseException:  # an interrupt: a half-downloaded file is never kept
        scratch.remove(partial)
        raise
    actual = _sha256(partial)
    if actual != pin.sdist_sha256:
        scratch.remove(partial)
        raise SeriesError(
            f"sha256 mismatch for {pin.sdist_filename}: expected {pin.sdist_sha256}, got {actual}; refusing to use it"
        )
    partial.replace(target)
    scratch.release(partial)
    return target


def kept_download(ws: Workspace, pin: Pin) -> Path | None:
    """The sdist kept in the work directory, checked against the pin on every run (None if there is none)."""
    target = ws.downloads / pin.sdist_filename
    if not target.is_file():
        return None
    cached = _sha256(target)
    if cached != pin.sdist_sha256:  # kept only after its sha256 matched: another digest is a changed pin or file
        raise SeriesError(
            f"sha256 mismatch for {pin.sdist_filename}: the pin says {pin.sdist_sha256}, the download kept in "
            f"{target} has {cached}; correct the pin, or if the pin is right, remove that file ({shell('rm', target)}) "
            "and re-run"
        )
    return target


def _pinned_commit(checkout: Path, commit: str) -> str:
    if git("cat-file", "-e", f"{commit}^{{commit}}", cwd=checkout, check=False).returncode != 0:
        raise SeriesError(
            f"--checkout {checkout} does not have the pinned commit {commit[:12]}; fetch it (git fetch origin), or "
            "pass --force-base to use the clone's HEAD instead"
        )
    return commit


def _init_fixed_commit(path: Path, pin: Pin) -> None:
    date = f"{pin.release_date}T00:00:00+0000"
    env = {**TOOL_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    git("init", "--quiet", cwd=path)
    git("add", "--all", "--force", ".", cwd=path)
    message = f"{pin.name} {pin.version} from {pin.sdist_filename}\n\nsha256: {pin.sdist_sha256}\n"
    git("commit", "--quiet", "--no-verify", "-m", message, cwd=path, env=env)
    git("branch", "-M", BASE_BRANCH, cwd=path)
    add_excludes(path, BUILD_ARTIFACTS)


def safe_extract(archive: Path, dest: Path) -> None:
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (dest / member.name).resolve()
                if not str(target).startswith(str(dest.resolve())) or member.issym() or member.islnk():
                    raise SeriesError(f"{archive.name} contains an unsafe entry {member.name!r}")
                if ".git" in Path(member.name).parts:  # its config would be the tree's, and run its commands
                    raise SeriesError(f"{archive.name} contains a git directory entry {member.name!r}; refusing it")
                # never the archive's owner: run as root, tarfile would chown the files to the packager's uid (Python
                # before 3.11.4 has no extraction filter), and git then refuses the tree ("dubious ownership")
                member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
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
    """A worktree of ``repo``'s base commit beside it (objects shared, nothing copied), made fresh on every call; an
    existing one is removed first only while it is a clean worktree of ``repo``, and refused otherwise."""
    worktree = ws.trees / f"{repo.name}-{suffix}"
    remove_tool_worktree(repo, worktree)
    git("worktree", "add", "--quiet", "--detach", worktree, BASE_REF, cwd=repo)
    return worktree
