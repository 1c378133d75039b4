"""What the nested-toggle stack (release patch 0014) adds to optimizer toggles in a compiled GAN step (CPU).

Run it with a Python that has torch and Lightning's dependencies, giving two (or more) Lightning source folders, e.g.
the release series with and without its last patch (``git archive <commit> src | tar -x -C DIR``):

    git -C TREE archive series src | tar -x -C WITH && git -C TREE archive series~1 src | tar -x -C WITHOUT
    python benchmarks/stack_toggle_cost.py --tree stack=WITH/src --tree no-stack=WITHOUT/src [--rounds 10] [--blocks 40]

Each round runs one fresh worker per tree (``PYTHONPATH=<tree>``, one thread, pinned with ``taskset -c 1`` where
there is one; the trees' order alternates between rounds). A worker compiles (inductor) two training steps of a small
two-optimizer GAN with manual optimization: ``none`` (no toggles) and ``calls`` (``toggle_optimizer`` /
``untoggle_optimizer`` around each phase), called directly once the Trainer has set up (no loop overhead), and times
them in alternating blocks, so that a change in the machine's load hits both alike. Per round and tree it prints the
median step time of each variant, the toggles' cost (median over adjacent block pairs of ``calls / none - 1``), the
fastest eager toggle + untoggle pair (Python work) and Dynamo's graphs compiled after the warm-up (recompiles). Then
per tree the toggles' cost and the pair as median and min-max range over the rounds; and per tree against
``--baseline``, paired by round, the extra cost of the compiled step's toggles and of their eager Python work (two
pairs per step), with ranges, and whether the trees' ranges overlap. Costs are in % of the compiled step without
toggles.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

VARIANTS = ("none", "calls")


def worker(steps: int, blocks: int, warmup: int) -> dict[str, Any]:
    """Runs in a fresh process: times both variants of the compiled step, in alternating blocks of ``steps`` steps."""
    import lightning
    import lightning.pytorch as pl
    import torch
    from torch import nn
    from torch._dynamo.utils import counters
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(0)

    class GAN(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.generator = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
            self.discriminator = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))

        def _loss(self, generator_phase: bool, inputs: torch.Tensor) -> torch.Tensor:
            if generator_phase:
                return self.discriminator(self.generator(inputs)).mean()
            return self.discriminator(inputs).pow(2).mean()

        def step_none(self, inputs: torch.Tensor) -> None:
            generator_opt, discriminator_opt = self.optimizers()
            generator_opt.zero_grad()
            self.manual_backward(self._loss(True, inputs))
            generator_opt.step()
            discriminator_opt.zero_grad()
            self.manual_backward(self._loss(False, inputs))
            discriminator_opt.step()

        def step_calls(self, inputs: torch.Tensor) -> None:
            generator_opt, discriminator_opt = self.optimizers()
            self.toggle_optimizer(generator_opt)
            generator_opt.zero_grad()
            self.manual_backward(self._loss(True, inputs))
            generator_opt.step()
            self.untoggle_optimizer(generator_opt)
            self.toggle_optimizer(discriminator_opt)
            discriminator_opt.zero_grad()
            self.manual_backward(self._loss(False, inputs))
            discriminator_opt.step()
            self.untoggle_optimizer(discriminator_opt)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            pass  # the benchmark calls the compiled steps itself, from `on_train_start`

        def configure_optimizers(self) -> list:
            return [
                torch.optim.SGD(self.generator.parameters(), lr=0.01),
                torch.optim.SGD(self.discriminator.parameters(), lr=0.01),
            ]

    result: dict[str, Any] = {"torch": torch.__version__, "lightning_file": lightning.__file__}

    class Measure(pl.Callback):
        def on_train_start(self, trainer: pl.Trainer, module: GAN) -> None:  # type: ignore[override]
            inputs = torch.randn(32, 64)
            compiled = {
                "none": torch.compile(module.step_none, backend="inductor"),
                "calls": torch.compile(module.step_calls, backend="inductor"),
            }
            for step in compiled.values():
                for _ in range(warmup):
                    step(inputs)
            opt = module.optimizers()[0]
            pair = lambda: (module.toggle_optimizer(opt), module.untoggle_optimizer(opt))  # noqa: E731
            graphs = counters["stats"]["unique_graphs"]
            times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
            ratios, pair_best = [], float("inf")
            for block in range(blocks):
                block_median = {}
                for variant in VARIANTS if block % 2 == 0 else VARIANTS[::-1]:
                    step, block_times = compiled[variant], []
                    for _ in range(steps):
                        start = time.perf_counter()
                        step(inputs)
                        block_times.append(time.perf_counter() - start)
                    block_median[variant] = statistics.median(block_times)
                    times[variant] += block_times
                # adjacent blocks see the same load: their ratio cancels it, the median over blocks drops bursts
                ratios.append(block_median["calls"] / block_median["none"])
                pair_best = min(pair_best, *timeit.repeat(pair, number=20, repeat=3))
            result["graphs_after_warmup"] = counters["stats"]["unique_graphs"] - graphs
            for variant in VARIANTS:
                result[f"{variant}_us"] = statistics.median(times[variant]) * 1e6
            result["cost_pct"] = (statistics.median(ratios) - 1) * 100
            result["toggle_pair_us"] = pair_best / 20 * 1e6  # the fastest: Python work without interference

    data = DataLoader(TensorDataset(torch.randn(32, 64)), batch_size=32)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[Measure()],
    )  # fmt: skip
    trainer.fit(GAN(), data)
    return result


def run_worker(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", f"--steps={args.steps}", f"--blocks={args.blocks}"]
    command += [f"--warmup={args.warmup}"]
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "1", *command]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"worker for {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["lightning_file"]).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"worker for {tree} imported {result['lightning_file']}: PYTHONPATH does not shadow it")
    return result


def span(values: list[float]) -> str:
    return f"{statistics.median(values):+7.1f} [{min(values):+7.1f}, {max(values):+7.1f}]"


def parse_trees(specs: list[str]) -> dict[str, Path]:
    names = iter(("stack", "no-stack"))
    trees = {}
    for spec in specs:
        name, _, path = spec.rpartition("=") if "=" in spec else (next(names, spec), "", spec)
        trees[name] = Path(path)
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a Lightning source folder")
    parser.add_argument("--baseline", default="no-stack", help="the tree the others' extra cost is measured against")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="steps per block and variant")
    parser.add_argument("--blocks", type=int, default=40, help="alternating blocks per variant and worker")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per variant (compilation)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.steps, args.blocks, args.warmup)))
        return
    trees = parse_trees(args.tree)
    if len(trees) < 2 or args.baseline not in trees:
        parser.error(f"give two or more --tree NAME=PATH, one of them named {args.baseline!r} (--baseline)")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    print(f"{'round':>5} {'tree':<10}{'none us':>9}{'calls us':>10}{'toggles %':>11}{'pair us':>9}{'recompiles':>11}")
    for round_ in range(args.rounds):
        for name in list(trees) if round_ % 2 == 0 else list(trees)[::-1]:
            row = run_worker(trees[name], args)
            results[name].append(row)
            print(
                f"{round_:>5} {name:<10}{row['none_us']:>9.1f}{row['calls_us']:>10.1f}{row['cost_pct']:>+11.1f}"
                f"{row['toggle_pair_us']:>9.1f}{row['graphs_after_warmup']:>11}",
                flush=True,
            )
    first = next(iter(results.values()))[0]
    print(f"\ntorch {first['torch']}, inductor, CPU, 1 thread; {args.rounds} rounds, {args.blocks}x{args.steps} steps")
    print(f"{'tree':<10}{'toggles % of step: median [min, max]':>40}{'eager toggle+untoggle us':>28}")
    for name, rows in results.items():
        cost = span([row["cost_pct"] for row in rows])
        print(f"{name:<10}{cost:>40}{span([row['toggle_pair_us'] for row in rows]):>28}")
    base = results[args.baseline]
    for name, rows in results.items():
        if name == args.baseline:
            continue
        cost, base_cost = [row["cost_pct"] for row in rows], [row["cost_pct"] for row in base]
        extra = [a - b for a, b in zip(cost, base_cost, strict=True)]
        # two toggle + untoggle pairs per step, in % of the step without toggles
        python = [
            200 * (a["toggle_pair_us"] - b["toggle_pair_us"]) / a["none_us"] for a, b in zip(rows, base, strict=True)
        ]
        overlap = min(cost) <= max(base_cost) and min(base_cost) <= max(cost)
        print(f"\n{name} - {args.baseline}, in points of the compiled step, paired by round: median [min, max]")
        print(f"  compiled step, toggles' cost: {span(extra)}")
        print(f"  eager Python work of the step's 2 toggle pairs: {span(python)}")
        verdict = "overlap: the difference is within what this run resolves" if overlap else "do not overlap"
        print(f"  the trees' ranges of the toggles' cost {verdict}")


if __name__ == "__main__":
    main()
