"""torch 2.1: Dynamo sets ``capturable=True`` on any optimizer it sees, so the next eager CPU step fails.

Minimal, torch only. Run with the torch under test:

    python reproducers/torch21_dynamo_sets_capturable.py

On torch 2.1.x this prints ``BUG`` and exits 1: merely passing an ``Adam`` instance into a compiled function makes
Dynamo build an ``OptimizerVariable``, whose constructor sets ``param_groups[i]["capturable"] = True`` on the real
optimizer (torch/_dynamo/variables/optimizer.py, 2.1). The optimizer then asserts on its next eager ``step`` on CPU:
``If capturable=True, params and state_steps must be CUDA or XLA tensors``. From torch 2.2 on, Dynamo only sets the
flag for CUDA parameters with uninitialised state, and this prints ``OK``.

Lightning hits this with automatic optimization when ``training_step`` calls ``self.optimizers()`` (even when that
method is kept out of Dynamo, its return value enters the compiled frame) and the optimizer's step runs eagerly.
"""

import sys

import torch


def main() -> int:
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.Adam([param], lr=0.1)

    @torch.compile(backend="eager")
    def look_at(x: torch.Tensor, opt: torch.optim.Optimizer) -> torch.Tensor:
        return x * 2

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
