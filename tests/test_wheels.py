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
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import patchseries.release
from conftest import (
    TOOL,
    between,
    cli,
    commit,
    continue_stopped,
    files_of,
    git,
    make_sdist,
    one_error,
    shell,
    write_pin,
)
from patchseries.cli import main
from patchseries.export import export_series
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.pin import load_pin
from patchseries.progress import quiet
from patchseries.release import (
    RECORD_NAME,
    STAGING,
    built_from,
    load_wheel_pin,
    patches_in,
    replace_imports,
    series_files,
    series_snapshot,
)
from patchseries.runner import find_uv
from patchseries.series import fingerprint, read_series
from patchseries.trees import edit_tree, resolve_source, safe_extract
from patchseries.wheeltest import check_installed

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


VERSION = "1.0+series.3"
PACKAGES = ("fakelib", "fakelib_pytorch", "fakelib_fabric")


def _wheels_of(release: Release, dist: Path, workdir: Path) -> list[str]:
    """The command line of ``wheels`` into ``dist`` from the work directory ``workdir``."""
    return [sys.executable, "-m", "patchseries", "wheels", "--patches", str(release.ws.patches), "--workdir",
            str(workdir), "--dist", str(dist)]  # fmt: skip


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


def test_a_standalone_sdist_that_is_not_the_releases_mirror_is_refused(tmp_path: Path):
    drifted = {**PYTORCH, "src/fakelib_pytorch/core.py": "def answer():\n    return 0\n"}
    release = _release(tmp_path, FIX, pytorch=drifted)

    error = one_error(release.wheels())

    assert error.startswith("error: fakelib_pytorch-1.0.tar.gz is not the release's mirror: its "
                            "src/fakelib_pytorch/core.py is not the release's src/fakelib/pytorch/core.py")  # fmt: skip
    assert not release.dist.exists()


def test_a_wheel_that_lacks_a_file_the_series_changes_is_refused(tmp_path: Path):
    dropping = BACKEND.replace('and "__pycache__" not in', 'and "core" not in relative and "__pycache__" not in')
    release = _release(tmp_path, FIX, pytorch={**PYTORCH, "backend.py": dropping})

    error = one_error(release.wheels())

    assert error.startswith("error: the fakelib_pytorch wheel the build made is not the series' (its "
                            "fakelib_pytorch/core.py is not the series')")  # fmt: skip
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


def test_the_installed_files_check_passes_on_the_wheels_and_fails_on_the_unpatched_release(
    release: Release, tmp_path: Path
):
    assert release.wheels().returncode == 0
    ws, tree = release.ws, release.ws.trees / "sdist-1.0"
    wheel_pin = load_wheel_pin(ws.pin_file, load_pin(ws.pin_file))
    for package, files in {"fakelib": 2, "fakelib_pytorch": 2, "fakelib_fabric": 1}.items():
        installed = tmp_path / f"site-{package}"
        with zipfile.ZipFile(_wheel(release, package)) as archive:
            archive.extractall(installed)
        ok, report = check_installed(*_series(tree, tmp_path), wheel_pin.mapping(package), installed)
        assert ok, report
        assert report == [f"{files} of {files} files the series changes are installed as it has them"]
        # the same package unpatched: the release's own file
        util = "fakelib/fabric/util.py" if package == "fakelib" else "fakelib_fabric/util.py"
        (installed / util).write_text(UTIL)
        ok, report = check_installed(*_series(tree, tmp_path), wheel_pin.mapping(package), installed)
        assert not ok
        assert report[1:] == [f"NOT THE SERIES': {util}"]


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
    patches = read_series(ws.series_file)
    in_packages = patches_in(wheel_pin, patches)  # refuses a path with no counterpart in a package
    assert in_packages["lightning"] == in_packages["pytorch_lightning"]  # it ships both subpackages
    mapping = wheel_pin.mapping("pytorch_lightning")
    assert mapping.path("src/lightning/fabric/x.py") == "src/lightning_fabric/x.py"
    assert mapping.text("src/lightning/pytorch/x.py", "import lightning.fabric\n") == "import lightning_fabric\n"


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
        ok, report = check_installed(*_series(tree, tmp_path), wheel_pin.mapping(package), tmp_path / f"site-{package}")
        assert ok, report
    # the unpatched release, built by its own backend: the check fails for every file the series changes
    unpacked = tmp_path / "unpatched"
    unpacked.mkdir()
    safe_extract(ws.downloads / pin.sdist_filename, unpacked)  # the tool's own: Python < 3.11.4 has no filter
    build = [find_uv() or "uv", "build", "--wheel", "--out-dir", str(tmp_path / "out"), str(unpacked / pin.sdist_root)]
    subprocess.run(build, check=True, capture_output=True)
    with zipfile.ZipFile(next((tmp_path / "out").glob("*.whl"))) as archive:
        archive.extractall(tmp_path / "site-unpatched")
    series, changed = _series(tree, tmp_path)
    ok, report = check_installed(series, changed, wheel_pin.mapping(pin.name), tmp_path / "site-unpatched")
    assert not ok
    assert len(report) == 1 + len(series_files(changed, wheel_pin.mapping(pin.name)))  # each one named


