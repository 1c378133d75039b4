"""Fixtures: a small synthetic release (an sdist on disk) and a synthetic series made against it.

The pipeline's tests use these, so they do not depend on which Lightning patches exist or on the network.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchseries.export import export_series
from patchseries.interrupts import SIGNAL_AT_ENV
from patchseries.paths import Workspace
from patchseries.pin import Pin, load_pin
from patchseries.progress import quiet
from patchseries.trees import BaseTree, edit_tree, resolve_source, tool_tree

# How a remedy writes the tool's own command: the interpreter it runs under, by its absolute path (the tests run it
# as sys.executable), so that it runs as written in any shell (`python -m patchseries` would not)
TOOL = shlex.join([sys.executable, "-m", "patchseries"])
# the person's identity, for the commits a remedy makes in their own tree (git cherry-pick, git am)
PERSON = {
    "GIT_AUTHOR_NAME": "Person",
    "GIT_AUTHOR_EMAIL": "person@example.com",
    "GIT_COMMITTER_NAME": "Person",
    "GIT_COMMITTER_EMAIL": "person@example.com",
}
INTERRUPTED = "error: interrupted; re-run the same command to resume from a clean state"
RELEASE_FILES = {
    "src/fakelib/__init__.py": "VERSION = '1.0'\n",
    "src/fakelib/core.py": "def answer():\n    return 41\n",
    "src/fakelib/CHANGELOG.md": "# Changelog\n\n## [unreleased]\n\n### Fixed\n\n-\n",
    "pyproject.toml": "[project]\nname = 'fakelib'\nversion = '1.0'\n",
}


@dataclass
class Synthetic:
    """A synthetic release and series; ``ws`` points at them, ``tree`` is where the series was authored (the tree
    ``patchseries edit`` makes, which ``export`` reads by default)."""

    ws: Workspace
    sdist: Path
    tree: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the command line in a fresh interpreter, as a user would."""
        command = [sys.executable, "-m", "patchseries", *args, "--patches", str(self.ws.patches)]
        command += ["--workdir", str(self.ws.workdir)]
        return subprocess.run(command, capture_output=True, text=True, check=False)


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m patchseries`` with exactly these arguments."""
    command = [sys.executable, "-m", "patchseries", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd, env=env)


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The run's only ``error:`` line: a refusal is one line and exit status 2, never a traceback."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return errors[0]


def run_signalled(synthetic: Synthetic, tmp_path: Path, stage: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line in a fresh interpreter that signals itself at ``stage`` (SIGTERM unless it names one)."""
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir(exist_ok=True)
    env = {**os.environ, SIGNAL_AT_ENV: stage, "TMPDIR": str(system_tmp)}
    command = [sys.executable, "-m", "patchseries", *args, "--patches", str(synthetic.ws.patches)]
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env)


def continue_stopped(pid: int) -> int:
    """Let a run that stops itself (``PATCHSERIES_SIGNAL_AT=<stage>:SIGSTOP``) go on to its end; its wait status."""
    while True:
        os.kill(pid, signal.SIGCONT)
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return status


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and link under ``folder`` (``.git`` included) with a digest of its content or target."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            key = str(path.relative_to(folder))
            if path.is_symlink():
                found[key] = f"-> {os.readlink(path)}"
            elif path.is_file():
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def change_patches(patches: Path, new_subject: str = "Add the CHANGELOG entry") -> None:
    """What a `git pull` that brings a changed patch does to patches/: the second patch reworded."""
    second = sorted(patches.glob("*.patch"))[1]
    text = second.read_text()
    old_subject = text.split("Subject: [PATCH] ", 1)[1].splitlines()[0]
    second.write_text(text.replace(f"Subject: [PATCH] {old_subject}", f"Subject: [PATCH] {new_subject}"))


def between(error: str, start: str, end: str = ")") -> str:
    """The command a remedy names in ``error``: from ``start`` up to ``end``."""
    return start + error.split(start, 1)[1].split(end, 1)[0]


def shell(command: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a remedy's command line exactly as the error line writes it, by a shell, as the person (``PERSON``)."""
    env = env if env is not None else {**os.environ, **PERSON}
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=False, cwd=cwd, env=env)


