"""Issue 43, the tool's fifth hostile pass, the export, remedy and check rows: one test per row (``d<N>``). Each:
nothing of a person's is removed, whatever its name; one ``error:`` line whose remedies, run exactly as written
through a shell, work; and ``check --onto`` judges each patch on its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RELEASE_FILES, Synthetic, cli, commit, git, make_sdist, write_pin
from patchseries.export import format_one

CORE = "src/fakelib/core.py"
DOCS = "docs/index.rst"
# the person's identity, for the commits a remedy makes in their own tree (git cherry-pick, git am)
PERSON = {
    "GIT_AUTHOR_NAME": "Person",
    "GIT_AUTHOR_EMAIL": "person@example.com",
    "GIT_COMMITTER_NAME": "Person",
    "GIT_COMMITTER_EMAIL": "person@example.com",
}


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return errors[0]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    """Run a remedy's command line exactly as the error line writes it, by a shell (``python`` is this Python)."""
    command = command.replace("python -m patchseries", f"{sys.executable} -m patchseries")
    env = {**os.environ, **PERSON}
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=False, env=env)


def _between(error: str, start: str, end: str = ")") -> str:
    return start + error.split(start, 1)[1].split(end, 1)[0]


def _subjects(patches: Path) -> list[str]:
    return [
        next(line for line in p.read_text().splitlines() if line.startswith("Subject: "))
        for p in sorted(patches.glob("*.patch"))
    ]


@pytest.mark.parametrize("mine", ["a copy with its own subject", "a change of its own"])
def test_d2_export_never_removes_a_listed_patch_that_no_export_wrote(synthetic, tmp_path, mine):
    patches, series = synthetic.ws.patches, synthetic.ws.series_file
    own = patches / "0003-my-own.patch"
    if mine == "a copy with its own subject":  # the steps: cp 0002-*.patch 0003-my-own.patch, a new Subject
        copied = sorted(patches.glob("0002-*.patch"))[0].read_text()
        own.write_text(copied.replace("Subject: [PATCH] Add a CHANGELOG entry", "Subject: [PATCH] My own change"))
    else:  # a patch of the person's, made in a clone of their own: a change the tree has not seen
        clone = tmp_path / "clone"
        subprocess.run(["git", "clone", "-q", "--branch", "series", str(synthetic.tree), str(clone)], check=True)
        commit(clone, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "My own change\n\nUpstream-Status: Pending")
        own.write_text(format_one(clone, "HEAD"))
    series.write_text(series.read_text() + f"{own.name}\n")
    mine_bytes, before = own.read_bytes(), _files(patches)

    error = _error(synthetic.run("export"))

    assert f"{own}" in error
    assert "nothing was written" in error
    assert _files(patches) == before
    if mine == "a copy with its own subject":  # its change is on the branch already: a copy of it is kept
        kept = _shell(_between(error, "cp "))
        assert kept.returncode == 0, kept.stderr
        assert own.with_name(own.name + ".mine").read_bytes() == mine_bytes
        expected = 2
    else:  # put on the branch, it is exported: its bytes are the new patch's
        applied = _shell(_between(error, "git -C "))
        assert applied.returncode == 0, applied.stderr
        expected = 3
    exported = synthetic.run("export")
    assert exported.returncode == 0, exported.stderr
    assert f"exported {expected} patches" in exported.stdout
    if expected == 3:
        assert sorted(patches.glob("0003-*.patch"))[0].read_bytes() == mine_bytes


def test_d5_a_second_refusals_move_names_a_free_folder(synthetic):
    trees = synthetic.ws.trees
    tree = trees / "sdist-1.0"
    assert synthetic.run("apply").returncode == 0
    commit(tree, {CORE: "def answer():\n    return 51\n"}, "Mine, first\n\nUpstream-Status: Pending")
    first = _error(synthetic.run("apply"))
    assert _shell(_between(first, "mv ")).returncode == 0
    assert synthetic.run("apply").returncode == 0  # a fresh tree
    commit(tree, {CORE: "def answer():\n    return 52\n"}, "Mine, second\n\nUpstream-Status: Pending")

    second = _error(synthetic.run("apply"))

    assert f"{tree}.mine-2" in second
    assert _shell(_between(second, "mv ")).returncode == 0
    assert git(tree.with_name("sdist-1.0.mine"), "log", "-1", "--format=%s") == "Mine, first"
    assert git(tree.with_name("sdist-1.0.mine-2"), "log", "-1", "--format=%s") == "Mine, second"
    exported = _shell(_between(second, "python -m patchseries export"))
    assert exported.returncode == 0, exported.stderr
    assert _subjects(synthetic.ws.patches)[-1] == "Subject: [PATCH] Mine, second"


