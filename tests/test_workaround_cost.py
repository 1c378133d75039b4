"""benchmarks/workaround_cost.py: its table, the tree it measures without 0013, its refusals, its docs page."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from patchseries.paths import PROJECT_ROOT

BENCHMARKS = PROJECT_ROOT / "benchmarks"
PAGE = PROJECT_ROOT / "docs" / "compile-cost.md"


@pytest.fixture(scope="module")
def benchmark():
    sys.path.insert(0, str(BENCHMARKS))  # it imports compile_cost and should_i_compile, as it does when run as a script
    try:
        spec = importlib.util.spec_from_file_location("workaround_cost", BENCHMARKS / "workaround_cost.py")
        assert spec
        assert spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # the top level imports the standard library only: no torch needed here
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


def _result(torch, warmup_s, compiled_ms, diff=0.0):
    return {
        "torch": torch, "modules": 9, "warmup_s": warmup_s, "compiled_ms": compiled_ms, "eager_ms": 2.0,
        "graphs": 4, "graph_breaks": 0, "recompiles": 0, "max_parameter_difference": diff,
    }  # fmt: skip


def test_the_table_gives_each_gan_with_and_without_the_workaround_and_a_failure_as_it_was(benchmark):
    needed, not_needed = benchmark.GANS[1][0], benchmark.GANS[0][0]
    cells = {
        ("py", 10, not_needed): {"with": [_result("2.4.1", 30.0, 2.0)], "without": [_result("2.4.1", 20.0, 2.0)]},
        ("py", 10, needed): {
            "with": [_result("2.8.0", 10.0, 3.0, diff=1e-8)],
            "without": [{"error": "failed: RuntimeError: element 0 of tensors does not require grad"}],
        },
    }

    table = benchmark.render(cells, backend="inductor", steps=20, batch=8)

    rows = [line for line in table.splitlines() if line.startswith("| 2.")]
    assert "| marks submodules at the first toggle | 30.00 / 20.00 | 1.50x | 2.00 / 2.00 | 1.00x |" in rows[0]
    assert "| refreshes guards at each toggle | 10.00 / fails | - | 3.00 / fails | - | 4 / - |" in rows[1]
    assert rows[1].endswith("| 1.0e-08 / RuntimeError: element 0 of tensors does not require grad |")
    assert table.startswith(benchmark.BEGIN)
    assert table.endswith(benchmark.END)


@pytest.mark.parametrize(
    ("torch", "does"),
    [("2.2.2", "marks"), ("2.4.1", "marks"), ("2.5.1", "refreshes"), ("2.11.0", "refreshes"), ("2.12.1", "nothing")],
)
def test_what_the_workaround_does_follows_the_torch_release(benchmark, torch, does):
    assert benchmark.what_it_does(torch).startswith(does)


def test_a_saved_run_is_rendered_again(benchmark, tmp_path):
    saved = tmp_path / "saved.jsonl"
    saved.write_text('["py", 10, "gan", "with", {"error": "failed: x"}]\n["py", 10, "gan", "without", {"error": "y"}]')

    assert benchmark.load(saved) == {("py", 10, "gan"): {"with": [{"error": "failed: x"}], "without": [{"error": "y"}]}}


def _git(tree, *args):
    subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path):
    """A tree with the branch series: src/a.py changed by a last patch whose subject is given by the test."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    _git(tree, "init", "-q", "-b", "series")
    _git(tree, "config", "user.email", "t@example.com")
    _git(tree, "config", "user.name", "t")
    (tree / "src" / "a.py").write_text("before = True\n")
    _git(tree, "add", ".")
    _git(tree, "commit", "-q", "-m", "the patch before")
    (tree / "src" / "a.py").write_text("after = True\n")
    return tree


def test_the_sources_are_the_series_up_to_the_workaround_and_before_it_and_the_tree_is_only_read(
    benchmark, tree, tmp_path
):
    _git(tree, "commit", "-q", "-am", "Work around pytorch#139476 for networks run under two toggles")
    (tree / "src" / "a.py").write_text("a later patch\n")
    _git(tree, "commit", "-q", "-am", "Make nested optimizer toggles restore what each toggle found")
    (tree / "src" / "a.py").write_text("a person's edit\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    sources = benchmark.sources_around_workaround(tree, scratch)

    assert (sources["with"] / "src" / "a.py").read_text() == "after = True\n"
    assert (sources["without"] / "src" / "a.py").read_text() == "before = True\n"
    assert (tree / "src" / "a.py").read_text() == "a person's edit\n"


def test_a_series_without_the_workaround_is_refused(benchmark, tree, tmp_path, capsys):
    _git(tree, "commit", "-q", "-am", "Another patch")

    with pytest.raises(SystemExit) as exited:
        benchmark.sources_around_workaround(tree, tmp_path)

    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {tree}'s series has no pytorch#139476 workaround (a commit whose subject starts "
        "'Work around pytorch#139476')\n"
    )


def test_a_directory_that_is_not_a_tree_is_refused_without_searching_above_it(benchmark, tree, capsys):
    with pytest.raises(SystemExit) as exited:
        benchmark.sources_around_workaround(tree / "src", tree)

    assert exited.value.code == 2
    assert "is not a git tree with the branch series" in capsys.readouterr().err


def test_the_docs_page_has_the_markers_and_bad_input_is_refused_before_measuring(benchmark, tmp_path, capsys):
    text = PAGE.read_text()
    assert text.count(benchmark.BEGIN) == text.count(benchmark.END) == 1
    page = tmp_path / "page.md"
    page.write_text("no markers\n")

    with pytest.raises(SystemExit) as exited:
        benchmark.main(["table", "--tree", "t", "--python", "py", "--write-docs", str(page)])

    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {page} has no workaround-cost markers")
