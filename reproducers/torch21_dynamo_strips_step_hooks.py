"""torch < 2.3: once Dynamo is used, torch's built-in optimizers no longer call their step hooks, not even eagerly.

Minimal, torch only. Run with the torch under test:

    python reproducers/torch21_dynamo_strips_step_hooks.py

On torch 2.1.2 and 2.2.2 this prints ``BUG`` and exits 1: the first ``torch.compile`` call patches every optimizer
class of ``torch.optim`` and unwraps the wrapper of ``step`` that runs the hooks registered with
``Optimizer.register_step_post_hook`` (torch/_dynamo/eval_frame.py, ``TorchPatcher``). On torch 2.3.1, 2.4.1, 2.6.0 and
2.15.0 the hooks keep firing and this prints ``OK``.

The series' ``with self.toggle_optimizer(opt):`` counts the optimizer's steps inside the block with these hooks, so
that an ``opt.step()`` written inside the block is not repeated on exit. Before torch 2.3 it shadows the optimizer's
``step`` with a counting instance attribute for the duration of the block instead.
"""

import sys

import torch


def main() -> int:
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    calls: list[int] = []
    optimizer.register_step_post_hook(lambda *_: calls.append(1))

    @torch.compile(backend="eager")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    double(torch.ones(2))
    param.grad = torch.ones(2)
    optimizer.step()  # eager, after Dynamo was used once
    if not calls:
        print(f"BUG (torch {torch.__version__}): the step hook did not run")
        return 1
    print(f"OK (torch {torch.__version__}): the step hook ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