@pytest.fixture
def upstream_synthetic(tmp_path: Path) -> Synthetic:
    """A synthetic release whose series changes a file its sdist lacks (``docs/``), as Lightning's does: the pin's
    ``git_url`` is an upstream repository with that file at the tag, where the series was made."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q")
    commit(upstream, {**RELEASE_FILES, DOCS: "Fakelib\n"}, "release")
    git(upstream, "tag", "1.0")
    sdist = make_sdist(tmp_path, RELEASE_FILES)
    ws_patches, workdir = tmp_path / "patches", tmp_path / "work"
    write_pin(ws_patches, sdist, git_url=str(upstream))
    git(upstream, "checkout", "-q", "-b", "base")
    git(upstream, "checkout", "-q", "-b", "series")
    commit(upstream, {CORE: "def answer():\n    return 42\n"}, "Fix the answer\n\nUpstream-Status: Pending")
    commit(upstream, {CORE: 'def answer():\n    """The answer."""\n    return 42\n', DOCS: "Fakelib\n\nanswer()\n"},
           "Document the answer\n\nUpstream-Status: Pending")  # fmt: skip
    from patchseries.export import export_series
    from patchseries.paths import Workspace

    export_series(upstream, ws_patches, branch="series")
    return Synthetic(ws=Workspace(patches=ws_patches, workdir=workdir), sdist=sdist, tree=upstream)


def test_d6_the_sdist_trees_remedy_carries_the_persons_commits_without_dropping_hunks(upstream_synthetic):
    synthetic = upstream_synthetic
    assert synthetic.run("apply").returncode == 0
    tree = synthetic.ws.trees / "sdist-1.0"
    commit(tree, {"src/fakelib/__init__.py": "VERSION = '1.1'\n"}, "Mine\n\nUpstream-Status: Pending")
    before = _files(synthetic.ws.patches)

    error = _error(synthetic.run("apply"))

    assert _files(synthetic.ws.patches) == before
    assert _shell(_between(error, "mv ")).returncode == 0
    carried = _shell(_between(error, "python -m patchseries edit"))
    assert carried.returncode == 0, carried.stdout + carried.stderr
    assert _subjects(synthetic.ws.patches) == [
        "Subject: [PATCH] Fix the answer", "Subject: [PATCH] Document the answer", "Subject: [PATCH] Mine",
    ]  # fmt: skip
    assert {n: b for n, b in _files(synthetic.ws.patches).items() if n.startswith(("0001", "0002"))} == {
        n: b for n, b in before.items() if n.startswith(("0001", "0002"))
    }  # the docs hunk the sdist lacks is kept
    assert git(tree.with_name("sdist-1.0.mine"), "log", "-1", "--format=%s") == "Mine"


def test_d11_check_onto_judges_each_patch_on_its_own_when_git_am_abort_fails(synthetic, upstream_clone, tmp_path):
    git(upstream_clone, "checkout", "-q", "-b", "next")
    commit(upstream_clone, {CORE: "def answer():\n    return 40\n"}, "Upstream changed the answer")  # 0001 conflicts
    real = shutil.which("git")
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    # a git whose `am --abort` fails and changes nothing (as when an object it needs is missing)
    wrapper.write_text(f"""#!/bin/sh
am=
for arg in "$@"; do
  [ "$arg" = am ] && am=1
  if [ -n "$am" ] && [ "$arg" = --abort ]; then echo 'error: simulated' >&2; exit 128; fi
done
exec '{real}' "$@"
""")
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}
    options = ("--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir))

    proc = cli("check", "--onto", "next", "--checkout", str(upstream_clone), *options, env=env)

    assert "previous rebase directory" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[1:] == ["conflicts", f"({CORE})"], proc.stdout + proc.stderr
    assert lines[1].split()[1:] == ["applies", "cleanly"], proc.stdout + proc.stderr
    assert proc.returncode == 1