def _series(tree: Path, tmp_path: Path) -> tuple[Path, list[str]]:  # the files the series changes, as committed
    series = tmp_path / f"series-{len(list(tmp_path.glob('series-*')))}"
    return series, series_snapshot(tree, "refs/heads/series", series)


def _change_series(ws: Workspace) -> str:
    """Another series in ``patches/`` (a reworded patch, as an export writes it); its fingerprint."""
    first = sorted(ws.patches.glob("*.patch"))[0]
    first.write_text(first.read_text().replace("Subject: [PATCH] Fix the answer", "Subject: [PATCH] Fix the answers"))
    return fingerprint(read_series(ws.series_file))


def _versions(dist: Path) -> dict[str, str]:
    """Each wheel's version and the series fingerprint its record names."""
    records = {}
    for wheel in sorted(dist.glob("*.whl")):
        record = _record(wheel)
        records[wheel.name] = f"{record['version']} {record['series']['fingerprint']}"
    return records


def test_the_series_is_read_once_for_a_run_of_wheels(release: Release):
    released = fingerprint(read_series(release.ws.series_file))
    command = _wheels_of(release, release.dist, release.ws.workdir)
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


def test_a_file_edited_in_the_tools_tree_while_wheels_runs_is_not_in_a_wheel(release: Release, monkeypatch):
    made = patchseries.release.tool_tree

    def then_edited(*args, **kwargs):  # type: ignore[no-untyped-def]
        tree, applied = made(*args, **kwargs)
        (tree.path / "src" / "fakelib" / "fabric" / "util.py").write_text("MINE = 1\n")  # after the tree's check
        return tree, applied

    monkeypatch.setattr(patchseries.release, "tool_tree", then_edited)
    ws = release.ws
    assert (
        main(["wheels", "--patches", str(ws.patches), "--workdir", str(ws.workdir), "--dist", str(release.dist)]) == 0
    )

    for package, util in (("fakelib", "fakelib/fabric/util.py"), ("fakelib_fabric", "fakelib_fabric/util.py")):
        assert b"MINE" not in _members(_wheel(release, package))[util]  # the series' file, as committed


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


