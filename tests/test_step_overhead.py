"""benchmarks/step_overhead.py: one short eager fit prints each Lightning helper against its plain counterpart."""

from __future__ import annotations

import json
import subprocess

import pytest

from patchseries.job import BaseChoice, prepare
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.progress import quiet
from patchseries.runner import DEFAULT_TORCH, ensure_environment


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(1800)  # a fresh machine downloads torch first
def test_the_overhead_benchmark_times_every_helper_and_the_trainer_between_steps():
    ws = Workspace.default()
    tree = prepare(ws, BaseChoice(), quiet).base.path
    python = ensure_environment(ws, tree, DEFAULT_TORCH, quiet).python
    command = [str(python), "step_overhead.py", "--modules", "10", "--steps", "20", "--json"]

    proc = subprocess.run(command, cwd=PROJECT_ROOT / "benchmarks", capture_output=True, text=True, check=False)

    assert proc.returncode == 0, proc.stderr[-4000:]
    times = json.loads(proc.stdout.strip().splitlines()[-1])["us_per_step"]
    assert set(times) == {
        "Trainer between two training_step calls", "toggle_optimizer", "requires_grad_(False) loop", "manual_backward",
        "Tensor.backward", "LightningOptimizer.step", "Optimizer.step", "untoggle_optimizer",
        "requires_grad_(True) loop",
    }  # fmt: skip
    assert all(value > 0 for value in times.values())
