"""Upstream checkout mode: requirements taken from upstream's files, failures split into new and pre-existing."""

from __future__ import annotations

from pathlib import Path

from patchseries.paths import Workspace
from patchseries.upstream import UPSTREAM_MODULES, Comparison, _module_of, _split, requirement_args


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


def test_widened_modules_cover_the_code_the_series_changes():
    for module in (
        "tests/tests_pytorch/core",
        "tests/tests_pytorch/trainer/optimization",
        "tests/tests_pytorch/loops",
        "tests/tests_pytorch/strategies",
        "tests/tests_pytorch/plugins/precision",
        "tests/tests_pytorch/models/test_hooks.py",
        "tests/tests_pytorch/utilities/test_compile.py",
        "tests/tests_fabric/test_wrappers.py",
        "tests/tests_fabric/test_fabric.py",
    ):
        assert module in UPSTREAM_MODULES


def test_a_failure_is_traced_to_its_module_for_the_rerun_on_the_base(tmp_path):
    module = tmp_path / "tests" / "tests_pytorch" / "strategies" / "test_fsdp.py"
    module.parent.mkdir(parents=True)
    module.write_text("")

    assert _module_of(tmp_path, "tests.tests_pytorch.strategies.test_fsdp::test_x[1]") == str(
        module.relative_to(tmp_path)
    )
    assert _module_of(tmp_path, "tests_pytorch.strategies.test_fsdp.TestCls::test_y") == str(
        module.relative_to(tmp_path)
    )
    assert _module_of(tmp_path, "::tests.tests_pytorch.strategies.test_fsdp") == str(module.relative_to(tmp_path))
    assert _module_of(tmp_path, "tests.tests_pytorch.gone::test_z") == ""
