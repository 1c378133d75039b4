"""Issue 43, the tool's fifth hostile pass, the wheel rows: ``wheels`` and ``test-wheels`` on the synthetic release of
test_wheels.py. One test per row (``d<N>``, and ``m<N>`` for the minor ones), each: one ``error:`` line and exit status
2 for a refusal, nothing of a person's removed, ``dist/`` given all wheels in one step or none, and a remedy that works
when run exactly as written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_fourth_hostile_pass import _between, _error, _files, _shell
from test_wheels import FIX, PYTORCH, Release, _members, _release, record_fingerprint

from conftest import TOOL, cli, commit, git
from patchseries.export import export_series
from patchseries.paths import Workspace
from patchseries.pin import load_pin
from patchseries.series import fingerprint, read_series
from patchseries.standalone import load_wheel_pin
from patchseries.wheeldist import RECORD_NAME, STAGING

VERSION = "1.0+series.3"
PACKAGES = ("fakelib", "fakelib_pytorch", "fakelib_fabric")


@pytest.fixture
def release(tmp_path: Path) -> Release:
    return _release(tmp_path, FIX)


def _wheel(release: Release, package: str, version: str = VERSION) -> Path:
    return release.dist / f"{package}-{version}-py3-none-any.whl"


def _record(wheel: Path) -> dict:  # type: ignore[type-arg]
    members = _members(wheel)
    return json.loads(next(data for name, data in members.items() if name.endswith(f".dist-info/{RECORD_NAME}")))


def _add_commit(release: Release, message: str, *git_args: str) -> None:
    """A commit of the edit tree made by ``git_args`` (after the files are changed), then the series exported."""
    git(release.tree, *git_args)
    git(release.tree, "commit", "-q", "--date=2026-02-01T00:00:00+0000", "-m", message)
    export_series(release.tree, release.ws.patches, branch="series")
    record_fingerprint(release.ws)


def _change_series(ws: Workspace) -> None:
    first = sorted(ws.patches.glob("*.patch"))[0]
    first.write_text(first.read_text().replace("Subject: [PATCH] Fix the answer", "Subject: [PATCH] Fix the answers"))


def _inodes(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_ino for path in folder.iterdir()}


def test_d1_dist_gets_all_wheels_in_one_step_or_none(release: Release):
    theirs = _wheel(release, "fakelib_fabric")
    theirs.mkdir(parents=True)
    (theirs / "mine.txt").write_text("mine\n")

    error = _error(release.wheels())

    assert str(theirs) in error
    assert sorted(release.dist.iterdir()) == [theirs]  # no wheel renamed in beside it
    assert (theirs / "mine.txt").read_text() == "mine\n"
    assert not release.ws.trees.exists()  # refused before any build
    assert _shell(_between(error, "mv ")).returncode == 0  # the remedy, as written
    assert (theirs.with_name(theirs.name + ".mine") / "mine.txt").read_text() == "mine\n"
    # an interrupt after the first wheel was renamed in: that rename is undone
    interrupted = release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheel-renamed"})
    assert interrupted.returncode == 130, interrupted.stderr
    assert not list(release.dist.glob("*.whl"))
    # over the wheels of an earlier build: they are left exactly as they were (the same files)
    assert release.wheels().returncode == 0
    before = _inodes(release.dist)
    assert release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheel-renamed"}).returncode == 130
    assert _inodes(release.dist) == before


def test_d3_a_commit_that_renames_or_deletes_a_source_file_builds(release: Release):
    _add_commit(release, "Rename the core\n\nUpstream-Status: Pending", "mv", "src/fakelib/pytorch/core.py",
                "src/fakelib/pytorch/engine.py")  # fmt: skip
    _add_commit(release, "Drop the util\n\nUpstream-Status: Pending", "rm", "-q", "src/fakelib/fabric/util.py")

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    unified = _members(_wheel(release, "fakelib"))
    assert "fakelib/pytorch/engine.py" in unified
    assert "fakelib/pytorch/core.py" not in unified
    assert "fakelib/fabric/util.py" not in unified
    pytorch = _members(_wheel(release, "fakelib_pytorch"))
    assert "fakelib_pytorch/engine.py" in pytorch
    assert "fakelib_pytorch/core.py" not in pytorch
    assert "fakelib_fabric/util.py" not in _members(_wheel(release, "fakelib_fabric"))


def test_d4_test_wheels_refuses_an_unknown_torch_as_test_does(release: Release):
    workdir = release.ws.workdir.with_name("fresh")
    options = ("--torch", "9.9.9", "--patches", str(release.ws.patches), "--workdir", str(workdir))

    error = _error(cli("test-wheels", *options))

    assert error == _error(cli("test", *options))
    assert "newer than every release this tool knows" in error
    assert not workdir.exists()  # refused before anything was made


def test_d7_the_remedy_of_test_wheels_carries_the_runs_options(release: Release, tmp_path: Path):
    other = tmp_path / "other dist"
    options = ("--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir), "--dist", str(other))
    record_fingerprint(release.ws)
    missing = _error(cli("test-wheels", *options, "--package", "fakelib_pytorch"))
    assert "there is no fakelib_pytorch" in missing
    built = _shell(_between(missing, f"{TOOL} wheels"))  # builds into --dist, as the run had it
    assert built.returncode == 0, built.stderr
    assert len(list(other.glob("*.whl"))) == 3
    _change_series(release.ws)  # a maintainer changed the series and forgot to raise series_version
    wanted = record_fingerprint(release.ws)

    error = _error(cli("test-wheels", *options, "--package", "fakelib_pytorch"))

    assert "was built from another series" in error
    assert f'raise series_version in [wheels] of base.toml and set its fingerprint = "{wanted}"' in error
    release.ws.pin_file.write_text(release.ws.pin_file.read_text().replace("series_version = 3", "series_version = 4"))
    remedy = _between(error, f"{TOOL} wheels")
    assert "--dist" in remedy
    rebuilt = _shell(remedy)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _record(other / "fakelib_pytorch-1.0+series.4-py3-none-any.whl")["series"]["fingerprint"] == wanted


def test_d8_a_persons_files_in_dist_are_never_removed_or_overwritten(release: Release):
    release.dist.mkdir()
    partial = release.dist / f"fakelib-{VERSION}-py3-none-any.whl.partial"
    partial.write_text("mine\n")
    theirs = _wheel(release, "fakelib_pytorch")
    theirs.write_text("my own wheel\n")

    error = _error(release.wheels())

    assert str(theirs) in error
    assert theirs.read_text() == "my own wheel\n"
    assert partial.read_text() == "mine\n"
    assert set(release.dist.iterdir()) == {theirs, partial}
    assert _shell(_between(error, "mv ")).returncode == 0
    built = release.wheels()
    assert built.returncode == 0, built.stderr
    assert partial.read_text() == "mine\n"
    assert theirs.with_name(theirs.name + ".mine").read_text() == "my own wheel\n"
    assert release.wheels().returncode == 0  # a wheel the tool built is replaced


def test_d9_a_patch_that_only_changes_a_file_mode_is_applied(release: Release):
    (release.tree / "src/fakelib/pytorch/core.py").chmod(0o755)
    _add_commit(release, "Make the core runnable\n\nUpstream-Status: Pending", "add", "src/fakelib/pytorch/core.py")
    options = ("--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir))

    fetched = cli("fetch", *options)
    built = release.wheels()

    assert fetched.returncode == 0, fetched.stderr
    assert "already present" not in fetched.stderr
    tree = release.ws.trees / "sdist-1.0"
    assert git(tree, "ls-tree", "series", "src/fakelib/pytorch/core.py").startswith("100755 ")
    assert built.returncode == 0, built.stderr
    for package in ("fakelib", "fakelib_pytorch"):
        entries = {e["name"][:4]: e["in_this_package"] for e in _record(_wheel(release, package))["series"]["patches"]}
        assert entries["0002"] is True, package


def test_d10_the_summary_counts_the_patches_the_record_names(release: Release):
    commit(release.tree, {"tests/tests_pytorch/test_more.py": "def test_more():\n    pass\n"},
           "Add a test\n\nUpstream-Status: Pending")  # fmt: skip
    export_series(release.tree, release.ws.patches, branch="series")
    record_fingerprint(release.ws)

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    for package in PACKAGES:
        wheel = _wheel(release, package)
        line = next(line for line in proc.stdout.splitlines() if line.strip().startswith(str(wheel)))
        counted = int(line.rsplit("(", 1)[1].split()[0])
        assert counted == sum(e["in_this_package"] for e in _record(wheel)["series"]["patches"]), line


def test_m1_a_dist_that_is_a_file_is_refused_before_any_build(release: Release):
    release.dist.write_text("mine\n")

    error = _error(release.wheels())

    assert f"{release.dist} is a file" in error
    assert release.dist.read_text() == "mine\n"
    assert not release.ws.trees.exists()


def test_m2_a_failed_build_names_the_backends_error(tmp_path: Path):
    backend = "import errno\n\n\ndef get_requires_for_build_wheel(config_settings=None):\n    return []\n\n\n" \
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n" \
        "    raise OSError(errno.EFBIG, 'File too large', wheel_directory)\n"  # fmt: skip
    release = _release(tmp_path, FIX, pytorch={**PYTORCH, "backend.py": backend})

    error = _error(release.wheels())

    assert error.startswith("error: building the fakelib_pytorch wheel failed")
    assert "OSError: [Errno 27] File too large" in error
    assert not release.dist.exists()


def test_m3_a_dist_inside_the_work_directory_is_refused(release: Release):
    assert release.wheels().returncode == 0
    inside = release.ws.trees / "sdist-1.0" / "dist"

    error = _error(cli("wheels", "--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir),
                       "--dist", str(inside)))  # fmt: skip

    assert str(inside) in error
    assert not inside.exists()
    assert release.wheels().returncode == 0  # the tree is still as the tool built it


def test_m4_a_changed_series_does_not_carry_the_released_version(release: Release):
    record_fingerprint(release.ws)
    assert release.wheels().returncode == 0
    released = sorted(path.name for path in release.dist.iterdir())
    _change_series(release.ws)
    changed = fingerprint(read_series(release.ws.series_file))

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    dev = f"1.0+changed.3.{changed[:12]}"
    assert sorted(path.name for path in release.dist.iterdir()) == sorted(
        released + [f"{package}-{dev}-py3-none-any.whl" for package in PACKAGES]
    )
    assert _record(_wheel(release, "fakelib", dev))["version"] == dev
    assert "raise series_version" in proc.stdout


def test_m4_the_committed_series_builds_the_documented_version():
    ws = Workspace.default()
    wheel_pin = load_wheel_pin(ws.pin_file, load_pin(ws.pin_file)).for_series(read_series(ws.series_file))
    # README's `pip install dist/lightning-2.6.6+series.6-...whl`: a changed series must be released in base.toml
    assert wheel_pin.is_released, (
        f"patches/ is not the series recorded for series v{wheel_pin.series_version}: raise series_version in "
        f'[wheels] of {ws.pin_file} and set fingerprint = "{wheel_pin.series}"'
    )
    assert wheel_pin.local_version == f"{wheel_pin.pin.version}+series.{wheel_pin.series_version}"


def _wheels_of(release: Release, dist: Path, workdir: Path) -> list[str]:
    """The command line of ``wheels`` into ``dist`` from the work directory ``workdir``."""
    return [sys.executable, "-m", "patchseries", "wheels", "--patches", str(release.ws.patches), "--workdir",
            str(workdir), "--dist", str(dist)]  # fmt: skip


def _continue(pid: int) -> int:
    """Let a run that stops itself at each of its stages go on to its end; its wait status."""
    while True:
        os.kill(pid, signal.SIGCONT)
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return status


def test_h1_a_run_from_another_work_directory_never_touches_a_dist_folder_being_written(
    release: Release, tmp_path: Path
):
    assert release.wheels().returncode == 0
    wanted = fingerprint(read_series(release.ws.series_file))
    # the same names, other wheels (of the same series): the first run keeps the old ones aside
    env = {**os.environ, "PATCHSERIES_SIGNAL_AT": "wheel-renamed:SIGSTOP", "FAKELIB_BUILD": "2"}
    command = _wheels_of(release, release.dist, release.ws.workdir)
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)  # returns once the first run has stopped itself
        assert os.WIFSTOPPED(status)
        staging = release.dist / STAGING
        held = _files(staging)
        assert any(name.startswith("replaced/") for name in held)

        error = _error(cli(*_wheels_of(release, release.dist, tmp_path / "other work")[3:]))

        assert str(release.dist) in error
        assert "another patchseries run" in error
        assert _files(staging) == held  # the first run's staging folder and its backups, untouched
    finally:
        status = _continue(first.pid)
    assert os.waitstatus_to_exitcode(status) == 0, first.stderr.read()  # type: ignore[union-attr]
    assert sorted(path.name for path in release.dist.iterdir()) == sorted(
        _wheel(release, package).name for package in PACKAGES
    )
    assert all(_record(_wheel(release, package))["series"]["fingerprint"] == wanted for package in PACKAGES)


def test_h2_a_killed_runs_staging_folder_is_removed_only_when_all_of_it_is_the_tools(release: Release):
    assert release.wheels().returncode == 0
    first = _wheel(release, "fakelib")  # the first wheel renamed in
    old = first.read_bytes()
    # other wheels of the same names (another build of the same series)
    killed = release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheel-renamed:SIGKILL", "FAKELIB_BUILD": "2"})
    assert killed.returncode == -signal.SIGKILL
    staging = release.dist / STAGING
    assert (staging / "replaced" / first.name).read_bytes() == old  # the only copy of the wheel it replaced
    (staging / "my-notes.txt").write_text("notes\n")

    error = _error(release.wheels())

    assert str(staging / "my-notes.txt") in error
    assert (staging / "my-notes.txt").read_text() == "notes\n"
    assert (staging / "replaced" / first.name).read_bytes() == old
    assert _shell(_between(error, "mv ")).returncode == 0  # the remedy, as written
    built = release.wheels()
    assert built.returncode == 0, built.stderr
    kept = staging.with_name(staging.name + ".mine")
    assert (kept / "my-notes.txt").read_text() == "notes\n"
    assert (kept / "replaced" / first.name).read_bytes() == old
    # a leftover of the tool's alone: the wheel it kept aside is put back where it was, then the leftover goes
    old = first.read_bytes()
    killed = release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheel-renamed:SIGKILL", "FAKELIB_BUILD": "3"})
    assert killed.returncode == -signal.SIGKILL
    assert first.read_bytes() != old
    _change_series(release.ws)  # a series not recorded: wheels of other names, which leave these alone
    built = release.wheels()
    assert built.returncode == 0, built.stderr
    assert first.read_bytes() == old
    assert not staging.exists()
    assert not staging.with_name(staging.name + ".patchseries-scratch").exists()


def test_h3_a_tool_wheel_a_person_changed_is_not_overwritten(release: Release):
    assert release.wheels().returncode == 0
    wheel = _wheel(release, "fakelib_pytorch")
    with zipfile.ZipFile(wheel, "a") as archive:  # zip -q WHEEL MYNOTE.txt
        archive.writestr("MYNOTE.txt", "my note\n")
    edited = wheel.read_bytes()

    error = _error(release.wheels())

    assert str(wheel) in error
    assert "MYNOTE.txt" in error
    assert wheel.read_bytes() == edited
    assert _shell(_between(error, "mv ")).returncode == 0  # the remedy, as written
    built = release.wheels()
    assert built.returncode == 0, built.stderr
    assert wheel.with_name(wheel.name + ".mine").read_bytes() == edited


def test_h6_a_dist_with_a_control_character_is_refused_before_any_work(release: Release, tmp_path: Path):
    release.dist = tmp_path / "my\ndist"
    release.dist.mkdir()
    theirs = _wheel(release, "fakelib")
    theirs.write_text("my own wheel\n")

    error = _error(release.wheels())

    assert "control character" in error
    assert repr(str(release.dist)) in error  # one line, the newline written as \n
    assert sorted(release.dist.iterdir()) == [theirs]
    assert theirs.read_text() == "my own wheel\n"
    assert not release.ws.trees.exists()


def test_h7_a_patch_with_crlf_line_endings_is_refused_as_check_names_it(release: Release):
    patch = sorted(release.ws.patches.glob("*.patch"))[0]
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    record_fingerprint(release.ws)

    error = _error(release.wheels())

    cause = f"{patch.name} has CRLF line endings, which export does not write; convert it back with `"
    assert error.startswith(f"error: {cause}")
    assert not release.dist.exists()
    assert not (release.ws.downloads / "fakelib_pytorch-1.0.tar.gz").exists()  # refused before any download
    checked = cli("check", "--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir))
    assert f"drift: {error.removeprefix('error: ')}" in checked.stdout.splitlines()  # check's words, remedy and all
    converted = _shell(error.split("`")[1])  # the first remedy, as written
    assert converted.returncode == 0, converted.stderr
    record_fingerprint(release.ws)
    built = release.wheels()
    assert built.returncode == 0, built.stderr


def test_h8_a_hand_made_rename_patch_is_mapped_and_builds(release: Release):
    git(release.tree, "mv", "src/fakelib/pytorch/core.py", "src/fakelib/pytorch/spike.py")
    git(release.tree, "commit", "-q", "--date=2026-02-01T00:00:00+0000", "-m", "Rename the core\n\nUpstream-Status: "
        "Pending")  # fmt: skip
    made = git(release.tree, "format-patch", "-M", "--start-number", "2", "-1", "-o", str(release.ws.patches))
    assert "rename from src/fakelib/pytorch/core.py" in Path(made).read_text()  # git's own rename patch
    with release.ws.series_file.open("a") as series:
        series.write(f"{Path(made).name}\n")
    record_fingerprint(release.ws)

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    pytorch = _members(_wheel(release, "fakelib_pytorch"))
    assert b"helper() + 41" in pytorch["fakelib_pytorch/spike.py"]
    assert "fakelib_pytorch/core.py" not in pytorch
    assert "fakelib/pytorch/spike.py" in _members(_wheel(release, "fakelib"))


def test_h9_an_unknown_patch_release_of_a_known_torch_is_refused_before_any_work(release: Release):
    workdir = release.ws.workdir.with_name("fresh")
    options = ("--patches", str(release.ws.patches), "--workdir", str(workdir))

    error = _error(cli("test-wheels", "--torch", "2.13.0", "--torch", "2.14.9", "--dist", str(release.dist), *options))

    assert "torch 2.14.9 is not a release" in error
    assert "2.14.1" in error  # the newest release of 2.14 the tool knows
    assert error == _error(cli("test", "--torch", "2.14.9", *options))
    assert not workdir.exists()  # refused before anything was made
