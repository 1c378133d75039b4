"""Two losses returned by one compiled region cannot both be backpropagated: torch only.

Minimal, torch only, CPU, seconds. Run with the torch under test:

    python reproducers/two_losses_from_one_compiled_region.py [--backend aot_eager]

One function computes two losses from the same input, one through a hidden layer (``w1``, then ``w2``) and one through
``w2`` alone, as a GAN's step computes the discriminator's and the generator's loss in one ``training_step``. Each loss
is backpropagated on its own, the first and then the second, as two optimizers do. In eager mode the second backward
works: the two losses share only leaf tensors. Compiled, both come out of one graph, which autograd runs as one node:
the first backward frees what the node saved, and the second raises ``RuntimeError: Trying to backward through the
graph a second time``. Lightning adds nothing to it: a compiled ``training_step`` that returns or keeps both losses for
two ``manual_backward`` calls fails the same way on plain Lightning 2.6.6.

The remedy users should use is a compiled call per loss (in Lightning: a method per optimizer's loss, each called
under its own toggle), which gives eager's gradients. ``retain_graph=True`` on the first backward is no remedy: it keeps
the whole graph's saved tensors alive until the second backward where it works, and recent torch refuses it for graphs
compiled with donated buffers (2.8.0, 2.15.0: "This backward function was compiled with non-empty donated buffers"). The
script prints one row per variant, then ``BUG`` and exits 1 when the compiled row fails as described, ``NOT
REPRODUCED`` and 0 when it does not, and ``REMEDY WRONG`` and 2 when the remedy's gradients differ from eager's. Seen
(aot_eager, CPU): ``BUG`` on torch 2.1.2, 2.8.0 and 2.15.0, the remedy right on each; ``retain_graph=True`` works on
2.1.2 and is refused on 2.8.0 and 2.15.0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
from torch import Tensor

Losses = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


def both_losses(x: Tensor, w1: Tensor, w2: Tensor) -> tuple[Tensor, Tensor]:
    return (torch.tanh(x @ w1) @ w2).sum(), (x @ w2).pow(2).sum()


def first_loss(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    return (torch.tanh(x @ w1) @ w2).sum()


def second_loss(x: Tensor, w2: Tensor) -> Tensor:
    return (x @ w2).pow(2).sum()


def gradients(losses: Losses, retain_graph: bool = False) -> tuple[Tensor, ...]:
    """Backpropagate the two losses one after the other; the weights' gradients."""
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    w1, w2 = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    first, second = losses(x, w1, w2)
    first.backward(retain_graph=retain_graph)
    second.backward()
    return w1.grad, w2.grad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="aot_eager", help="the torch.compile backend (default: aot_eager)")
    backend = parser.parse_args().backend
    compiled_both = torch.compile(both_losses, backend=backend)
    compiled_first, compiled_second = (
        torch.compile(first_loss, backend=backend),
        torch.compile(second_loss, backend=backend),
    )

    def one_call_per_loss(x: Tensor, w1: Tensor, w2: Tensor) -> tuple[Tensor, Tensor]:
        return compiled_first(x, w1, w2), compiled_second(x, w2)

    eager = gradients(both_losses)
    print(f"torch {torch.__version__}, backend {backend}")
    print("eager, two backward calls:                  ok")
    try:
        gradients(compiled_both)
        print("compiled, one region, two backward calls:   ok (the bug is not there)")
        failed = False
    except RuntimeError as error:
        print(f"compiled, one region, two backward calls:   RuntimeError: {str(error).splitlines()[0][:60]}...")
        failed = "backward through the graph a second time" in str(error)
    remedy = gradients(one_call_per_loss)
    equal = all(torch.allclose(a, b) for a, b in zip(remedy, eager, strict=True))
    print("remedy, one compiled call per loss:         " + ("ok, eager's gradients" if equal else "WRONG gradients"))
    try:
        gradients(compiled_both, retain_graph=True)
        print("retain_graph=True on the first (no remedy): ok")
    except RuntimeError as error:
        print(f"retain_graph=True on the first (no remedy): RuntimeError: {str(error).splitlines()[0][:60]}...")
    if not equal:
        print("REMEDY WRONG")
        return 2
    print("BUG" if failed else "NOT REPRODUCED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