def without_the_tool(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A person's shell: no ``patchseries`` on its PATH, a ``python`` (and ``python3``) that is not the tool
    environment's (it has no patchseries), no PYTHONPATH; and a current directory of its own, outside the project."""
    fake = tmp_path / "their-bin"
    fake.mkdir()
    for name in ("python", "python3"):
        (fake / name).write_text('#!/bin/sh\necho "$0: No module named patchseries" >&2\nexit 1\n')
        (fake / name).chmod(0o755)
    tool_bin = Path(sys.executable).parent.resolve()
    kept = [
        entry
        for entry in os.environ["PATH"].split(os.pathsep)
        if entry and not (Path(entry) / "patchseries").exists() and Path(entry).resolve() != tool_bin
    ]
    path = os.pathsep.join([str(fake), *kept])
    assert shutil.which("patchseries", path=path) is None
    assert shutil.which("python", path=path) == str(fake / "python")
    hidden = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {**{k: v for k, v in os.environ.items() if k not in hidden}, **PERSON, "PATH": path}
    here = tmp_path / "elsewhere"
    here.mkdir()
    return env, here


def make_sdist(directory: Path, files: dict[str, str], root: str = "fakelib-1.0") -> Path:
    archive = directory / f"{root}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid, info.gid = 4242, 4242  # a packager's ids, as real sdists carry: never this machine's user
            tar.addfile(info, io.BytesIO(data))
    return archive


def write_pin(patches: Path, sdist: Path, **overrides: str) -> None:
    values = {
        "sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(),
        "url": sdist.as_uri(),
        "git_url": "https://git.invalid/fakelib.git",
        "base_commit": "",
        **overrides,
    }
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "base.toml").write_text(
        "[base]\n"
        'name = "fakelib"\nversion = "1.0"\ntag = "1.0"\n'
        f'git_url = "{values["git_url"]}"\nrelease_date = "2026-01-01"\n\n'
        "[sdist]\n"
        f'url = "{values["url"]}"\nsha256 = "{values["sha256"]}"\nroot = "fakelib-1.0"\n'
        f'base_commit = "{values["base_commit"]}"\nlacks = ["tests/", "docs/"]\n'
    )


def git(tree: Path, *args: str) -> str:
    env_args = ["-c", "user.name=Test Author", "-c", "user.email=author@example.com"]
    proc = subprocess.run(["git", *env_args, *args], cwd=tree, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def commit(tree: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(tree, "add", name)
    git(tree, "commit", "-q", "--date=2026-02-01T00:00:00+0000", "-m", message)


def make_base(
    ws: Workspace, pin: Pin, checkout: Path | None = None, use_git: bool = False, force: bool = False
) -> BaseTree:
    """The tool's tree of a base with an empty series: how the tests get a base from each source."""
    source = resolve_source(ws, pin, checkout, use_git, force)
    ws.workdir.mkdir(parents=True, exist_ok=True)
    return tool_tree(ws, pin, [], source, quiet)[0]


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    """``main()`` ignores interrupts once its work is done (for the process's last moments): not for the next test."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


@pytest.fixture
def synthetic(tmp_path: Path) -> Synthetic:
    """A release with two patches: a fix with a new test file, and a change to the CHANGELOG."""
    sdist = make_sdist(tmp_path, RELEASE_FILES)
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")
    write_pin(ws.patches, sdist)
    pin = load_pin(ws.pin_file)
    tree = edit_tree(ws, pin, [], resolve_source(ws, pin, None, False, False), quiet)  # as `patchseries edit` does
    commit(
        tree,
        {
            "src/fakelib/core.py": "def answer():\n    return 42\n",
            "tests/tests_pytorch/core/test_answer.py": "from fakelib.core import answer\n\n\n"
            "def test_answer():\n    assert answer() == 42\n",
        },
        "Fix the answer\n\nUpstream-Status: Pending\nBug: https://example.invalid/1",
    )
    commit(
        tree,
        {"src/fakelib/CHANGELOG.md": RELEASE_FILES["src/fakelib/CHANGELOG.md"].replace("-\n", "- Fixed the answer\n")},
        "Add a CHANGELOG entry\n\nUpstream-Status: Pending",
    )
    export_series(tree, ws.patches, branch="series")
    return Synthetic(ws=ws, sdist=sdist, tree=tree)


@pytest.fixture
def upstream_clone(tmp_path: Path) -> Path:
    """A stand-in for a user's upstream checkout, tagged 1.0."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q")
    for name, text in RELEASE_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release")
    git(repo, "tag", "1.0")
    return repo
