"""What one ``toggle_optimizer`` + ``untoggle_optimizer`` pair costs on a module with many submodules.

Release patch 0013 makes the toggles re-insert a key in the ``_parameters`` dict of every module whose parameters they
flip, on torch 2.5 to 2.11 and only once Dynamo has compiled something, and before 2.5 look for unmarked submodules
(pytorch/pytorch#139476), marking them once the ``LightningModule`` is compiled. This prints the cost of a toggle pair
before and after a first compile, and with the module compiled, so that the overhead is a figure, not a guess. Run it
with the Python of an environment that has the Lightning to measure (the main job prints where it is), e.g.

    .work/venvs/py3.11-torch2.10.0-sdist-2.6.6/bin/python benchmarks/toggle_refresh_cost.py [--modules 10000]

Two optimizers each hold half of ``--modules`` ``nn.Linear(2, 2)`` layers; the Trainer is replaced by a stub that
only lists them, so nothing but the toggles runs.
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.compile import from_compiled
from torch import nn


class ManyLayers(pl.LightningModule):
    def __init__(self, modules: int) -> None:
        super().__init__()
        self.first = nn.ModuleList(nn.Linear(2, 2) for _ in range(modules // 2))
        self.second = nn.ModuleList(nn.Linear(2, 2) for _ in range(modules - modules // 2))


def toggle_pair_ms(module: ManyLayers, optimizers: list[torch.optim.Optimizer], repeats: int) -> float:
    """Median milliseconds of one toggle + untoggle of the first optimizer."""
    stub = mock.Mock(optimizers=optimizers)
    times = []
    with mock.patch.object(ManyLayers, "trainer", new_callable=mock.PropertyMock, return_value=stub):
        for _ in range(repeats):
            start = time.perf_counter()
            module.toggle_optimizer(optimizers[0])
            module.untoggle_optimizer(optimizers[0])
            times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=10_000, help="number of nn.Linear submodules (default 10000)")
    parser.add_argument("--repeats", type=int, default=21, help="toggle pairs timed per figure (default 21)")
    args = parser.parse_args()
    if args.modules < 2 or args.repeats < 1:
        parser.error("--modules must be at least 2 and --repeats at least 1")

    module = ManyLayers(args.modules)
    optimizers = [torch.optim.SGD(layers.parameters(), lr=0.1) for layers in (module.first, module.second)]
    print(f"torch {torch.__version__}, lightning {pl.__version__} ({pl.__file__}), {args.modules} submodules")
    print(f"  toggle + untoggle, nothing compiled yet: {toggle_pair_ms(module, optimizers, args.repeats):7.1f} ms")
    torch.compile(nn.Linear(2, 2), backend="eager")(torch.randn(1, 2))  # any compile in the process counts
    print(f"  toggle + untoggle, after a compile:      {toggle_pair_ms(module, optimizers, args.repeats):7.1f} ms")
    from_compiled(torch.compile(module, backend="eager"))  # as `Trainer.fit` does with a compiled module
    print(f"  toggle + untoggle, the module compiled:  {toggle_pair_ms(module, optimizers, args.repeats):7.1f} ms")


if __name__ == "__main__":
    main()
