"""Environments: bad torch versions are refused early; failed installs leave nothing a re-run trips on."""

from __future__ import annotations

import pytest

from patchseries.environment import companion_requirements, ensure_environment, index_args, parse_torch_version
from patchseries.errors import SeriesError
from patchseries.paths import Workspace
from patchseries.progress import quiet


@pytest.mark.parametrize("version", ["latest", "2", "2.x", "2.13.0rc1", ""])
def test_malformed_torch_version_is_refused(version):
    with pytest.raises(SeriesError, match="unknown torch version"):
        parse_torch_version(version)


def test_torch_older_than_lightning_supports_is_refused():
    with pytest.raises(SeriesError, match="older than 2.1"):
        parse_torch_version("2.0.1")


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
def test_unavailable_torch_fails_cleanly_and_leaves_no_environment(tmp_path, installer):
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")
    tree = tmp_path / "tree"
    tree.mkdir()

    with pytest.raises(SeriesError, match=r"cannot install torch 2\.99\.0 for py3\.\d+: .*"):
        ensure_environment(ws, tree, "2.99.0", quiet, installer=installer)

    assert list(ws.venvs.iterdir()) == []
