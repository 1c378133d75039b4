"""`patchseries wheels` and the installed-files check, on a small synthetic release shaped like Lightning's sdists.

The synthetic sdists (``fakelib``, ``fakelib_pytorch``, ``fakelib_fabric``) carry ``src/version.info``, a
``.egg-info`` and an in-tree PEP 517 backend that needs nothing from an index, so the builds are fast and offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import cli, commit, continue_stopped, files_of, git, make_sdist, one_error, write_pin
from patchseries.apply import edit_tree
from patchseries.base import resolve_source, safe_extract
from patchseries.environment import find_uv
from patchseries.export import export_series
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.pin import load_pin
from patchseries.progress import quiet
from patchseries.series import fingerprint, read_series
from patchseries.standalone import load_wheel_pin, map_patch, replace_imports
from patchseries.wheelbuild import RECORD_NAME
from patchseries.wheeltest import check_installed, patched_lines

BACKEND = '''\
"""A minimal PEP 517 backend: src/<package>/** into a wheel, the .egg-info's JSON files into its .dist-info."""

import base64, hashlib, os, pathlib, zipfile

ROOT = pathlib.Path(__file__).parent


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = (ROOT / "NAME").read_text().strip()
    if name == "broken":
        raise SystemExit("error: this backend cannot build")
    version = (ROOT / "src" / "version.info").read_text().strip()
    info = f"{name}-{version}.dist-info"
    files = {}
    for path in sorted((ROOT / "src").rglob("*")):
        relative = path.relative_to(ROOT / "src").as_posix()
        if path.is_file() and "/" in relative and ".egg-info/" not in relative and "__pycache__" not in relative:
            files[relative] = path.read_bytes()
    for record in sorted((ROOT / "src").glob("*.egg-info/*.json")):
        files[f"{info}/{record.name}"] = record.read_bytes()
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n".encode()
    if os.environ.get("FAKELIB_BUILD"):  # another build of the same sources: other bytes
        files[f"{info}/BUILD"] = os.environ["FAKELIB_BUILD"].encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    lines = []
    for member, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{member},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\\n".join([*lines, f"{info}/RECORD,,"]) + "\\n").encode()
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / wheel, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return wheel
'''
PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
CORE = "from fakelib.fabric.util import helper\n\n\ndef answer():\n    return helper() + 40\n"
UTIL = "def helper():\n    return 1\n"


def _sdist_files(name: str, sources: dict[str, str]) -> dict[str, str]:
    return {
        "NAME": f"{name}\n",
        "backend.py": BACKEND,
        "pyproject.toml": PYPROJECT,
        "src/version.info": "1.0\n",
        f"src/{name}.egg-info/PKG-INFO": f"Name: {name}\n",
        **sources,
    }


UNIFIED = _sdist_files(
    "fakelib",
    {
        "src/fakelib/__init__.py": "",
        "src/fakelib/pytorch/__init__.py": "",
        "src/fakelib/pytorch/core.py": CORE,
        "src/fakelib/fabric/__init__.py": "",
        "src/fakelib/fabric/util.py": UTIL,
    },
)
PYTORCH = _sdist_files(
    "fakelib_pytorch",
    {
        "src/fakelib_pytorch/__init__.py": "",
        "src/fakelib_pytorch/core.py": CORE.replace("fakelib.fabric", "fakelib_fabric"),
        "src/fakelib_fabric/__init__.py": "",
        "src/fakelib_fabric/util.py": UTIL,
    },
)
FABRIC = _sdist_files("fakelib_fabric", {"src/fakelib_fabric/__init__.py": "", "src/fakelib_fabric/util.py": UTIL})


@dataclass
class Release:
    ws: Workspace
    tree: Path  # the edit tree the series was authored in
    sdists: dict[str, Path]
    dist: Path

    def wheels(self, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        common = ("--patches", str(self.ws.patches), "--workdir", str(self.ws.workdir), "--dist", str(self.dist))
        return cli("wheels", *common, *args, env={**os.environ, **(env or {})})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wheels_table(sdists: dict[str, Path], **overrides: str) -> str:
    pytorch, fabric = sdists["fakelib_pytorch"], sdists["fakelib_fabric"]
    return (
        f"\n[wheels]\nseries_version = {overrides.get('series_version', '3')}\n\n"
        f'[wheels.fakelib_pytorch]\nsubpackage = "pytorch"\nurl = "{pytorch.as_uri()}"\n'
        f'sha256 = "{overrides.get("pytorch_sha256", _sha(pytorch))}"\nroot = "fakelib_pytorch-1.0"\n'
        'ships = ["pytorch", "fabric"]\n\n'
        f'[wheels.fakelib_fabric]\nsubpackage = "fabric"\nurl = "{fabric.as_uri()}"\nsha256 = "{_sha(fabric)}"\n'
        'root = "fakelib_fabric-1.0"\nships = ["fabric"]\n'
    )


def _release(tmp_path: Path, changes: dict[str, str], pytorch: dict[str, str] = PYTORCH) -> Release:
    sdists = {
        "fakelib": make_sdist(tmp_path, UNIFIED),
        "fakelib_pytorch": make_sdist(tmp_path, pytorch, root="fakelib_pytorch-1.0"),
        "fakelib_fabric": make_sdist(tmp_path, FABRIC, root="fakelib_fabric-1.0"),
    }
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")
    write_pin(ws.patches, sdists["fakelib"])
    with (ws.patches / "base.toml").open("a") as pin_file:
        pin_file.write(_wheels_table(sdists))
    pin = load_pin(ws.pin_file)
    tree = edit_tree(ws, pin, [], resolve_source(ws, pin, None, False, False), quiet)
    commit(tree, changes, "Fix the answer\n\nUpstream-Status: Pending")
    export_series(tree, ws.patches, branch="series")
    record_fingerprint(ws)  # the released series: its wheels are 1.0+series.3
    return Release(ws, tree, sdists, tmp_path / "dist")


def record_fingerprint(ws: Workspace) -> str:
    """What a maintainer does on a release of the series: its fingerprint recorded in ``[wheels]``."""
    value = fingerprint(read_series(ws.series_file))
    lines = [line for line in ws.pin_file.read_text().splitlines() if not line.startswith("fingerprint = ")]
    index = next(i for i, line in enumerate(lines) if line.startswith("series_version = "))
    lines.insert(index + 1, f'fingerprint = "{value}"')
    ws.pin_file.write_text("\n".join(lines) + "\n")
    return value


FIX = {
    "src/fakelib/pytorch/core.py": CORE.replace("helper() + 40", "helper() + 41  # the series' fix"),
    "src/fakelib/fabric/util.py": UTIL + "\n\ndef other():\n    return 'from fakelib.fabric import util'\n",
}


@pytest.fixture
def release(tmp_path: Path) -> Release:
    return _release(tmp_path, FIX)


def _members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_three_wheels_with_the_local_version_the_record_and_the_mapped_patch(release: Release):
    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    names = sorted(path.name for path in release.dist.iterdir())
    assert names == [
        f"{name}-1.0+series.3-py3-none-any.whl" for name in ("fakelib", "fakelib_fabric", "fakelib_pytorch")
    ]
    pytorch = _members(release.dist / "fakelib_pytorch-1.0+series.3-py3-none-any.whl")
    assert pytorch["fakelib_pytorch/core.py"].decode() == (
        "from fakelib_fabric.util import helper\n\n\ndef answer():\n    return helper() + 41  # the series' fix\n"
    )
    assert "return 'from fakelib_fabric import util'" in pytorch["fakelib_fabric/util.py"].decode()
    record = json.loads(pytorch[f"fakelib_pytorch-1.0+series.3.dist-info/{RECORD_NAME}"])
    patches = read_series(release.ws.series_file)
    assert record["version"] == "1.0+series.3"
    assert record["series"]["version"] == 3
    assert [p["name"] for p in record["series"]["patches"]] == [p.name for p in patches]
    assert record["series"]["patches"][0]["upstream_status"] == "Pending"
    assert record["sdist"] == {"file": "fakelib_pytorch-1.0.tar.gz", "sha256": _sha(release.sdists["fakelib_pytorch"])}
    unified = _members(release.dist / "fakelib-1.0+series.3-py3-none-any.whl")
    assert b"helper() + 41" in unified["fakelib/pytorch/core.py"]
    fabric = _members(release.dist / "fakelib_fabric-1.0+series.3-py3-none-any.whl")
    assert "fakelib_pytorch/core.py" not in fabric
    assert b"def other" in fabric["fakelib_fabric/util.py"]
    assert not list(release.ws.workdir.glob("tmp*"))  # the scratch folder went


def test_a_tree_that_is_not_the_series_is_refused_and_dist_is_not_made(release: Release):
    assert release.wheels().returncode == 0  # builds the tool's tree
    for wheel in release.dist.iterdir():
        wheel.unlink()
    release.dist.rmdir()
    tree = release.ws.trees / "sdist-1.0"
    (tree / "src/fakelib/pytorch/core.py").write_text("edited\n")

    proc = release.wheels()

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(f"error: {tree} is not as the tool built it (1 uncommitted file")
    assert not release.dist.exists()
    assert (tree / "src/fakelib/pytorch/core.py").read_text() == "edited\n"


def test_a_patch_that_does_not_map_to_a_standalone_package_is_refused(tmp_path: Path):
    release = _release(tmp_path, {"src/fakelib/__init__.py": "VERSION = 2\n"})

    proc = release.wheels()

    assert proc.returncode == 2
    error = proc.stderr.splitlines()[-1]
    assert error.startswith(
        "error: 0001-Fix-the-answer.patch changes src/fakelib/__init__.py, which has no counterpart in "
    )
    assert not release.dist.exists()
    assert not (release.ws.downloads / "fakelib_pytorch-1.0.tar.gz").exists()  # refused before any download
    assert not release.ws.trees.exists()


def test_a_patch_that_does_not_apply_to_a_standalone_sdist_is_refused(tmp_path: Path):
    drifted = {**PYTORCH, "src/fakelib_pytorch/core.py": "def answer():\n    return 0\n"}
    release = _release(tmp_path, FIX, pytorch=drifted)

    proc = release.wheels()

    assert proc.returncode == 2
    error = proc.stderr.splitlines()[-1]
    assert error.startswith("error: 0001-Fix-the-answer.patch does not apply to fakelib_pytorch (fakelib_pytorch-1.0")
    assert "src/fakelib_pytorch/core.py" in error
    assert not release.dist.exists()


def test_a_bad_sha256_is_refused_before_anything_is_built(release: Release):
    pin_file = release.ws.pin_file
    text = pin_file.read_text()
    good = _sha(release.sdists["fakelib_pytorch"])
    pin_file.write_text(text.replace(good, "0" * 64))

    proc = release.wheels()

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(
        "error: sha256 mismatch for fakelib_pytorch-1.0.tar.gz: expected 000"
    )
    assert not release.dist.exists()
    # a kept download is checked against the pin on every build too
    pin_file.write_text(text)
    assert release.wheels().returncode == 0
    pin_file.write_text(text.replace(good, "1" * 64))
    kept = release.wheels()
    assert kept.returncode == 2
    assert "the download kept in" in kept.stderr.splitlines()[-1]


@pytest.mark.parametrize("stage", ["wheels-built", "wheel-copied"])
def test_an_interrupted_build_leaves_no_wheel_in_dist(release: Release, stage: str):
    proc = release.wheels(env={"PATCHSERIES_SIGNAL_AT": stage})

    assert proc.returncode == 130, proc.stderr
    left = sorted(path.name for path in release.dist.iterdir()) if release.dist.exists() else []
    assert left == []  # no wheel, and no partial copy of one
    assert not list(release.ws.workdir.glob("tmp*"))
    assert release.wheels().returncode == 0
    assert len(list(release.dist.glob("*.whl"))) == 3


def test_a_failed_build_writes_nothing_to_dist(tmp_path: Path):
    release = _release(tmp_path, FIX, pytorch={**PYTORCH, "NAME": "broken\n"})

    proc = release.wheels()

    assert proc.returncode == 2
    error = proc.stderr.splitlines()[-1]
    assert error.startswith("error: building the fakelib_pytorch wheel failed")
    assert error.endswith("nothing was written to dist/")
    assert not release.dist.exists()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[wheels]\nseries_version = 0\n", "[wheels] series_version is not a positive integer (such as 7): 0"),
        ("[wheels]\nseries_version = 1\nextra = 2\n", "[wheels] has the unknown key 'extra'"),
        ('[wheels]\nseries_version = 1\n[wheels.x]\nsubpackage = "x"\n', "[wheels.x] lacks the key 'url'"),
    ],
)
def test_a_bad_wheels_table_is_refused_before_the_work_directory_is_made(release: Release, table: str, message: str):
    text = release.ws.pin_file.read_text().split("\n[wheels]")[0]
    release.ws.pin_file.write_text(text + "\n" + table)
    workdir = release.ws.workdir.with_name("fresh")

    proc = cli("wheels", "--patches", str(release.ws.patches), "--workdir", str(workdir))

    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(f"error: pin file {release.ws.pin_file}: {message}")
    assert not workdir.exists()


def test_the_installed_files_check_finds_each_patch_and_fails_on_the_unpatched_release(
    release: Release, tmp_path: Path
):
    assert release.wheels().returncode == 0
    ws, tree = release.ws, release.ws.trees / "sdist-1.0"
    pin = load_pin(ws.pin_file)
    wheel_pin = load_wheel_pin(ws.pin_file, pin)
    patches = read_series(ws.series_file)
    for package in ("fakelib", "fakelib_pytorch"):
        installed = tmp_path / f"site-{package}"
        with zipfile.ZipFile(release.dist / f"{package}-1.0+series.3-py3-none-any.whl") as archive:
            archive.extractall(installed)
        lines = patched_lines(patches, wheel_pin.mapping(package), tree, pin.sdist_lacks)
        ok, report = check_installed(lines, installed)
        assert ok, report
        assert report[0].startswith("0001: found in ")
        # the same package unpatched: the release's own file
        core = installed / ("fakelib/pytorch/core.py" if package == "fakelib" else "fakelib_pytorch/core.py")
        core.write_text(UNIFIED["src/fakelib/pytorch/core.py"])
        (installed / ("fakelib/fabric/util.py" if package == "fakelib" else "fakelib_fabric/util.py")).write_text(UTIL)
        ok, report = check_installed(lines, installed)
        assert not ok
        assert "NOT PATCHED" in report[0]


def test_replace_imports_follows_upstreams_assistant():
    # the doctest of _replace_imports in Lightning 2.6.6's .actions/assistant.py
    lines = ['"lightning_app"', "lightning_app", "lightning_app/", "delete_cloud_lightning_apps",
             "from lightning_app import", "lightning_apps = []", "lightning_app and pytorch_lightning are ours",
             "def _lightning_app():", ":class:`~lightning_app.core.flow.LightningFlow`", "http://pytorch_lightning.ai",
             "from lightning import __version__", "@lightning.ai"]  # fmt: skip
    mapping = (("lightning_app", "lightning.app"), ("pytorch_lightning", "lightning.pytorch"))
    assert replace_imports(lines, mapping, lightning_by="lightning_fabric") == [
        '"lightning.app"', "lightning.app", "lightning_app/", "delete_cloud_lightning_apps",
        "from lightning.app import", "lightning_apps = []", "lightning.app and lightning.pytorch are ours",
        "def _lightning_app():",
        ":class:`~lightning.app.core.flow.LightningFlow`", "http://pytorch_lightning.ai",
        "from lightning_fabric import __version__", "@lightning.ai",
    ]  # fmt: skip


def test_the_real_pin_maps_every_source_patch_onto_the_standalone_packages():
    ws = Workspace.default()
    pin = load_pin(ws.pin_file)
    wheel_pin = load_wheel_pin(ws.pin_file, pin)
    assert wheel_pin.local_version == f"{pin.version}+series.{wheel_pin.series_version}"
    assert wheel_pin.packages == ("lightning", "pytorch_lightning", "lightning_fabric")
    for patch in read_series(ws.series_file):
        for package in wheel_pin.packages[1:]:
            mapped = map_patch(patch, wheel_pin.mapping(package), pin.sdist_lacks)  # refuses an unmapped path
            assert "src/lightning/" not in mapped.diff
            assert "lightning.pytorch" not in mapped.diff
            assert "lightning.fabric" not in mapped.diff


def test_dist_is_ignored_by_git():
    assert git(PROJECT_ROOT, "check-ignore", "dist/x.whl") == "dist/x.whl"


@pytest.mark.slow
@pytest.mark.network
def test_the_real_wheels_carry_the_series_and_an_unpatched_build_fails_the_check(tmp_path: Path):
    """The real sdists from PyPI: the three wheels, their versions and records; the installed-files check on each
    wheel's files passes, and on a wheel built from the unpatched release it fails."""
    workdir, dist = tmp_path / "work", tmp_path / "dist"
    proc = cli("wheels", "--workdir", str(workdir), "--dist", str(dist))
    assert proc.returncode == 0, proc.stderr
    ws = Workspace.default(workdir=workdir)
    pin = load_pin(ws.pin_file)
    wheel_pin = load_wheel_pin(ws.pin_file, pin)
    patches = read_series(ws.series_file)
    tree = ws.trees / f"sdist-{pin.version}"
    version = wheel_pin.local_version
    expected = [f"{name}-{version}-py3-none-any.whl" for name in sorted(wheel_pin.packages)]
    assert sorted(p.name for p in dist.iterdir()) == expected
    for package in wheel_pin.packages:
        wheel = dist / f"{package}-{version}-py3-none-any.whl"
        members = _members(wheel)
        record = json.loads(members[f"{package}-{version}.dist-info/{RECORD_NAME}"])
        assert record["series"]["fingerprint"] == fingerprint(patches)
        assert members[f"{package}/version.info"].decode().strip() == version
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(tmp_path / f"site-{package}")
        lines = patched_lines(patches, wheel_pin.mapping(package), tree, pin.sdist_lacks)
        ok, report = check_installed(lines, tmp_path / f"site-{package}")
        assert ok, report
    # the unpatched release, built by its own backend: the check fails for every patch it looks up
    unpacked = tmp_path / "unpatched"
    unpacked.mkdir()
    safe_extract(ws.downloads / pin.sdist_filename, unpacked)  # the tool's own: Python < 3.11.4 has no filter
    build = [find_uv() or "uv", "build", "--wheel", "--out-dir", str(tmp_path / "out"), str(unpacked / pin.sdist_root)]
    subprocess.run(build, check=True, capture_output=True)
    with zipfile.ZipFile(next((tmp_path / "out").glob("*.whl"))) as archive:
        archive.extractall(tmp_path / "site-unpatched")
    lines = patched_lines(patches, wheel_pin.mapping(pin.name), tree, pin.sdist_lacks)
    ok, report = check_installed(lines, tmp_path / "site-unpatched")
    assert not ok
    assert all("NOT PATCHED" in line or "not checked" in line for line in report)


def _change_series(ws: Workspace) -> str:
    """Another series in ``patches/`` (a reworded patch, as an export writes it); its fingerprint."""
    first = sorted(ws.patches.glob("*.patch"))[0]
    first.write_text(first.read_text().replace("Subject: [PATCH] Fix the answer", "Subject: [PATCH] Fix the answers"))
    return fingerprint(read_series(ws.series_file))


def _versions(dist: Path) -> dict[str, str]:
    """Each wheel's version and the series fingerprint its record names."""
    records = {}
    for wheel in sorted(dist.glob("*.whl")):
        record = json.loads(next(data for name, data in _members(wheel).items() if name.endswith(RECORD_NAME)))
        records[wheel.name] = f"{record['version']} {record['series']['fingerprint']}"
    return records


def test_the_series_is_read_once_for_a_run_of_wheels(release: Release):
    released = fingerprint(read_series(release.ws.series_file))
    command = [sys.executable, "-m", "patchseries", "wheels", "--patches", str(release.ws.patches), "--workdir",
               str(release.ws.workdir), "--dist", str(release.dist)]  # fmt: skip
    env = {**os.environ, "PATCHSERIES_SIGNAL_AT": "fetch-download:SIGSTOP"}  # a download: before any wheel is made
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, status = os.waitpid(run.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        _change_series(release.ws)  # an export meanwhile
    finally:
        status = continue_stopped(run.pid)

    assert os.waitstatus_to_exitcode(status) == 0, run.stderr.read()  # type: ignore[union-attr]
    assert set(_versions(release.dist).values()) == {f"1.0+series.3 {released}"}


def test_a_changed_series_sorts_below_the_released_one_so_pip_takes_the_released_wheel(release: Release):
    assert release.wheels().returncode == 0
    changed = _change_series(release.ws)

    assert release.wheels().returncode == 0

    versions = {Version(version.split()[0]) for version in _versions(release.dist).values()}
    assert len(versions) == 2
    released = Version("1.0+series.3")
    other = next(version for version in versions if version != released)
    assert str(other).endswith(changed[:12])
    assert other < Version("1.0+series.1") < released
    assert other in SpecifierSet("==1.0")
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-index",
           "--find-links", str(release.dist), "--report", "-", "fakelib==1.0"]  # fmt: skip
    report = json.loads(subprocess.run(pip, capture_output=True, text=True, check=True).stdout)
    assert [item["metadata"]["version"] for item in report["install"]] == ["1.0+series.3"]


def test_a_version_already_built_from_another_series_is_refused(release: Release):
    assert release.wheels().returncode == 0
    before = files_of(release.dist)
    _change_series(release.ws)
    wanted = record_fingerprint(release.ws)  # released under the same series_version

    error = one_error(release.wheels())

    assert "was built from another series" in error
    assert f'raise series_version in [wheels] of base.toml and set its fingerprint = "{wanted}"' in error
    assert files_of(release.dist) == before
    release.ws.pin_file.write_text(release.ws.pin_file.read_text().replace("series_version = 3", "series_version = 4"))
    assert release.wheels().returncode == 0  # the remedy


def test_a_killed_runs_scratch_folder_goes_with_the_next_run(release: Release):
    killed = release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheels-built:SIGKILL"})
    assert killed.returncode == -signal.SIGKILL

    assert release.wheels().returncode == 0

    assert [path.name for path in release.ws.workdir.iterdir() if path.name.startswith("tmp")] == []
