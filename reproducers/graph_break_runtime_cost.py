"""What each graph break costs a compiled function at every call, after compilation: torch only.

Minimal, torch only. Run with the torch under test (one intra-op thread; the figures are per call):

    python reproducers/graph_break_runtime_cost.py [--breaks 0,6,22] [--calls 2000]

A function of a few small tensor operations calls a no-op helper ``BREAKS`` times. Kept out of Dynamo with
``torch.compiler.disable``, as Lightning keeps ``toggle_optimizer``, ``untoggle_optimizer``, ``manual_backward`` and
``clip_gradients`` out, each call splits the compiled function: Dynamo runs the helper eagerly and resumes in a frame
of its own (``torch_dynamo_resume_in_...``), whose guards it checks on every call. The script prints, per number of
breaks, the microseconds a call takes eagerly and compiled (``backend="eager"``: Dynamo without a compiler, so that
only Dynamo's own cost is left), and the slope, microseconds per break per call. A compiled ``training_step`` with
24 breaks (``benchmarks/should_i_compile.py``, ``torch.compile(model)``, the GAN with explicit toggle calls) pays
that slope at every one of them, every step.

It does not report a bug: it measures a cost that grows with the number of breaks, so that a design that adds breaks
on the per-step path can be weighed against it. On a busy 2-core CPU machine (``--calls 1000``, best of 7), 22 breaks
added 80 us a call on torch 2.15.0 (3.4 us per break), 134 us on 2.8.0 (5.4) and 113 us on 2.4.1 (4.6), against
5-14 us with none; each call of the disabled no-op costs 2-3 us eagerly too. ``docs/compile-cost.md`` (series v5,
issue #32) weighs it against the step times of ``benchmarks/should_i_compile.py``.
"""

import argparse
import time

import torch


@torch.compiler.disable
def helper(x: torch.Tensor) -> None:
    """A helper kept out of Dynamo: does nothing."""


def make(breaks: int):
    """A function of two tensor operations and ``breaks`` calls of ``helper`` between them."""
    body = ["def step(x):", "    y = x + 1"]
    for _ in range(breaks):
        body += ["    helper(y)", "    y = y * 1"]
    body += ["    return y.sum()"]
    namespace = {"helper": helper}
    exec("\n".join(body), namespace)  # noqa: S102  (a generated function: one break per line, no loop)
    return namespace["step"]


def per_call_us(functions: list, x: torch.Tensor, calls: int) -> list[float]:
    """Microseconds per call of each function: the best of 7 rounds, the functions interleaved in each round (on a
    busy machine the best round is the one least disturbed, as ``timeit`` advises)."""
    for function in functions:
        for _ in range(20):
            function(x)
    best = [float("inf")] * len(functions)
    for _ in range(7):
        for index, function in enumerate(functions):
            start = time.perf_counter()
            for _ in range(calls):
                function(x)
            best[index] = min(best[index], (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--breaks", default="0,6,22")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(8, 64)
    print(f"torch {torch.__version__}: us per call, eager and compiled (backend='eager')")
    rows = []
    for breaks in [int(b) for b in args.breaks.split(",")]:
        torch._dynamo.reset()
        eager, compiled = per_call_us([make(breaks), torch.compile(make(breaks), backend="eager")], x, args.calls)
        rows.append((breaks, compiled - eager))
        print(f"{breaks:>3} breaks: eager {eager:7.1f}  compiled {compiled:7.1f}  (+{compiled - eager:.1f})")
    (b0, d0), (b1, d1) = rows[0], rows[-1]
    if b1 != b0:
        print(f"slope: {(d1 - d0) / (b1 - b0):.1f} us per break per call")


if __name__ == "__main__":
    main()
