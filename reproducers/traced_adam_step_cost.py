"""What an Adam update traced by Dynamo costs against the eager one, per backend: no Lightning involved.

Minimal, torch only, CPU, one intra-op thread. Run with the torch under test:

    python reproducers/traced_adam_step_cost.py [--params 50] [--steps 30]

It times ``optimizer.step()`` for ``--params`` 256x256 parameters: eager (torch's default ``foreach`` Adam), and
compiled with ``torch.compile(step, backend=...)`` for ``aot_eager`` and ``inductor``, after a warm-up. ``aot_eager``
runs the traced update op by op, without the ``foreach`` kernels eager Adam uses and without inductor's fusion, so it
is several times slower than eager; ``inductor`` fuses it and is faster than eager.

This is why ``torch.compile(model)`` on a ``LightningModule`` with manual optimization is slow with ``aot_eager`` (and
on torch releases whose inductor does not fuse the update well) and fast with ``inductor``: from torch 2.4 a
closure-less ``opt.step()`` inside the compiled ``training_step`` is traced, as upstream Lightning has it. A plain
PyTorch loop that compiles its whole step pays the same; one that compiles only its losses does not.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def time_step(backend: str | None, params: int, steps: int) -> float:
    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(256, 256)) for _ in range(params)]
    optimizer = torch.optim.Adam(weights, lr=1e-3)
    for weight in weights:
        weight.grad = torch.randn_like(weight)

    def step() -> None:
        optimizer.step()

    run = torch.compile(step, backend=backend) if backend else step
    for _ in range(3):  # warm-up: tracing and compiling
        run()
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        durations.append(time.perf_counter() - start)
    return 1000 * statistics.median(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--params", type=int, default=50)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    eager = time_step(None, args.params, args.steps)
    print(f"torch {torch.__version__}, {args.params} parameters of 256x256, Adam, CPU, 1 thread")
    print(f"  eager step:      {eager:.2f} ms")
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = time_step(backend, args.params, args.steps)
        print(f"  {backend + ' step:':<16} {compiled:.2f} ms ({compiled / eager:.2f}x eager)")


if __name__ == "__main__":
    main()
