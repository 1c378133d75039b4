"""benchmarks/compile_cost.py's command line, on CPU and without torch: --device, --threads, the docs page it writes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from patchseries.paths import PROJECT_ROOT

BENCHMARK = PROJECT_ROOT / "benchmarks" / "compile_cost.py"
PAGE = PROJECT_ROOT / "docs" / "compile-cost.md"


@pytest.fixture(scope="module")
def compile_cost():
    spec = importlib.util.spec_from_file_location("compile_cost", BENCHMARK)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the top level imports the standard library only: no torch needed here
    return module


def test_measure_trains_on_the_cpu_unless_told_and_takes_cuda(compile_cost):
    parser = compile_cost.build_parser()

    assert parser.parse_args(["measure"]).device == "cpu"
    assert parser.parse_args(["measure", "--device", "cuda", "--depth", "12"]).device == "cuda"


def test_an_unknown_device_is_refused_by_the_parser(compile_cost, capsys):
    with pytest.raises(SystemExit) as exited:
        compile_cost.build_parser().parse_args(["measure", "--device", "tpu"])

    assert exited.value.code == 2
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_threads_do_not_apply_on_cuda_and_are_refused_before_torch_is_imported(compile_cost, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would fail: the refusal comes first

    with pytest.raises(SystemExit) as exited:
        compile_cost.main(["measure", "--device", "cuda", "--threads", "2"])

    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "error: --threads sets torch's CPU intra-op threads; it does not apply with --device cuda\n"
    )


@pytest.mark.parametrize("option", ["--write-docs", "--write-readme"])  # the old name stays an alias
def test_table_writes_the_docs_page(compile_cost, option, tmp_path):
    args = compile_cost.build_parser().parse_args(["table", "--python", "py", "--tree", "t", option, "page.md"])

    assert args.write_docs == Path("page.md")
    assert args.threads is None  # 1 when timing on the CPU


def test_the_table_is_replaced_between_the_markers(compile_cost, tmp_path):
    page = tmp_path / "compile-cost.md"
    page.write_text(f"intro\n{compile_cost.TABLE_BEGIN}\nold\n{compile_cost.TABLE_END}\noutro\n")

    compile_cost.write_table(page, f"{compile_cost.TABLE_BEGIN}\nnew\n{compile_cost.TABLE_END}")

    assert page.read_text() == f"intro\n{compile_cost.TABLE_BEGIN}\nnew\n{compile_cost.TABLE_END}\noutro\n"


def test_the_docs_page_has_the_markers_the_table_writes(compile_cost):
    text = PAGE.read_text()

    assert text.count(compile_cost.TABLE_BEGIN) == text.count(compile_cost.TABLE_END) == 1
    assert text.index(compile_cost.TABLE_BEGIN) < text.index(compile_cost.TABLE_END)


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout.strip()


def _series_tree(tmp_path: Path, subjects: list[str]) -> Path:
    """A tree with the branch base, then the branch series: a commit per subject."""
    tree = tmp_path / "tree"
    tree.mkdir()
    _git(tree, "init", "-q", "-b", "base")
    _git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "Lightning 2.6.6")
    _git(tree, "checkout", "-q", "-b", "series")
    for subject in subjects:
        _git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", subject)
    return tree


def test_the_helpers_are_measured_before_the_first_patch_that_keeps_one_out_not_before_the_last_patch(
    compile_cost, tmp_path
):
    tree = _series_tree(
        tmp_path,
        [
            "Keep LightningModule.optimizers() out of Dynamo before torch 2.4",
            "Run a closure-less optimizer step outside Dynamo before torch 2.4",
            "Keep LightningModule.clip_gradients and manual_backward out of Dynamo",
            "Make nested optimizer toggles restore what each toggle found",
        ],
    )

    revision = compile_cost.before_keep_out(tree)

    assert _git(tree, "log", "-1", "--format=%s", revision) == (
        "Keep LightningModule.optimizers() out of Dynamo before torch 2.4"
    )


def test_a_series_that_keeps_no_helper_out_is_refused(compile_cost, tmp_path, capsys):
    tree = _series_tree(tmp_path, ["Another patch"])

    with pytest.raises(SystemExit) as exited:
        compile_cost.before_keep_out(tree)

    assert exited.value.code == 2
    assert "series has no patch that keeps a helper out of Dynamo" in capsys.readouterr().err
