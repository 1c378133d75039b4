"""A ``with`` block whose context manager calls a ``torch.compiler.disable``d function is not compiled: torch only.

Minimal, torch only, CPU, seconds. Run with the torch under test:

    python reproducers/context_manager_around_disabled_calls.py [--backend aot_eager] [--nested-graph-breaks]

The compiled function is ``x * 2``, then a block that calls an ``nn.Sequential`` and an ``nn.Linear`` written inline,
then ``y + 1``. Around the block it calls two no-op helpers decorated with ``torch.compiler.disable``, as Lightning's
``toggle_optimizer``/``untoggle_optimizer`` are: explicitly (``toggle(); ...; untoggle()``), or from the enter and exit
of a context manager, written as a ``@contextlib.contextmanager`` generator (as Lightning's ``toggled_optimizer``) or
as a class with ``__enter__``/``__exit__``. The script counts the graphs and their ops with
``torch._dynamo.testing.CompileCounterWithBackend`` and prints one row per variant:

- explicit calls: 3 graphs (before, inside and after the block), every op compiled;
- either context manager: 0 graphs. The graph break in ``__enter__`` is one Dynamo cannot resume from ("Failed to
  handle graph break gracefully. Skipping the function and falling back to eager", in 2.15), so it skips the frame:
  the block, and the code before and after it, run eagerly, and so do the ``torch.nn`` modules called in it, whose
  ``forward`` frames Dynamo does not compile on their own. On torch 2.3.1 and 2.4.1 the generator gets 1 graph
  (``x * 2``) for another reason: Dynamo does not trace ``@contextmanager`` generators there yet (its control row
  too; support came with pytorch#136033);
- the same context managers without the disabled calls (controls): 1 graph with every op;
- the class context manager around a network class of the user's own: 1 graph, its ``forward`` compiled as a frame of
  its own (only ``torch.nn``'s own frames are skipped), the code around it eager.

It prints ``BUG`` and exits 1 when a context manager variant compiles fewer ops than the explicit calls, ``OK`` and 0
otherwise. Figures (aot_eager, CPU; graphs/ops for explicit, @contextmanager, class, controls generator/class, own
network):

    torch 2.3.1, 2.4.1:   3/6  1/1  0/0  1/1  1/6  1/2
    torch 2.8.0, 2.15.0:  3/6  0/0  0/0  1/6  1/6  1/2   (2.15.0 also with --nested-graph-breaks)

Lightning users hit it with ``with self.toggled_optimizer(opt):`` in a compiled ``training_step``: the code written in
the block is not compiled, while explicit ``toggle_optimizer``/``untoggle_optimizer`` calls compile it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable

import torch
from torch._dynamo.testing import CompileCounterWithBackend

toggled: list[int] = []


@torch.compiler.disable
def toggle() -> None:
    """Kept out of Dynamo, as Lightning's ``toggle_optimizer``: bookkeeping only."""
    toggled.append(1)


@torch.compiler.disable
def untoggle() -> None:
    toggled.pop()


@contextlib.contextmanager
def generator_cm():
    toggle()
    try:
        yield
    finally:
        untoggle()


class ClassCM:
    def __enter__(self) -> None:
        toggle()

    def __exit__(self, *exc: object) -> None:
        untoggle()


@contextlib.contextmanager
def generator_control():
    toggled.append(1)
    try:
        yield
    finally:
        toggled.pop()


class ClassControl:
    def __enter__(self) -> None:
        toggled.append(1)

    def __exit__(self, *exc: object) -> None:
        toggled.pop()


class Net(torch.nn.Module):
    """A network class of the user's own (not in ``torch.nn``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).relu()


seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
lin = torch.nn.Linear(4, 1)
net = Net()


def explicit(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    toggle()
    y = lin(seq(x)).sum()
    untoggle()
    return y + 1


def with_generator(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    with generator_cm():
        y = lin(seq(x)).sum()
    return y + 1


def with_class(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    with ClassCM():
        y = lin(seq(x)).sum()
    return y + 1


def with_generator_control(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    with generator_control():
        y = lin(seq(x)).sum()
    return y + 1


def with_class_control(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    with ClassControl():
        y = lin(seq(x)).sum()
    return y + 1


def with_class_own_network(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    with ClassCM():
        y = net(x).sum()
    return y + 1


VARIANTS: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = [
    ("explicit toggle()/untoggle() calls", explicit),
    ("with @contextmanager calling them", with_generator),
    ("with class __enter__/__exit__ calling them", with_class),
    ("control: @contextmanager, no disabled call", with_generator_control),
    ("control: class, no disabled call", with_class_control),
    ("class calling them, user's own nn.Module", with_class_own_network),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument(
        "--nested-graph-breaks", action="store_true", help="set torch._dynamo.config.nested_graph_breaks (torch 2.10+)"
    )
    args = parser.parse_args()
    if args.nested_graph_breaks:
        torch._dynamo.config.nested_graph_breaks = True
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    print(f"torch {torch.__version__}, backend={args.backend!r}, nested_graph_breaks={args.nested_graph_breaks}")
    ops = {}
    for name, function in VARIANTS:
        torch._dynamo.reset()
        counter = CompileCounterWithBackend(args.backend)
        out = torch.compile(function, backend=counter)(x)
        torch.testing.assert_close(out, function(x))
        assert not toggled
        ops[function] = counter.op_count
        print(f"  {name:<44} {counter.frame_count} graphs, {counter.op_count} ops")
    if min(ops[with_generator], ops[with_class]) < ops[explicit]:
        print("BUG: a with block whose context manager calls a disabled function compiles less than explicit calls")
        return 1
    print("OK: the with blocks compile as much as the explicit calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