def test_dist_gets_all_wheels_in_one_step_or_none(release: Release):
    theirs = _wheel(release, "fakelib_fabric")
    theirs.mkdir(parents=True)
    (theirs / "mine.txt").write_text("mine\n")

    error = one_error(release.wheels())

    assert str(theirs) in error
    assert sorted(release.dist.iterdir()) == [theirs]  # no wheel renamed in beside it
    assert (theirs / "mine.txt").read_text() == "mine\n"
    assert not release.ws.trees.exists()  # refused before any build
    assert shell(between(error, "mv ")).returncode == 0  # the remedy, as written
    assert (theirs.with_name(theirs.name + ".mine") / "mine.txt").read_text() == "mine\n"
    # an interrupt after the first wheel was renamed in: that rename is undone
    interrupted = release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheel-renamed"})
    assert interrupted.returncode == 130, interrupted.stderr
    assert not list(release.dist.glob("*.whl"))
    # the wheels of an earlier build of the same series are kept exactly as they are (a version names one series)
    assert release.wheels().returncode == 0
    before = files_of(release.dist)
    again = release.wheels(env={"FAKELIB_BUILD": "2"})  # other bytes of the same series
    assert again.returncode == 0, again.stderr
    assert files_of(release.dist) == before
    assert again.stdout.count("is kept as it is") == 3


def test_a_file_the_series_adds_as_a_link_or_with_a_non_ascii_name_is_in_the_wheels(release: Release):
    (release.tree / "src" / "fakelib" / "fabric" / "util_alias.py").symlink_to("util.py")
    (release.tree / "src" / "fakelib" / "fabric" / "café.py").write_text("X = 1\n")
    _add_commit(release, "Add an alias and café\n\nUpstream-Status: Pending", "add", "-A")

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    members = _members(_wheel(release, "fakelib"))
    assert members["fakelib/fabric/util_alias.py"] == members["fakelib/fabric/util.py"]  # as the link reads
    assert members["fakelib/fabric/café.py"] == b"X = 1\n"


@pytest.mark.parametrize(
    ("name", "target"),
    [("fabric_utils", "../fabric"), ("gone.py", "/nonexistent/gone.py"), ("up.py", "../../../../outside.py"),
     ("util.py", "{tree}/src/fakelib/fabric/util.py"), ("vendored", None)],
)  # fmt: skip
def test_a_path_the_series_makes_that_a_wheel_cannot_hold_as_a_file_is_refused(release: Release, name, target):
    link = release.tree / "src" / "fakelib" / "pytorch" / name
    if target is None:  # a submodule: a gitlink, checked out as an empty folder
        commit_id = git(release.tree, "rev-parse", "HEAD")
        git(release.tree, "update-index", "--add", "--cacheinfo", f"160000,{commit_id},src/fakelib/pytorch/{name}")
        link.mkdir()
    else:  # a link to a folder, to nothing, out of the series (a live file of the tree, or of the machine)
        (release.tree.parent / "outside.py").write_text("X = 1\n")
        link.unlink(missing_ok=True)
        link.symlink_to(target.format(tree=release.tree))
    _add_commit(release, "Add a link\n\nUpstream-Status: Pending", "add", "-A")

    error = one_error(release.wheels())

    assert f"the series makes src/fakelib/pytorch/{name} a submodule, or a link out of src/" in error
    assert not release.dist.exists()


