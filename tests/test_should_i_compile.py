"""benchmarks/should_i_compile.py: its sizes, its table, its docs page, and one run on the smallest size."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from patchseries.job import BaseChoice, prepare
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.progress import quiet
from patchseries.runner import DEFAULT_TORCH, ensure_environment

BENCHMARKS = PROJECT_ROOT / "benchmarks"
PAGE = PROJECT_ROOT / "docs" / "compile-cost.md"


@pytest.fixture(scope="module")
def benchmark():
    sys.path.insert(0, str(BENCHMARKS))  # it imports compile_cost, as it does when run as a script
    try:
        spec = importlib.util.spec_from_file_location("should_i_compile", BENCHMARKS / "should_i_compile.py")
        assert spec
        assert spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # the top level imports the standard library only: no torch needed here
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize(("modules", "depth"), [(10, 1), (100, 24), (250, 61), (1, 1)])
def test_sizes_are_module_counts(benchmark, modules, depth):
    assert benchmark.depth_for(modules) == depth
    assert abs(4 * depth + 5 - modules) <= 4 or depth == 1


def _result(compiled_ms, eager_ms=4.0, **extra):
    return {
        "torch": "2.15.0", "modules": 9, "warmup_s": 1.0, "compiled_ms": compiled_ms, "eager_ms": eager_ms,
        "graphs": 2, "graph_breaks": 0, "recompiles": 0, "max_parameter_difference": 0.0, **extra,
    }  # fmt: skip


def test_the_table_gives_each_variant_against_the_floor_and_eager_lightning(benchmark):
    runs = {label: [_result(2.0 if "floor" in label else 3.0, eager_ms=2.0 if "plain" in label else 4.0)]
            for label, _ in benchmark.VARIANTS}  # fmt: skip
    runs[benchmark.VARIANTS[1][0]] = [{"error": "failed: boom"}]

    table = benchmark.render({("py", "inductor", 10): runs}, steps=20, batch=8, device="cpu")

    rows = {line.split(" | ")[3]: line for line in table.splitlines() if line.startswith("| 2.15.0")}
    assert "| 4.00 | 2.00x | 1.00x |" in rows["eager Lightning"]
    assert "| 2.00 | 1.00x | 0.50x |" in rows["plain PyTorch, eager"]
    assert "| 3.00 | 1.50x | 0.75x |" in rows["`torch.compile(model)`"]
    assert "failed: boom" in rows["networks compiled"]
    assert table.startswith(benchmark.BEGIN)
    assert table.endswith(benchmark.END)


def test_the_docs_page_has_the_markers_and_a_page_without_them_is_refused_before_measuring(benchmark, tmp_path, capsys):
    text = PAGE.read_text()
    assert text.count(benchmark.BEGIN) == text.count(benchmark.END) == 1
    page = tmp_path / "page.md"
    page.write_text("no markers\n")

    with pytest.raises(SystemExit) as exited:
        benchmark.main(["table", "--tree", "t", "--python", "py", "--write-docs", str(page)])

    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {page} has no should-i-compile markers")


def test_a_saved_run_is_rendered_again(benchmark, tmp_path):
    saved = tmp_path / "saved.jsonl"
    saved.write_text(
        "\n".join(f'["py", "aot_eager", 10, "{label}", {{"error": "failed: x"}}]' for label, _ in benchmark.VARIANTS)
    )

    assert benchmark.load(saved)[("py", "aot_eager", 10)].keys() == {label for label, _ in benchmark.VARIANTS}


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(1800)  # a fresh machine downloads torch first
def test_the_benchmark_runs_on_the_smallest_size_and_every_variant_trains_like_eager():
    ws = Workspace.default()
    tree = prepare(ws, BaseChoice(), quiet).base.path
    python = ensure_environment(ws, tree, DEFAULT_TORCH, quiet).python
    command = [str(python), "should_i_compile.py", "table", "--tree", str(tree), "--python", str(python)]
    command += ["--sizes", "10", "--backends", "aot_eager", "--steps", "6"]

    proc = subprocess.run(command, cwd=BENCHMARKS, capture_output=True, text=True, check=False)

    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(f"| {DEFAULT_TORCH} | aot_eager | 9 |")]
    assert len(rows) == 7, proc.stdout
    assert not any("failed" in row for row in rows), proc.stdout
    assert all(float(row.rstrip(" |").rsplit("| ", 1)[1]) < 1e-5 for row in rows[2:]), proc.stdout
