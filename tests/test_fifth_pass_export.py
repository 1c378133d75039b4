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

from conftest import RELEASE_FILES, TOOL, Synthetic, cli, commit, git, make_sdist, write_pin
from conftest import files_of as _files
from conftest import one_error as _error
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


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    """Run a remedy's command line exactly as the error line writes it, by a shell."""
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


def test_r2_export_never_removes_a_listed_byte_copy_of_an_exported_patch(synthetic):
    """The re-check: an exact copy of an exported patch under a name of the person's own, listed in ``series``, was
    removed (its bytes lived on in the original, but the person's file and its line in ``series`` went)."""
    patches, series = synthetic.ws.patches, synthetic.ws.series_file
    original = sorted(patches.glob("0002-*.patch"))[0]
    own = patches / "0003-my-own.patch"
    own.write_bytes(original.read_bytes())
    series.write_text(series.read_text() + f"{own.name}\n")
    before = _files(patches)

    error = _error(synthetic.run("export"))

    assert f"{own}" in error
    assert _files(patches) == before
    assert _shell(_between(error, "cp ")).returncode == 0  # keep a copy, as it says: then the export runs
    exported = synthetic.run("export")
    assert exported.returncode == 0, exported.stderr
    assert own.with_name(own.name + ".mine").read_bytes() == original.read_bytes()


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
    exported = _shell(_between(second, f"{TOOL} export"))
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
    carried = _shell(_between(error, f"{TOOL} edit"))
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


def _without_the_tool(tmp_path: Path) -> tuple[dict[str, str], Path]:
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


def _their_shell(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=False, env=env, cwd=cwd)


def test_h4_a_printed_remedy_runs_in_a_shell_whose_python_is_not_the_tools(synthetic, tmp_path):
    env, here = _without_the_tool(tmp_path)
    tree = synthetic.ws.trees / "sdist-1.0"
    assert synthetic.run("apply").returncode == 0
    commit(tree, {CORE: "def answer():\n    return 51\n"}, "Mine\n\nUpstream-Status: Pending")

    error = _error(synthetic.run("apply"))

    moved = _their_shell(_between(error, "mv "), env, here)
    assert moved.returncode == 0, moved.stderr
    export = error.split("export your commits from there (", 1)[1].split(")", 1)[0]
    exported = _their_shell(export, env, here)
    assert exported.returncode == 0, f"{export}\n{exported.stderr}"
    assert _subjects(synthetic.ws.patches)[-1] == "Subject: [PATCH] Mine"
    # an option's refusal names the help as a command too
    refused = cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", "")
    helped = _their_shell(_error(refused).split("; see ", 1)[1], env, here)
    assert helped.returncode == 0, helped.stderr
    assert "--checkout" in helped.stdout


@pytest.mark.parametrize("remedy_index", [0, 1], ids=["convert_back", "reexport"])
@pytest.mark.parametrize("converted", ["series", "patch"])
def test_h5_checks_drift_remedy_runs_as_written_with_the_runs_options(synthetic, tmp_path, converted, remedy_index):
    """Both remedies of a CRLF drift work as written: converting the file back (which needs no edit tree: the re-check
    found the export remedy failing where none exists) and re-exporting with the run's own options."""
    env, here = _without_the_tool(tmp_path)
    target = synthetic.ws.series_file if converted == "series" else sorted(synthetic.ws.patches.glob("*.patch"))[0]
    exported = target.read_bytes()
    target.write_bytes(exported.replace(b"\n", b"\r\n"))  # an editor's or git's autocrlf conversion

    checked = synthetic.run("check")

    assert checked.returncode == 1, checked.stdout + checked.stderr
    drift = [line for line in checked.stdout.splitlines() if line.startswith("drift:")]
    assert len(drift) == 1, checked.stdout
    convert, reexport = drift[0].split("`")[1::2]
    assert str(target) in convert, convert
    # its own series and work directory (run without them, it would act on the project's patches/)
    assert f"--patches {synthetic.ws.patches}" in reexport, reexport
    assert f"--workdir {synthetic.ws.workdir}" in reexport, reexport
    remedy = (convert, reexport)[remedy_index]
    rerun = _their_shell(remedy, env, here)
    assert rerun.returncode == 0, f"{remedy}\n{rerun.stderr}"
    assert target.read_bytes() == exported
    again = synthetic.run("check")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "ok: 2 patches equal a fresh export" in again.stdout


@pytest.mark.parametrize("refused", ["inside a git tree", "a file"])
def test_m_a_refused_patchseries_workdir_is_named_as_the_variable(synthetic, tmp_path, refused):
    workdir = synthetic.tree if refused == "inside a git tree" else tmp_path / "afile"
    if refused == "a file":
        workdir.write_text("")
    env = {**os.environ, "PATCHSERIES_WORKDIR": str(workdir)}

    error = _error(cli("apply", "--patches", str(synthetic.ws.patches), env=env))

    assert "it comes from PATCHSERIES_WORKDIR: set that to a" in error
    assert "--workdir" not in error  # no option was passed: the variable is what to change


def test_m_export_from_a_tree_that_does_not_exist_says_so(synthetic, tmp_path):
    missing = tmp_path / "nonexist"

    error = _error(synthetic.run("export", "--tree", str(missing)))

    assert error.startswith(f"error: --tree {missing} does not exist;"), error
    assert "or pass --tree" not in error


def test_m_patches_that_is_a_file_says_it_is_not_a_directory(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")

    for command in ("check", "status"):
        error = _error(cli(command, "--patches", str(afile), "--workdir", str(tmp_path / "work")))

        assert error.startswith(f"error: --patches {afile} is not a directory;"), error
        assert "check that path" not in error
