"""Where the series and the work directory are, also for an installed (non-editable) copy of the tool."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from conftest import cli
from patchseries.paths import PROJECT_ROOT, remove
from patchseries.series import read_series


def _installed_copy(tmp_path):
    """The package as `pip install .` lays it out: in site-packages, far from any patches/ folder."""
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    shutil.copytree(PROJECT_ROOT / "src" / "patchseries", site / "patchseries", ignore=shutil.ignore_patterns("__py*"))
    return {**os.environ, "PYTHONPATH": str(site)}


def test_installed_copy_finds_the_series_from_the_current_directory(synthetic, tmp_path):
    env = _installed_copy(tmp_path)
    inside = synthetic.ws.patches.parent / "src"  # a sub-folder of the project (tmp_path holds patches/)
    inside.mkdir()

    status = cli("status", cwd=inside, env=env)
    fetched = cli("fetch", cwd=inside, env=env)

    assert status.returncode == 0, status.stderr
    assert "Fix the answer" in status.stdout
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.strip() == str(synthetic.ws.patches.parent / ".work" / "trees" / "sdist-1.0")


def test_installed_copy_outside_a_project_refuses_clearly(tmp_path):
    env = _installed_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    proc = cli("status", cwd=elsewhere, env=env)

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: cannot find the series: no patches/series in {elsewhere} or its parents; run from a checkout of "
        "lightning-compile-series, or pass --patches DIR"
    ]


def test_a_file_that_cannot_be_removed_is_named_by_its_full_path(tmp_path, monkeypatch):
    """An immutable file in an old tree is named by its full path, not `__init__.py` alone."""
    folder = tmp_path / "old-tree" / "src"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    real_unlink = os.unlink

    def refuse(name, *args, **kwargs):
        if str(name).endswith("__init__.py"):
            raise PermissionError(errno.EPERM, "Operation not permitted", name)
        return real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse)

    with pytest.raises(PermissionError) as raised:
        remove(tmp_path / "old-tree")

    assert raised.value.filename == str(folder / "__init__.py")


def test_the_series_of_the_checkout_the_tool_runs_in_is_the_one_it_works_on(synthetic):
    """Run from another checkout (a linked worktree of the project) with this one's tool: that checkout's series."""
    proc = cli("status", cwd=synthetic.ws.patches.parent)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n", 1)[0] == read_series(synthetic.ws.series_file)[0].name
