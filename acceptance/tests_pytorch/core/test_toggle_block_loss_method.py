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
"""A compiled GAN whose phases are toggle blocks around a loss method trains like eager (release 0013, issue #37).

Dynamo skips the frame of a ``with self.toggled_optimizer(opt):`` block, so a ``LightningModule`` method called in it
(``_disc``, which runs the discriminator, as the docs advise) is compiled as a frame of its own that runs under both
optimizers' toggles (pytorch/pytorch#139476). With a term whose input requires grad, as every gradient penalty has, on
torch 2.4.1 the series before 0013 trained silently wrong (``D.weight`` 0.35 away from eager after 4 steps): tracing
the closure-less ``step()`` marks the parameters as static inputs, whose ``requires_grad`` those releases never guard.

The module is the issue's reduced one: ``G = nn.Linear(4, 4)``, ``D = nn.Linear(4, 1)``, SGD, 4 batches of 2. Each
phase is written as a ``toggled_optimizer`` block, a ``with self.toggle_optimizer(opt):`` block, explicit toggle and
untoggle calls, or a stepping block of either name (``step=True``), with the discriminator's phase first (as in DCGAN)
or the generator's. Compiled with ``torch.compile(model, backend="aot_eager")``, it trains like eager.
"""

from typing import Any

import pytest
import torch
from torch import nn

from lightning.pytorch import LightningModule
from tests_pytorch.helpers.compile_toggling import AOT_EAGER_TOLERANCE, fit, max_parameter_difference
from tests_pytorch.helpers.runif import RunIf

FORMS = ["toggled", "toggle", "explicit", "toggled_step", "toggle_step"]


class LossMethodGAN(LightningModule):
    """Issue #37's reduced module: each loss computed through ``_disc``, a method that runs the discriminator."""

    def __init__(self, form: str, discriminator_first: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.form = form
        self.discriminator_first = discriminator_first
        self.G = nn.Linear(4, 4)
        self.D = nn.Linear(4, 1)
        self.data = [torch.randn(4) for _ in range(8)]

    def _disc(self, x: torch.Tensor) -> torch.Tensor:
        return self.D(x)

    def _block(self, optimizer: Any) -> Any:
        """The block around a phase's body; the body steps unless the block does (``step=True``)."""
        step = self.form.endswith("_step")
        block = self.toggled_optimizer if self.form.startswith("toggled") else self.toggle_optimizer
        return block(optimizer, step=True) if step else block(optimizer)

    def _zero_grad(self, optimizer: Any) -> None:
        if not self.form.endswith("_step"):
            optimizer.zero_grad()

    def _step(self, optimizer: Any) -> None:
        if not self.form.endswith("_step"):
            optimizer.step()

    # Each loss is written in its phase's frame, which Dynamo skips for a block: ``_disc``, called there in both phases,
    # is compiled as a frame of its own that runs under both optimizers' toggles.

    def _discriminator_phase(self, opt_d: Any, batch: torch.Tensor, fake: torch.Tensor) -> None:
        penalty = 0.0 * batch.clone().requires_grad_().sum()  # an input that requires grad, like a gradient penalty
        if self.form == "explicit":
            self.toggle_optimizer(opt_d)
            loss_d = self._disc(fake.detach()).mean() - self._disc(batch).mean() + penalty
            opt_d.zero_grad()
            self.manual_backward(loss_d)
            opt_d.step()
            self.untoggle_optimizer(opt_d)
            return
        with self._block(opt_d):
            loss_d = self._disc(fake.detach()).mean() - self._disc(batch).mean() + penalty
            self._zero_grad(opt_d)
            self.manual_backward(loss_d)
            self._step(opt_d)

    def _generator_phase(self, opt_g: Any, batch: torch.Tensor, fake: torch.Tensor) -> None:
        if self.form == "explicit":
            self.toggle_optimizer(opt_g)
            real_feat = self._disc(batch).detach()
            loss_g = -self._disc(fake).mean() + (self._disc(fake) - real_feat).abs().mean()
            opt_g.zero_grad()
            self.manual_backward(loss_g)
            opt_g.step()
            self.untoggle_optimizer(opt_g)
            return
        with self._block(opt_g):
            real_feat = self._disc(batch).detach()
            loss_g = -self._disc(fake).mean() + (self._disc(fake) - real_feat).abs().mean()
            self._zero_grad(opt_g)
            self.manual_backward(loss_g)
            self._step(opt_g)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        opt_g, opt_d = self.optimizers()
        fake = self.G(batch)
        if self.discriminator_first:
            self._discriminator_phase(opt_d, batch, fake)
            self._generator_phase(opt_g, batch, fake)
        else:
            self._generator_phase(opt_g, batch, fake)
            self._discriminator_phase(opt_d, batch, fake)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.G.parameters(), lr=0.1), torch.optim.SGD(self.D.parameters(), lr=0.1)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data, batch_size=2)


@RunIf(dynamo=True)
@pytest.mark.parametrize("discriminator_first", [True, False], ids=["d_first", "g_first"])
@pytest.mark.parametrize("form", FORMS)
def test_compiled_toggle_blocks_around_a_loss_method_train_like_eager(form, discriminator_first, tmp_path):
    eager = fit(lambda: LossMethodGAN(form, discriminator_first), tmp_path)
    compiled = fit(lambda: LossMethodGAN(form, discriminator_first), tmp_path, backend="aot_eager")

    assert compiled.trainer.global_step == eager.trainer.global_step == 8
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE
    assert all(p.requires_grad for p in compiled.parameters())
