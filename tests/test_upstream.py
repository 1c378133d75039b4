"""Upstream checkout mode: requirements taken from upstream's files, failures split into new and pre-existing."""

from __future__ import annotations

from pathlib import Path

from patchseries.paths import Workspace
from patchseries.upstream import Comparison, _split, requirement_args


def test_requirements_come_from_upstream_files_without_their_torch_pin(tmp_path):
    tree = tmp_path / "lightning"
    (tree / "requirements" / "pytorch").mkdir(parents=True)
    (tree / "requirements" / "pytorch" / "test.txt").write_text("pytest ==9.0.2\n")
    (tree / "requirements" / "typing.txt").write_text("torch==2.9.1\nmypy==1.19.1\n")
    (tree / ".pre-commit-config.yaml").write_text(
        "repos:\n  - repo: https://github.com/astral-sh/ruff-pre-commit\n    rev: v0.14.10\n"
    )
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")

    args = requirement_args(ws, tree)

    assert args[0] == "ruff==0.14.10"
    assert args[1:3] == ("-r", str(tree / "requirements" / "pytorch" / "test.txt"))
    typing_copy = args[4]
    assert args[3] == "-r"
    assert typing_copy.startswith(str(ws.reports))
    assert Path(typing_copy).read_text() == "mypy==1.19.1\n"
    assert (tree / "requirements" / "typing.txt").read_text().startswith("torch==2.9.1")  # upstream file untouched


def test_failures_the_base_also_has_are_pre_existing():
    comparison = Comparison("upstream tests", checked=10)

    _split(comparison, {"test_a::x", "test_b::y"}, {"test_b::y", "test_c::z"})

    assert comparison.new == ["test_a::x"]
    assert comparison.pre_existing == ["test_b::y"]
    assert comparison.line() == "upstream tests: 10 checked, 1 NEW: test_a::x, 1 pre-existing"
