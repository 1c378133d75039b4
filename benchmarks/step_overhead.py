"""Where eager Lightning's step goes beyond a plain PyTorch loop's: each helper against its plain counterpart.

One eager fit of ``compile_cost.py``'s GAN (Adam, explicit toggle calls, ``--modules`` modules): even steps call
Lightning's helpers (``toggle_optimizer``, ``manual_backward``, ``LightningOptimizer.step``, ``untoggle_optimizer``),
odd steps their plain counterparts (``requires_grad_`` loops, ``Tensor.backward``, the optimizer's own ``step``), each
call timed; and the Trainer's own time between two ``training_step`` calls (hook dispatch, data fetching, the loop),
which a plain loop does not have. It prints median microseconds a step (both phases), one intra-op thread. None of it
can be compiled: it runs between the compiled frames, so it is what ``torch.compile(model)`` pays above a plain loop
besides Dynamo's own graph breaks (``reproducers/graph_break_runtime_cost.py``). Run it with an environment's Python:

    .work/venvs/py3.11-torch2.15.0-sdist-2.6.6/bin/python benchmarks/step_overhead.py --modules 10 [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from compile_cost import _adams, _deepen
from should_i_compile import depth_for
from toggle_cost import GAN
from torch.utils.data import DataLoader, TensorDataset

# what each helper is measured against
COUNTERPARTS = {
    "toggle_optimizer": "requires_grad_(False) loop",
    "manual_backward": "Tensor.backward",
    "LightningOptimizer.step": "Optimizer.step",
    "untoggle_optimizer": "requires_grad_(True) loop",
}
BETWEEN_STEPS = "Trainer between two training_step calls"


class TimedGAN(GAN):
    def __init__(self, depth: int) -> None:
        super().__init__(variant="calls")
        _deepen(self, depth)
        self.times: dict[str, list[float]] = {}
        self.step_end: float | None = None

    def _timed(self, name: str, call: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        out = call(*args)
        self.times.setdefault(name, []).append(time.perf_counter() - start)
        return out

    def training_step(self, batch: Any, batch_idx: int) -> None:
        if self.step_end is not None:
            self.times.setdefault(BETWEEN_STEPS, []).append(time.perf_counter() - self.step_end)
        lightning = batch_idx % 2 == 0
        phases = zip(self.optimizers(), (True, False), (self.discriminator, self.generator), strict=True)
        for optimizer, generator_phase, other in phases:  # `other`: the network the phase's toggle freezes
            if lightning:
                self._timed("toggle_optimizer", self.toggle_optimizer, optimizer)
                optimizer.zero_grad()
                self._timed("manual_backward", self.manual_backward, self._loss(generator_phase, batch[0]))
                self._timed("LightningOptimizer.step", optimizer.step)
                self._timed("untoggle_optimizer", self.untoggle_optimizer, optimizer)
                continue
            self._timed(COUNTERPARTS["toggle_optimizer"], _requires_grad, other, False)
            optimizer.zero_grad()
            self._timed(COUNTERPARTS["manual_backward"], self._loss(generator_phase, batch[0]).backward)
            self._timed(COUNTERPARTS["LightningOptimizer.step"], optimizer.optimizer.step)
            self._timed(COUNTERPARTS["untoggle_optimizer"], _requires_grad, other, True)
        self.step_end = time.perf_counter()

    def configure_optimizers(self) -> list:
        return _adams(self, fused=False)


def _requires_grad(network: torch.nn.Module, value: bool) -> None:
    for parameter in network.parameters():
        parameter.requires_grad_(value)


def measure(modules: int, steps: int, batch: int) -> dict[str, Any]:
    torch.manual_seed(0)
    gan = TimedGAN(depth_for(modules))
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, limit_train_batches=steps, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(gan, DataLoader(TensorDataset(torch.randn(batch * steps, 64)), batch_size=batch))
    # each helper runs twice a step (both phases) every other step; the Trainer's time once a step
    per_step = {name: 1e6 * statistics.median(values[4:]) * (1 if name == BETWEEN_STEPS else 2)
                for name, values in gan.times.items()}  # fmt: skip
    return {"torch": torch.__version__.split("+")[0], "modules": sum(1 for _ in gan.modules()), "us_per_step": per_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--modules", type=int, default=10, help="module count of the GAN (default 10)")
    parser.add_argument("--steps", type=int, default=300, help="steps of the fit, half of them plain (default 300)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.steps < 20 or args.modules < 1:
        parser.error("--steps must be at least 20 and --modules at least 1")
    torch.set_num_threads(1)
    result = measure(args.modules, args.steps, args.batch)
    if args.json:
        print(json.dumps(result))
        return
    times = result["us_per_step"]
    print(f"torch {result['torch']}, {result['modules']} modules, eager, CPU, 1 thread: µs a step (both phases)")
    print(f"{BETWEEN_STEPS:<42}{times[BETWEEN_STEPS]:>8.0f}")
    for helper, counterpart in COUNTERPARTS.items():
        extra = times[helper] - times[counterpart]
        print(f"{helper:<24}{times[helper]:>8.0f}  {counterpart:<27}{times[counterpart]:>8.0f}  {extra:>+8.0f}")


if __name__ == "__main__":
    main()
