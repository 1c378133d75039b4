"""Environments: bad torch versions and Pythons are refused early; installs report progress and leave nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import cli, one_error
from patchseries import runner
from patchseries.cli import main
from patchseries.errors import SeriesError
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.progress import quiet
from patchseries.runner import PYTHON_FLOOR, companion_requirements, ensure_environment, index_args, torch_release

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.mark.parametrize(
    ("version", "python", "message"),
    [
        *((v, None, f"unknown torch version '{v}': expected a release number such as 2.13.0") for v in
          ["latest", "2", "2.x", "2.13.0rc1", ""]),
        ("2.0.1", None, "torch 2.0.1 is older than 2.1, the oldest release Lightning 2.6.6 supports"),
        ("9.9.9", None, "torch 9.9.9 is newer than every release this tool knows (up to 2.15, "
         "src/patchseries/runner.py); pick another --torch"),
        ("2.14.9", None, "torch 2.14.9 is not a release this tool knows: torch 2.14 has 2.14.0 to 2.14.1 "
         "(src/patchseries/runner.py); pick one of those, or another --torch"),
        ("2.13.1", None, "torch 2.13.1 is not a release this tool knows: torch 2.13 has 2.13.0 alone"),
        ("2.13.0", (3, 9), "torch 2.13.0 and Lightning 2.6.6 need Python 3.10 to 3.14, not 3.9; run patchseries "
         "with one of those, or pick another --torch"),
        ("2.15", (3, 10), "torch 2.15.0 and Lightning 2.6.6 need Python 3.11 to 3.14, not 3.10"),
        ("2.1.2", (3, 12), "torch 2.1.2 and Lightning 2.6.6 need Python 3.10 to 3.11, not 3.12"),
    ],
)  # fmt: skip
def test_each_torch_refusal_is_one_line(version, python, message):
    with pytest.raises(SeriesError) as raised:
        torch_release(version, python)

    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("version", "python", "release"),
    [("2.13", (3, 10), "2.13.0"), ("2.15.0", (3, 11), "2.15.0"), ("2.14.1", (3, 14), "2.14.1"), ("2.1", None, "2.1.0")],
)
def test_a_known_torch_release_is_its_full_release_number(version, python, release):
    assert torch_release(version, python) == release


def test_old_torch_gets_numpy_1_and_pkg_resources():
    assert companion_requirements("2.1.2") == ["numpy<2", "setuptools<70"]
    assert companion_requirements("2.13.0") == []


def test_torch_index_is_added_beside_pypi_and_the_best_version_wins():
    assert index_args(True, "") == []
    assert index_args(True, "https://torch.invalid/cpu") == [
        "--extra-index-url", "https://torch.invalid/cpu", "--index-strategy", "unsafe-best-match"
    ]  # fmt: skip
    assert index_args(False, "https://torch.invalid/cpu") == ["--extra-index-url", "https://torch.invalid/cpu"]


@pytest.mark.network
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_unavailable_torch_fails_cleanly_and_leaves_no_environment(tmp_path, monkeypatch, installer):
    monkeypatch.setitem(runner.TORCH, (2, 99), ((3, 10), (3, 14), 0))  # a release the table knows and PyPI lacks
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")
    tree = tmp_path / "tree"
    tree.mkdir()

    with pytest.raises(SeriesError, match=r"cannot install torch 2\.99\.0 for py3\.\d+: .*"):
        ensure_environment(ws, tree, "2.99.0", quiet, installer=installer)

    assert list(ws.venvs.iterdir()) == []


def test_long_install_says_it_is_still_working(monkeypatch):
    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.1)
    messages: list[str] = []

    runner.run_installer([sys.executable, "-c", "import time; time.sleep(0.5)"], "cannot", messages.append)

    assert messages
    assert all(m.startswith("still installing (") for m in messages)


def test_failed_install_says_why_in_one_line():
    command = [sys.executable, "-c", "print('ERROR: No matching distribution found for torch==2.99.0'); exit(1)"]

    with pytest.raises(SeriesError, match=r"^cannot install: ERROR: No matching distribution found for torch==2\.99"):
        runner.run_installer(command, "cannot install", quiet)


def _fake_installer(made: list[Path]):
    """Stands in for uv and pip: ``venv`` makes the folder, an install writes a file into it."""

    def run_installer(command, what, log):
        if command[1] == "venv":
            made.append(Path(command[-1]))
            (made[-1] / "bin").mkdir(parents=True)
        else:
            (made[-1] / "installed").write_text(" ".join(command[6:]))

    return run_installer


def test_an_environment_is_built_aside_and_switched_to_last(tmp_path, monkeypatch):
    venv = tmp_path / "venvs" / "py3.11-torch2.13.0-tree"
    made: list[Path] = []
    monkeypatch.setattr(runner, "run_installer", _fake_installer(made))
    killed = venv.with_name(venv.name + ".0123abcd")  # what a killed build left; an installer may still write in it
    (killed / "bin").mkdir(parents=True)
    neighbour = venv.with_name(venv.name + ".post1")  # another environment's name, not a build
    neighbour.mkdir()

    runner.build_venv(venv, sys.executable, "uv", ["torch==2.13.0"], "cannot", quiet, "recipe\n")
    runner.build_venv(venv, sys.executable, "uv", ["torch==2.13.0", "x"], "cannot", quiet, "recipe 2\n")

    assert venv.is_symlink()
    assert venv.resolve() == made[-1].resolve()
    assert (venv / "installed").read_text() == "torch==2.13.0 x"
    assert runner.is_ready(venv, "recipe 2\n")
    assert not runner.is_ready(venv, "recipe\n")
    assert sorted(p.name for p in venv.parent.iterdir()) == sorted([venv.name, made[-1].name, neighbour.name])


def test_a_failed_build_leaves_no_environment_and_keeps_nothing_half_made(tmp_path, monkeypatch):
    venv = tmp_path / "venvs" / "py3.11-torch2.13.0-tree"
    made: list[Path] = []
    monkeypatch.setattr(runner, "run_installer", _fake_installer(made))
    runner.build_venv(venv, sys.executable, "uv", ["torch==2.13.0"], "cannot", quiet, "recipe\n")

    def failing(command, what, log):
        if command[1] != "venv":
            raise SeriesError(f"{what}: no space left on device")
        _fake_installer(made)(command, what, log)

    monkeypatch.setattr(runner, "run_installer", failing)
    with pytest.raises(SeriesError, match="cannot: no space left"):
        runner.build_venv(venv, sys.executable, "uv", ["torch==2.1.2"], "cannot", quiet, "recipe 2\n")

    assert list(venv.parent.iterdir()) == []


def test_torch_without_a_wheel_for_this_python_stops_before_any_work(synthetic, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(runner.TORCH, (2, 15), ((3, 20), (3, 21), 0))  # no wheel for the Python running this
    fresh = tmp_path / "fresh"

    status = main(["test", "--torch", "2.15.0", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)])

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: torch 2.15.0 and Lightning 2.6.6 need Python 3.20 to 3.21, not {sys.version_info[0]}."
        f"{sys.version_info[1]}; run patchseries with one of those, or pick another --torch"
    ]
    assert not fresh.exists()


def test_documented_python_floor_is_lightnings():
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    floor = ".".join(map(str, PYTHON_FLOOR))

    assert pyproject["project"]["requires-python"] == f">={floor}"
    assert f"Python {floor}+" in (PROJECT_ROOT / "README.md").read_text()
    assert "Python 3.9" not in (PROJECT_ROOT / "README.md").read_text()


# uv 0.13's own output (the lock's uv), verbatim: an index that refuses the connection while uv builds the editable
# tree, and a disk that fills up while it installs a wheel
UV_INDEX_REFUSED = """\
error: Failed to build `lightning @ file:///w/.work/trees/sdist-2.6.6`
  cause: Failed to resolve requirements from `build-system.requires`
  cause: No solution found when resolving: `setuptools`
  cause: Request failed after 3 retries in 8.4s
  cause: Failed to fetch: http://127.0.0.1:9/simple/setuptools/
  cause: error sending request for url (http://127.0.0.1:9/simple/setuptools/)
  cause: client error (Connect)
  cause: tcp connect error
  cause: Connection refused (os error 111)
"""
UV_DISK_FULL = (
    "error: Failed to install: torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl (torch==2.13.0)\n"
    "  cause: failed to write to file `/w/.work/venvs/py3.11-torch2.13.0-sdist-2.6.6/lib/python3.11/site-packages/"
    "torch/lib/libtorch_cpu.so`: No space left on device (os error 28)\n"
    "hint: free some space, or pass --cache-dir\n"
)


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (UV_INDEX_REFUSED, "Connection refused (os error 111) (Failed to fetch: http://127.0.0.1:9/simple/setuptools/)"),
        (UV_DISK_FULL, "failed to write to file `/w/.work/venvs/py3.11-torch2.13.0-sdist-2.6.6/lib/python3.11/"
         "site-packages/torch/lib/libtorch_cpu.so`: No space left on device (os error 28)"),
        ("error: No solution found when resolving dependencies\n  cause: Because there is no version of torch==2.99.0"
         " and you require torch==2.99.0, we can conclude that your requirements are unsatisfiable.\n",
         "Because there is no version of torch==2.99.0 and you require torch==2.99.0, we can conclude that your "
         "requirements are unsatisfiable."),
        ("Collecting torch==2.13.0\nERROR: Could not install packages due to an OSError: [Errno 28] No space left on "
         "device\n\n[notice] A new release of pip is available: 24.0 -> 25.3\n",
         "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"),
    ],
)  # fmt: skip
def test_a_failed_install_gives_the_cause_the_installer_gives(tmp_path, output, reason):
    printed = tmp_path / "output.txt"
    printed.write_text(output)
    command = [sys.executable, "-c", f"import sys; print(open({str(printed)!r}).read(), end=''); sys.exit(2)"]

    with pytest.raises(SeriesError) as raised:
        runner.run_installer(command, "cannot install torch 2.13.0 for py3.11", quiet)

    assert str(raised.value) == f"cannot install torch 2.13.0 for py3.11: {reason}"


@pytest.mark.parametrize("command", ["test", "matrix"])
def test_a_torch_index_that_is_not_a_url_is_refused_before_any_work(synthetic, tmp_path, monkeypatch, capsys, command):
    monkeypatch.setenv("PATCHSERIES_TORCH_INDEX", "not a url")
    fresh = tmp_path / "fresh"

    status = main([command, "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)])

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: PATCHSERIES_TORCH_INDEX='not a url' is not a package index URL (such as "
        "https://download.pytorch.org/whl/cpu); correct it, or unset it to use PyPI alone"
    ]
    assert not fresh.exists()


def test_an_environment_is_named_by_the_full_release_number(tmp_path, monkeypatch):
    """``2.13`` and ``2.13.0`` are one release, so one environment."""
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")
    venv = ws.venvs / f"py{sys.version_info[0]}.{sys.version_info[1]}-torch2.13.0-tree"
    venv.mkdir(parents=True)
    monkeypatch.setattr(runner, "torch_index", lambda: "")
    requirements = ["torch==2.13.0", *runner.TEST_REQUIREMENTS]
    (venv / runner.READY).write_text("\n".join([str(tmp_path / "tree"), *requirements]) + "\n")

    env = runner.ensure_environment(ws, tmp_path / "tree", "2.13", quiet)

    assert (env.path, env.torch) == (venv, "2.13.0")
    assert sorted(p.name for p in ws.venvs.iterdir()) == [venv.name]


def test_a_torch_newer_than_the_tool_knows_is_refused_before_any_work(synthetic, tmp_path):
    fresh = tmp_path / "fresh"

    error = one_error(cli("test", "--torch", "9.9.9", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)))

    assert "torch 9.9.9 is newer than every release this tool knows" in error
    assert not fresh.exists()