@pytest.mark.parametrize("command", ["wheels", "test-wheels"])
def test_a_dist_inside_the_work_directory_is_refused_by_both_commands(release: Release, command: str):
    dist = release.ws.workdir / "mydist"  # test-wheels' remedy names a wheels --dist there: both refuse it

    proc = cli(command, "--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir), "--dist", str(dist))

    assert one_error(proc).startswith(f"error: --dist {dist} is inside the work directory {release.ws.workdir}")


def test_a_commit_that_renames_or_deletes_a_source_file_builds(release: Release):
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


def test_test_wheels_refuses_an_unknown_torch_as_test_does(release: Release):
    workdir = release.ws.workdir.with_name("fresh")
    options = ("--torch", "9.9.9", "--patches", str(release.ws.patches), "--workdir", str(workdir))

    error = one_error(cli("test-wheels", *options))

    assert error == one_error(cli("test", *options))
    assert "newer than every release this tool knows" in error
    assert not workdir.exists()  # refused before anything was made


def test_the_remedy_of_test_wheels_carries_the_runs_options(release: Release, tmp_path: Path):
    other = tmp_path / "other dist"
    options = ("--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir), "--dist", str(other))
    record_fingerprint(release.ws)
    missing = one_error(cli("test-wheels", *options, "--package", "fakelib_pytorch"))
    assert "there is no fakelib_pytorch" in missing
    built = shell(between(missing, f"{TOOL} wheels"))  # builds into --dist, as the run had it
    assert built.returncode == 0, built.stderr
    assert len(list(other.glob("*.whl"))) == 3
    _change_series(release.ws)  # a maintainer changed the series and forgot to raise series_version
    wanted = record_fingerprint(release.ws)

    error = one_error(cli("test-wheels", *options, "--package", "fakelib_pytorch"))

    assert "was built from another series" in error
    assert f'raise series_version in [wheels] of base.toml and set its fingerprint = "{wanted}"' in error
    release.ws.pin_file.write_text(release.ws.pin_file.read_text().replace("series_version = 3", "series_version = 4"))
    remedy = between(error, f"{TOOL} wheels")
    assert "--dist" in remedy
    rebuilt = shell(remedy)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _record(other / "fakelib_pytorch-1.0+series.4-py3-none-any.whl")["series"]["fingerprint"] == wanted


def test_a_persons_files_in_dist_are_never_removed_or_overwritten(release: Release):
    release.dist.mkdir()
    partial = release.dist / f"fakelib-{VERSION}-py3-none-any.whl.partial"
    partial.write_text("mine\n")
    theirs = _wheel(release, "fakelib_pytorch")
    theirs.write_text("my own wheel\n")

    error = one_error(release.wheels())

    assert str(theirs) in error
    assert theirs.read_text() == "my own wheel\n"
    assert partial.read_text() == "mine\n"
    assert set(release.dist.iterdir()) == {theirs, partial}
    assert shell(between(error, "mv ")).returncode == 0
    built = release.wheels()
    assert built.returncode == 0, built.stderr
    assert partial.read_text() == "mine\n"
    assert theirs.with_name(theirs.name + ".mine").read_text() == "my own wheel\n"
    assert release.wheels().returncode == 0  # a wheel the tool built is replaced


def test_a_patch_that_only_changes_a_file_mode_is_applied(release: Release):
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


def test_the_summary_counts_the_patches_the_record_names(release: Release):
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


def test_a_dist_that_is_a_file_is_refused_before_any_build(release: Release):
    release.dist.write_text("mine\n")

    error = one_error(release.wheels())

    assert f"{release.dist} is a file" in error
    assert release.dist.read_text() == "mine\n"
    assert not release.ws.trees.exists()


def test_a_failed_build_names_the_backends_error(tmp_path: Path):
    backend = "import errno\n\n\ndef get_requires_for_build_wheel(config_settings=None):\n    return []\n\n\n" \
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n" \
        "    raise OSError(errno.EFBIG, 'File too large', wheel_directory)\n"  # fmt: skip
    release = _release(tmp_path, FIX, pytorch={**PYTORCH, "backend.py": backend})

    error = one_error(release.wheels())

    assert error.startswith("error: building the fakelib_pytorch wheel failed")
    assert "OSError: [Errno 27] File too large" in error
    assert not release.dist.exists()


def test_a_dist_inside_the_work_directory_is_refused(release: Release):
    assert release.wheels().returncode == 0
    inside = release.ws.trees / "sdist-1.0" / "dist"

    error = one_error(cli("wheels", "--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir),
                       "--dist", str(inside)))  # fmt: skip

    assert str(inside) in error
    assert not inside.exists()
    assert release.wheels().returncode == 0  # the tree is still as the tool built it


def test_a_changed_series_does_not_carry_the_released_version(release: Release):
    record_fingerprint(release.ws)
    assert release.wheels().returncode == 0
    released = sorted(path.name for path in release.dist.iterdir())
    changed = _change_series(release.ws)

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    dev = f"1.0+changed.3.{changed[:12]}"
    assert sorted(path.name for path in release.dist.iterdir()) == sorted(
        released + [f"{package}-{dev}-py3-none-any.whl" for package in PACKAGES]
    )
    assert _record(_wheel(release, "fakelib", dev))["version"] == dev
    assert "raise series_version" in proc.stdout


def test_a_changed_series_whose_fingerprint_starts_with_zero_digits_is_named_as_the_build_names_it():
    ws = Workspace.default()
    wheel_pin = load_wheel_pin(ws.pin_file, load_pin(ws.pin_file))
    changed = replace(wheel_pin, series="007520869080" + "a" * 52)  # PEP 440 drops a number's leading zeros

    assert changed.local_version == f"{wheel_pin.pin.version}+changed.{wheel_pin.series_version}.7520869080"
    assert str(Version(changed.local_version)) == changed.local_version


def test_the_committed_series_builds_the_documented_version():
    ws = Workspace.default()
    wheel_pin = load_wheel_pin(ws.pin_file, load_pin(ws.pin_file)).for_series(read_series(ws.series_file))
    # README's `pip install dist/lightning-2.6.6+series.6-...whl`: a changed series must be released in base.toml
    assert wheel_pin.is_released, (
        f"patches/ is not the series recorded for series v{wheel_pin.series_version}: raise series_version in "
        f'[wheels] of {ws.pin_file} and set fingerprint = "{wheel_pin.series}"'
    )
    assert wheel_pin.local_version == f"{wheel_pin.pin.version}+series.{wheel_pin.series_version}"


def test_a_run_from_another_work_directory_never_touches_a_dist_folder_being_written(release: Release, tmp_path: Path):
    wanted = fingerprint(read_series(release.ws.series_file))
    env = {**os.environ, "PATCHSERIES_SIGNAL_AT": "wheel-renamed:SIGSTOP"}  # stopped after its first wheel went in
    command = _wheels_of(release, release.dist, release.ws.workdir)
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)  # returns once the first run has stopped itself
        assert os.WIFSTOPPED(status)
        held = files_of(release.dist)
        assert any(name.startswith(f"{STAGING}/") for name in held)  # the wheels not renamed in yet

        error = one_error(cli(*_wheels_of(release, release.dist, tmp_path / "other work")[3:]))

        assert str(release.dist) in error
        assert "another patchseries run" in error
        assert files_of(release.dist) == held  # the first run's wheels and staging folder, untouched
    finally:
        status = continue_stopped(first.pid)
    assert os.waitstatus_to_exitcode(status) == 0, first.stderr.read()  # type: ignore[union-attr]
    assert sorted(path.name for path in release.dist.iterdir()) == sorted(
        _wheel(release, package).name for package in PACKAGES
    )
    assert all(_record(_wheel(release, package))["series"]["fingerprint"] == wanted for package in PACKAGES)


def test_a_killed_run_leaves_whole_wheels_and_the_next_run_completes_dist(release: Release):
    killed = release.wheels(env={"PATCHSERIES_SIGNAL_AT": "wheel-renamed:SIGKILL"})
    assert killed.returncode == -signal.SIGKILL
    assert sorted(release.dist.glob("*.whl")) == [_wheel(release, "fakelib")]  # the first one renamed in, whole
    assert (release.dist / STAGING).is_dir()

    built = release.wheels()

    assert built.returncode == 0, built.stderr
    assert sorted(release.dist.glob("*.whl")) == [_wheel(release, package) for package in sorted(PACKAGES)]
    assert {built_from(wheel) for wheel in release.dist.glob("*.whl")} == {
        fingerprint(read_series(release.ws.series_file))
    }


def test_a_tool_wheel_a_person_changed_is_not_overwritten(release: Release):
    assert release.wheels().returncode == 0
    wheel = _wheel(release, "fakelib_pytorch")
    with zipfile.ZipFile(wheel, "a") as archive:  # zip -q WHEEL MYNOTE.txt
        archive.writestr("MYNOTE.txt", "my note\n")
    edited = wheel.read_bytes()

    proc = release.wheels()

    assert proc.returncode == 0, proc.stderr
    assert f"note: {wheel} was there already" in proc.stdout
    assert wheel.read_bytes() == edited


def test_a_tool_wheel_with_a_series_file_changed_by_hand_is_refused_as_not_the_tools(release: Release):
    assert release.wheels().returncode == 0
    _wheel(release, "fakelib_fabric").unlink()  # a wheel the next run would rename in
    wheel = _wheel(release, "fakelib_pytorch")
    members = _members(wheel)
    members["fakelib_pytorch/core.py"] += b"# mine\n"  # the record patch-series.json left as it was
    with zipfile.ZipFile(wheel, "w") as archive:  # unzip, edit, zip again
        for name, data in members.items():
            archive.writestr(name, data)
    before = files_of(release.dist)

    error = one_error(release.wheels())

    assert f"{wheel} is in the way: it is not a wheel the tool built from this series" in error
    assert files_of(release.dist) == before  # byte for byte, and nothing renamed in
    assert shell(between(error, "mv ")).returncode == 0  # the remedy, as printed
    assert release.wheels().returncode == 0
    assert wheel.with_name(wheel.name + ".mine").read_bytes() == before[wheel.name]
    assert _members(wheel)["fakelib_pytorch/core.py"].endswith(b"# the series' fix\n")


def test_a_dist_with_a_control_character_is_refused_before_any_work(release: Release, tmp_path: Path):
    release.dist = tmp_path / "my\ndist"
    release.dist.mkdir()
    theirs = _wheel(release, "fakelib")
    theirs.write_text("my own wheel\n")

    error = one_error(release.wheels())

    assert "control character" in error
    assert repr(str(release.dist)) in error  # one line, the newline written as \n
    assert sorted(release.dist.iterdir()) == [theirs]
    assert theirs.read_text() == "my own wheel\n"
    assert not release.ws.trees.exists()


def test_a_patch_with_crlf_line_endings_is_refused_as_check_names_it(release: Release):
    patch = sorted(release.ws.patches.glob("*.patch"))[0]
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    record_fingerprint(release.ws)

    error = one_error(release.wheels())

    cause = f"{patch.name} has CRLF line endings, which export does not write; convert it back with `"
    assert error.startswith(f"error: {cause}")
    assert not release.dist.exists()
    assert not (release.ws.downloads / "fakelib_pytorch-1.0.tar.gz").exists()  # refused before any download
    checked = cli("check", "--patches", str(release.ws.patches), "--workdir", str(release.ws.workdir))
    # check's words, and its re-export remedy besides
    assert any(line.startswith(f"drift: {error.removeprefix('error: ')}") for line in checked.stdout.splitlines())
    converted = shell(error.split("`")[1])  # the first remedy, as written
    assert converted.returncode == 0, converted.stderr
    record_fingerprint(release.ws)
    built = release.wheels()
    assert built.returncode == 0, built.stderr


def test_a_hand_made_rename_patch_is_mapped_and_builds(release: Release):
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


def test_an_unknown_patch_release_of_a_known_torch_is_refused_before_any_work(release: Release):
    workdir = release.ws.workdir.with_name("fresh")
    options = ("--patches", str(release.ws.patches), "--workdir", str(workdir))

    error = one_error(
        cli("test-wheels", "--torch", "2.13.0", "--torch", "2.14.9", "--dist", str(release.dist), *options)
    )

    assert "torch 2.14.9 is not a release" in error
    assert "2.14.1" in error  # the newest release of 2.14 the tool knows
    assert error == one_error(cli("test", "--torch", "2.14.9", *options))
    assert not workdir.exists()  # refused before anything was made
