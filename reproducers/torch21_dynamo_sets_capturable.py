"""torch < 2.4: Dynamo sets ``capturable=True`` on any optimizer it sees, so the next eager CPU step fails.

Minimal, torch only. Run with the torch under test:

    python reproducers/torch21_dynamo_sets_capturable.py

On torch 2.1.2, 2.2.2 and 2.3.1 this prints ``BUG`` and exits 1: reading the optimizer in a compiled function makes
Dynamo build an ``OptimizerVariable``, whose constructor sets ``param_groups[i]["capturable"] = True`` on the real
optimizer (torch/_dynamo/variables/optimizer.py). The optimizer then asserts on its next eager ``step`` on CPU:
``If capturable=True, params and state_steps must be CUDA or XLA tensors``. On torch 2.4.1, 2.6.0 and 2.15.0 it prints
``OK``.

Lightning hits this with automatic optimization when ``training_step`` calls ``self.optimizers()`` (even when that
method is kept out of Dynamo, its return value enters the compiled frame) and the optimizer's step runs eagerly.
Patch 0005 of the series works around it in ``LightningOptimizer.step``: it resets the flag to the user's value for CPU
parameters before the step and again right after the closure (the compiled ``training_step``) returns. This script
stays as the explanation of that workaround.
"""

import sys

import torch


def main() -> int:
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.Adam([param], lr=0.1)

    @torch.compile(backend="eager")
    def look_at(x: torch.Tensor, opt: torch.optim.Optimizer) -> torch.Tensor:
        return x * opt.param_groups[0]["lr"]

    look_at(torch.ones(2), optimizer)
    param.grad = torch.ones(2)
    try:
        optimizer.step()
    except AssertionError as exc:
        print(f"BUG (torch {torch.__version__}): {exc}; capturable={optimizer.param_groups[0]['capturable']}")
        return 1
    print(f"OK (torch {torch.__version__}): capturable={optimizer.param_groups[0]['capturable']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
