# Copyright The Lightning AI team.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Modules and utilities for testing multi-optimizer training under ``torch.compile``.

The modules are ``BoringModel`` subclasses trained on its ``RandomDataset``; ``fit`` trains one for a few batches on CPU
from a fixed seed, so that eager and compiled training of the same module can be compared parameter by parameter.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

# ``aot_eager`` runs the same ATen kernels as eager; ``inductor`` fuses kernels and may reorder float reductions.
AOT_EAGER_TOLERANCE = 1e-6
INDUCTOR_TOLERANCE = 1e-5


class RequiresGradRecorder(Callback):
    """Records every parameter whose ``requires_grad`` after a training step differs from before it."""

    def __init__(self) -> None:
        self.before: dict[str, bool] = {}
        self.changed: list[tuple[int, str]] = []
        self.steps = 0

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self.before = {name: p.requires_grad for name, p in pl_module.named_parameters()}

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.steps += 1
        after = {name: p.requires_grad for name, p in pl_module.named_parameters()}
        self.changed += [(batch_idx, name) for name, flag in after.items() if self.before[name] != flag]


class GraphCountAtStep(Callback):
    """Remembers, at the end of each training step, how many graphs a ``CompileCounterWithBackend`` has seen."""

    def __init__(self, counter: Any) -> None:
        self.counter = counter
        self.per_step: list[int] = []

    def on_train_batch_end(self, *_: Any) -> None:
        self.per_step.append(self.counter.frame_count)


class AutomaticToggleModule(BoringModel):
    """Issue #21513: automatic optimization that toggles its optimizer and logs inside ``training_step``."""

    def __init__(self, optimizer: str = "sgd") -> None:
        super().__init__()
        self.optimizer_name = optimizer
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.frozen(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.toggle_optimizer(self.optimizers())
        loss = self.step(batch)
        self.log("train_loss", loss)
        self.untoggle_optimizer(self.optimizers())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = list(self.parameters())
        if self.optimizer_name == "adam":
            return torch.optim.Adam(params, lr=0.01)
        return torch.optim.SGD(params, lr=0.05)


class ManualToggleGAN(BoringModel):
    """A GAN-style module with two (or three) optimizers, each phase wrapped in a toggle.

    ``BoringModel``'s ``layer`` is the discriminator. ``style`` selects how the phase is written: ``"calls"`` (toggle,
    zero_grad, backward, step, untoggle), ``"toggled"`` (the same inside ``with self.toggled_optimizer(opt):``),
    ``"block"`` (``with self.toggle_optimizer(opt, step=True):`` around the backward only), ``"toggled_block"``
    (``with self.toggled_optimizer(opt, step=True):`` around the backward only) or ``"renamed"`` (the body of
    ``"toggled"`` inside a bare ``with self.toggle_optimizer(opt):``, which only toggles). With ``three=True`` a
    third optimizer shares parameters with the others. ``optimizer`` is ``"sgd"`` or ``"adam"``. ``clip`` clips the
    gradients' norm to this value between backward and step, as the manual optimization docs show.
    """

    def __init__(
        self,
        style: str = "calls",
        three: bool = False,
        fail_at: int | None = None,
        optimizer: str = "sgd",
        clip: float | None = None,
    ) -> None:
        super().__init__()
        self.clip = clip
        self.automatic_optimization = False
        self.style = style
        self.optimizer_name = optimizer
        self.three = three
        self.fail_at = fail_at
        self.generator = nn.Sequential(nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32))
        self.shared = nn.Linear(32, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)

    def _phase(self, optimizer: Any, phase: int, batch: Any, fail: bool) -> None:
        if self.style in ("block", "toggled_block"):  # the block does zero_grad, step and untoggle
            block = self.toggle_optimizer if self.style == "block" else self.toggled_optimizer
            with block(optimizer, step=True):
                self.manual_backward(self._loss(phase, batch))
                self._clip(optimizer)
                if fail:
                    raise RuntimeError("failure inside the toggled region")
            return
        if self.style == "renamed":  # upstream's `toggled_optimizer` body in a bare block, which only toggles
            with self.toggle_optimizer(optimizer):
                self._step(optimizer, phase, batch, fail)
            return
        if self.style == "toggled":
            with self.toggled_optimizer(optimizer):
                self._step(optimizer, phase, batch, fail)
            return
        self.toggle_optimizer(optimizer)
        try:
            self._step(optimizer, phase, batch, fail)
        finally:
            self.untoggle_optimizer(optimizer)

    def _loss(self, phase: int, batch: Any) -> torch.Tensor:
        if phase == 0:  # generator: fool the discriminator
            return self.layer(self.shared(self.generator(self.frozen(batch)))).mean()
        if phase == 1:  # discriminator
            return self.loss(self.layer(self.shared(batch)))
        return (self.shared(batch) - self.generator(batch).detach()).pow(2).mean()  # third optimizer

    def _step(self, optimizer: Any, phase: int, batch: Any, fail: bool) -> None:
        optimizer.zero_grad()
        self.manual_backward(self._loss(phase, batch))
        self._clip(optimizer)
        if fail:
            raise RuntimeError("failure inside the toggled region")
        optimizer.step()

    def _clip(self, optimizer: Any) -> None:
        if self.clip is not None:
            self.clip_gradients(optimizer, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")

    def training_step(self, batch: Any, batch_idx: int) -> None:
        # Keep per-step Python values (``batch_idx``, fresh closures) out of the toggled phases: torch 2.1 specializes
        # such values when they are live across the graph breaks at each toggle, and would recompile every batch.
        fail = self.fail_at is not None and self.fail_at == batch_idx
        optimizers = self.optimizers()
        for phase in range(3 if self.three else 2):
            self._phase(optimizers[phase], phase, batch, fail)

    def configure_optimizers(self) -> list:
        generator = list(self.generator.parameters()) + list(self.shared.parameters()) + list(self.frozen.parameters())
        discriminator = list(self.layer.parameters()) + list(self.shared.parameters())

        def make(params: Any) -> torch.optim.Optimizer:
            if self.optimizer_name == "adam":
                return torch.optim.Adam(params, lr=0.01)
            return torch.optim.SGD(params, lr=0.05)

        optimizers = [make(generator), make(discriminator)]
        if self.three:
            optimizers.append(make(self.shared.parameters()))
        return optimizers


def fit(
    make_module: Callable[[], LightningModule],
    root_dir: Path,
    backend: Any | None = None,
    steps: int = 4,
    callbacks: list | None = None,
    seed: int = 7,
    epochs: int = 1,
    **trainer_kwargs: Any,
) -> LightningModule:
    """Build the module from ``seed``, optionally compile it, and train it on CPU: ``epochs`` of ``steps`` batches."""
    if backend is not None:
        torch._dynamo.reset()  # start from an empty cache so that every test counts its own compilations
    torch.manual_seed(seed)
    module = make_module()
    model = torch.compile(module, backend=backend) if backend is not None else module
    trainer = Trainer(
        default_root_dir=root_dir,
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        limit_train_batches=steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **trainer_kwargs,
    )
    trainer.fit(model)
    return module


def max_parameter_difference(first: LightningModule, second: LightningModule) -> float:
    """The largest absolute difference between the two modules' parameters, name by name."""
    other = dict(second.named_parameters())
    return max((p.detach() - other[name].detach()).abs().max().item() for name, p in first.named_parameters())
