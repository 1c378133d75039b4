"""What optimizer toggling costs under torch.compile: a GAN-style module (R2) on CPU.

Run it with the Python of an environment that has the patched Lightning (the main job prints where it is), e.g.

    .work/venvs/py3.11-torch2.13.0-sdist-2.6.6/bin/python benchmarks/toggle_cost.py [--backend inductor]

For each variant it prints steps per second (eager and compiled), and Dynamo's counts: graphs compiled, graph breaks,
recompiles after the first two steps, and how many of the model's own matmuls were captured in graphs (a frame that
falls back to eager captures none). Variants: no toggling at all, toggle/untoggle calls, ``toggled_optimizer`` and
``with self.toggle_optimizer(opt, step=True):`` (the last only where the installed Lightning supports it).
``--json`` prints one JSON object instead of the table, for the torch-version matrix.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VARIANTS = ("none", "calls", "toggled", "with")


class GAN(pl.LightningModule):
    def __init__(self, variant: str) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.variant = variant
        self.generator = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
        self.discriminator = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))

    def _loss(self, generator_phase: bool, inputs: torch.Tensor) -> torch.Tensor:
        if generator_phase:
            return self.discriminator(self.generator(inputs)).mean()
        return self.discriminator(inputs).pow(2).mean()

    def _phase(self, optimizer: Any, generator_phase: bool, inputs: torch.Tensor) -> None:
        # no closures here: torch 2.1 guards on a fresh function object and would recompile on every step
        if self.variant == "with":
            with self.toggle_optimizer(optimizer, step=True):
                self.manual_backward(self._loss(generator_phase, inputs))
            return
        if self.variant == "toggled":
            with self.toggled_optimizer(optimizer):
                optimizer.zero_grad()
                self.manual_backward(self._loss(generator_phase, inputs))
                optimizer.step()
            return
        if self.variant == "calls":
            self.toggle_optimizer(optimizer)
        optimizer.zero_grad()
        self.manual_backward(self._loss(generator_phase, inputs))
        optimizer.step()
        if self.variant == "calls":
            self.untoggle_optimizer(optimizer)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        generator_opt, discriminator_opt = self.optimizers()
        self._phase(generator_opt, True, batch[0])
        self._phase(discriminator_opt, False, batch[0])

    def configure_optimizers(self) -> list:
        return [
            torch.optim.SGD(self.generator.parameters(), lr=0.01),
            torch.optim.SGD(self.discriminator.parameters(), lr=0.01),
        ]


class Counting:
    """Backend wrapper: counts graphs and the linear/matmul nodes they captured."""

    def __init__(self, inner: str) -> None:
        from torch._dynamo.backends.registry import lookup_backend

        self.inner = lookup_backend(inner)
        self.graphs = 0
        self.matmuls = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        self.graphs += 1
        self.matmuls += sum(1 for node in gm.graph.nodes if _is_matmul(gm, node))
        return self.inner(gm, example_inputs)


def _is_matmul(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """A linear layer in a Dynamo graph: a ``call_module`` of ``nn.Linear`` (older torch) or a linear/mm call."""
    if node.op == "call_module":
        return isinstance(gm.get_submodule(str(node.target)), nn.Linear)
    return node.op == "call_function" and any(name in str(node.target) for name in ("linear", "addmm", "mm"))


def supports_with_block() -> bool:
    return "step" in inspect.signature(pl.LightningModule.toggle_optimizer).parameters


def run(variant: str, backend: Any, steps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(32 * (steps + 2), 64)), batch_size=32)
    module = GAN(variant)
    model = torch.compile(module, backend=backend) if backend is not None else module
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=steps + 2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    timer = StepTimer(warmup=2, counting=backend if isinstance(backend, Counting) else None)
    trainer.callbacks.append(timer)
    trainer.fit(model, data)
    return {"steps_per_s": round(timer.rate(), 1), "graphs_after_warmup": timer.graphs_after_warmup()}


class StepTimer(pl.Callback):
    """Steps per second after ``warmup`` steps (compilation happens there)."""

    def __init__(self, warmup: int, counting: Counting | None) -> None:
        self.warmup, self.count, self.start = warmup, 0, 0.0
        self.counting, self.graphs_at_warmup = counting, 0

    def on_train_batch_end(self, *_: Any) -> None:
        self.count += 1
        if self.count == self.warmup:
            self.start = time.perf_counter()
            self.graphs_at_warmup = self.counting.graphs if self.counting else 0

    def graphs_after_warmup(self) -> int:
        return (self.counting.graphs - self.graphs_at_warmup) if self.counting else 0

    def rate(self) -> float:
        return (self.count - self.warmup) / max(time.perf_counter() - self.start, 1e-9)


def measure(backend_name: str, steps: int) -> dict[str, Any]:
    from torch._dynamo.utils import counters

    results: dict[str, Any] = {"torch": torch.__version__, "lightning": pl.__version__, "backend": backend_name}
    for variant in VARIANTS:
        if variant == "with" and not supports_with_block():
            results[variant] = {"error": "not supported by this Lightning"}
            continue
        eager = run(variant, None, steps)
        torch._dynamo.reset()
        counters.clear()
        counting = Counting(backend_name)
        try:
            compiled = run(variant, counting, steps)
        except Exception as exc:  # report, do not stop: the matrix records failures per version
            results[variant] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
            continue
        results[variant] = {
            "eager_steps_per_s": eager["steps_per_s"],
            "compiled_steps_per_s": compiled["steps_per_s"],
            "graphs": counting.graphs,
            "graph_breaks": sum(counters["graph_break"].values()),
            "recompiles": compiled["graphs_after_warmup"],
            "model_matmuls_in_graphs": counting.matmuls,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure(args.backend, args.steps)
    if args.json:
        print(json.dumps(results))
        return
    print(f"torch {results['torch']}, lightning {results['lightning']}, backend {args.backend}, CPU")
    header = f"{'variant':<9}{'eager st/s':>11}{'compiled st/s':>15}{'graphs':>8}{'breaks':>8}{'recompiles':>11}"
    print(header + f"{'matmuls in graphs':>19}")
    for variant in VARIANTS:
        row = results[variant]
        if "error" in row:
            print(f"{variant:<9}  {row['error']}")
            continue
        print(
            f"{variant:<9}{row['eager_steps_per_s']:>11}{row['compiled_steps_per_s']:>15}{row['graphs']:>8}"
            f"{row['graph_breaks']:>8}{row['recompiles']:>11}{row['model_matmuls_in_graphs']:>19}"
        )


if __name__ == "__main__":
    main()
