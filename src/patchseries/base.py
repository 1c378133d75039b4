"""The pinned base as a git repository: from the PyPI sdist, a person's checkout (only read), or an upstream clone.

:func:`resolve_source` checks the source before anything is made; :func:`build_base` makes a fresh repository, whose
only branch ``base`` is the pinned release, inside a scratch folder of the run (:mod:`patchseries.trees` renames it
into place).
"""

from __future__ import annotations

import hashlib
import os
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
from patchseries.paths import Workspace, remove, shell
from patchseries.pin import Pin
from patchseries.progress import Log

BASE_BRANCH = "base"
BASE_REF = f"refs/heads/{BASE_BRANCH}"  # never a tag or remote ref of the same name
# what building or installing the tree creates: ignored, so that it never makes the tree look modified
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
        """Whether the base commit (not the work tree, which gets the series' tests) ships upstream's ``tests/``."""
        return git("cat-file", "-e", f"{BASE_REF}:tests", cwd=self.path, check=False).returncode == 0


@dataclass(frozen=True)
class BaseSource:
    """Where a run's base comes from, resolved before anything is made."""

    kind: str  # "sdist", "checkout" or "git"
    tree_name: str  # the tool's tree for this base: <workdir>/trees/<tree_name>
    key: str  # recorded in the tree: a tree is reused only for the same key
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


def _checked_checkout(pin: Pin, checkout: Path, force_base: bool) -> tuple[Path, str]:
    checkout = checkout.resolve()
    if not (checkout / ".git").exists():
        raise SeriesError(f"--checkout {checkout} is not a git checkout")
    if not gitcmd.is_clean(checkout):
        raise SeriesError(f"--checkout {checkout} has uncommitted changes; commit or stash them first")
    wanted = f"the commit {pin.commit[:12]}" if pin.commit else f"the tag {pin.tag}"
    head = git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=checkout, check=False).stdout.strip()
    if not head:
        raise SeriesError(f"--checkout {checkout} has no commits; pass a clone of upstream that has {wanted}")
    if force_base:
        return checkout, head
    if pin.commit:  # a series against an upstream commit: that commit of the clone, wherever HEAD is
        if git("cat-file", "-e", f"{pin.commit}^{{commit}}", cwd=checkout, check=False).returncode != 0:
            raise SeriesError(
                f"--checkout {checkout} does not have the pinned commit {pin.commit[:12]}; fetch it (git fetch "
                "origin), or pass --force-base to use the clone's HEAD instead"
            )
        return checkout, pin.commit
    tagged = git("rev-parse", "--verify", "--quiet", f"refs/tags/{pin.tag}^{{commit}}", cwd=checkout, check=False)
    if head != tagged.stdout.strip():
        where = f"tag {pin.tag} is {tagged.stdout[:12]}" if tagged.stdout else f"it has no tag {pin.tag}"
        raise SeriesError(
            f"--checkout {checkout} is at {head[:12]}, but {where}; check out {pin.tag} or pass --force-base"
        )
    return checkout, head


def build_base(ws: Workspace, pin: Pin, source: BaseSource, work: Path, log: Log) -> BaseTree:
    """A fresh repository inside the empty scratch folder ``work``, branch ``base`` checked out and no other ref."""
    if source.kind == "sdist":
        archive = download_sdist(ws, pin, log)
        log(f"making the base repository from {archive.name}")
        (work / "sdist").mkdir()
        safe_extract(archive, work / "sdist")
        stage("fetch-unpacked")
        repo = work / "sdist" / pin.sdist_root
        if not repo.is_dir():
            raise SeriesError(
                f"{archive.name} has no top-level folder {pin.sdist_root!r}; check [sdist].root in the pin"
            )
        for egg_info in repo.glob("src/*.egg-info"):
            shutil.rmtree(egg_info)
        _init_fixed_commit(repo, pin)
        commit = out("rev-parse", "HEAD", cwd=repo)
        if pin.base_commit and commit != pin.base_commit:
            raise SeriesError(
                f"the sdist gave base commit {commit[:12]}, the pin expects {pin.base_commit[:12]}; the sdist or the "
                "base recipe changed, update [sdist].base_commit only if that is intended"
            )
    else:
        repo = work / "clone"
        network = source.kind == "git"
        # a full clone of a pinned commit (not every host serves one by name shallowly); a tag's, one commit deep
        shallow = ["--depth", "1", "--branch", pin.tag] if network and not pin.commit else []
        at = f"tag {pin.tag}" if shallow else source.ref[:12]
        log(f"cloning {source.location} at {at}" + (" (read-only for the original)" * (not network)))
        try:  # over the network with the person's configuration (a proxy, url.insteadOf), as their own git would
            git("clone", "--quiet", "--no-checkout", *shallow, "--", source.location, repo, user_config=network)
        except SeriesError as exc:
            if network:
                raise SeriesError(f"cannot clone {source.location} (is it reachable from here?): {exc}") from None
            raise
        git("checkout", "--quiet", "-B", BASE_BRANCH, "HEAD" if shallow else source.ref, cwd=repo)
        git("remote", "remove", "origin", cwd=repo, check=False)
        others = [ref for ref in out("for-each-ref", "--format=%(refname)", cwd=repo).splitlines() if ref != BASE_REF]
        git("update-ref", "--stdin", cwd=repo, stdin="".join(f"delete {ref}\n" for ref in others))
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


def download_sdist(ws: Workspace, pin: Pin, log: Log) -> Path:
    """The sdist in ``downloads/``: downloaded once into the run's scratch folder, kept only once its sha256 matches."""
    ws.downloads.mkdir(parents=True, exist_ok=True)
    kept = kept_download(ws, pin)
    if kept is not None:
        return kept
    log(f"downloading {pin.sdist_url}")
    ws.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.scratch) as scratch:
        partial = Path(scratch) / pin.sdist_filename
        try:
            with urllib.request.urlopen(pin.sdist_url, timeout=120) as response, partial.open("xb") as sink:
                shutil.copyfileobj(response, sink)
                stage("fetch-download")
        except (urllib.error.URLError, OSError) as exc:
            raise SeriesError(f"cannot download {pin.sdist_url}: {getattr(exc, 'reason', exc)}") from None
        actual = _sha256(partial)
        if actual != pin.sdist_sha256:
            raise SeriesError(
                f"sha256 mismatch for {pin.sdist_filename}: expected {pin.sdist_sha256}, got {actual}; refusing to "
                "use it"
            )
        target = ws.downloads / pin.sdist_filename
        partial.replace(target)
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


def safe_extract(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``; an entry that would land outside it, a link or a ``.git`` is refused."""
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_worktree(ws: Workspace, repo: Path, suffix: str = "base") -> Path:
    """A fresh worktree of ``repo``'s base commit in the run's scratch folder (objects shared, nothing copied), which
    goes with that folder: a tree of the tool's never has a worktree of the tool's beside it."""
    worktree = ws.scratch / f"{repo.name}-{suffix}"
    remove(worktree)
    ws.scratch.mkdir(parents=True, exist_ok=True)
    git("worktree", "prune", cwd=repo)  # forgets the worktrees whose folder went with an earlier run's scratch
    git("worktree", "add", "--quiet", "--detach", worktree, BASE_REF, cwd=repo)
    return worktree
