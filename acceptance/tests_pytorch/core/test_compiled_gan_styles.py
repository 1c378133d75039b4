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
"""A GAN whose generator runs in both phases, compiled two ways and written in four styles (issue #23).

The discriminator phase scores ``G(z)`` with the generator frozen by ``toggle_optimizer``, the generator phase scores
``D(G(z))`` with the discriminator frozen, so each network runs under both optimizers' toggles. torch before 2.12
can reuse a graph that Dynamo compiled under the other toggle state (pytorch/pytorch#139476): the loss then has no
``grad_fn``, or silently lacks the gradients of the compiled network. Each case must train to the eager run's
parameters on every torch (series v6: also 2.4, where v5 stopped one case with the error that names the cause).
Styles ``loss_method`` and ``inline`` write each phase as ``with self.toggle_optimizer(opt, step=True):``; style
``loop`` makes explicit toggle calls in a loop over the optimizers and runs ``self(z)`` in both phases, which without
release 0013 trains silently wrong on torch 2.8.0 even with the module compiled (issue #42).
"""

from typing import Any

import pytest
import torch
from lightning_utilities.core.imports import RequirementCache
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend
from torch.utils.data import DataLoader

from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from tests_pytorch.helpers.compile_toggling import GraphCountAtStep
from tests_pytorch.helpers.runif import RunIf

STYLES = ("calls", "toggled", "loss_method", "inline", "loop")


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 32))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TwoPhaseGAN(BoringModel):
    """``style`` selects how each phase is written; ``backend`` compiles the networks on their own.

    ``discriminator_first`` runs the discriminator's phase first, as in DCGAN, so that the generator is first
    compiled while frozen. With ``scaled`` the generator's optimizer also owns the uncompiled ``scale`` of ``G(z)``
    (a fixed buffer otherwise): a generator loss whose compiled part lost its graph keeps a ``grad_fn`` then, and
    would train silently wrong.
    """

    def __init__(self, style: str, discriminator_first: bool, scaled: bool = False, backend: Any = None) -> None:
        torch.manual_seed(0)
        super().__init__()
        self.automatic_optimization = False
        self.style = style
        self.discriminator_first = discriminator_first
        generator, discriminator = Generator(), Discriminator()
        self.G = torch.compile(generator, backend=backend) if backend else generator
        self.D = torch.compile(discriminator, backend=backend) if backend else discriminator
        if scaled:
            self.scale = nn.Parameter(torch.ones(32))
        else:
            self.register_buffer("scale", torch.ones(32))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.D(self.G(z) * self.scale)

    def _generator_loss(self, z: torch.Tensor) -> torch.Tensor:
        return nn.functional.softplus(-self.D(self.G(z) * self.scale)).mean()

    def _discriminator_loss(self, z: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        fake = (self.G(z) * self.scale).detach()
        return nn.functional.softplus(self.D(fake)).mean() + nn.functional.softplus(-self.D(real)).mean()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_g, opt_d = self.optimizers()
        z, real = batch, batch.flip(0) * 0.5 + 1.0
        g_first = not self.discriminator_first
        first, second = (opt_g, opt_d) if g_first else (opt_d, opt_g)
        softplus = nn.functional.softplus
        # Each phase is written out in the step, not in a loop or a shared helper, so that Dynamo sees it as users
        # write it; `g_first` is a constant for Dynamo. Only `loss_method` computes the losses in methods.
        if self.style == "calls":
            self.toggle_optimizer(first)
            first.zero_grad()
            loss = (
                softplus(-self.D(self.G(z) * self.scale)).mean()
                if g_first
                else softplus(self.D((self.G(z) * self.scale).detach())).mean() + softplus(-self.D(real)).mean()
            )
            self.manual_backward(loss)
            first.step()
            self.untoggle_optimizer(first)
            self.toggle_optimizer(second)
            second.zero_grad()
            loss = (
                softplus(-self.D(self.G(z) * self.scale)).mean()
                if not g_first
                else softplus(self.D((self.G(z) * self.scale).detach())).mean() + softplus(-self.D(real)).mean()
            )
            self.manual_backward(loss)
            second.step()
            self.untoggle_optimizer(second)
        elif self.style == "toggled":
            with self.toggled_optimizer(first):
                first.zero_grad()
                loss = (
                    softplus(-self.D(self.G(z) * self.scale)).mean()
                    if g_first
                    else softplus(self.D((self.G(z) * self.scale).detach())).mean() + softplus(-self.D(real)).mean()
                )
                self.manual_backward(loss)
                first.step()
            with self.toggled_optimizer(second):
                second.zero_grad()
                loss = (
                    softplus(-self.D(self.G(z) * self.scale)).mean()
                    if not g_first
                    else softplus(self.D((self.G(z) * self.scale).detach())).mean() + softplus(-self.D(real)).mean()
                )
                self.manual_backward(loss)
                second.step()
        elif self.style == "loss_method":
            with self.toggle_optimizer(first, step=True):
                self.manual_backward(self._generator_loss(z) if g_first else self._discriminator_loss(z, real))
            with self.toggle_optimizer(second, step=True):
                self.manual_backward(self._generator_loss(z) if not g_first else self._discriminator_loss(z, real))
        elif self.style == "loop":  # the generator frozen by the toggle in the discriminator's phase, not detached
            for opt in (first, second):
                self.toggle_optimizer(opt)
                opt.zero_grad()
                if opt is opt_g:
                    loss = softplus(-self(z)).mean()
                else:
                    loss = softplus(self(z)).mean() + softplus(-self.D(real)).mean()
                self.manual_backward(loss)
                opt.step()
                self.untoggle_optimizer(opt)
        else:  # "inline": the networks called directly in the stepping block
            with self.toggle_optimizer(first, step=True):
                loss = (
                    softplus(-self.D(self.G(z) * self.scale)).mean()
                    if g_first
                    else softplus(self.D((self.G(z) * self.scale).detach())).mean() + softplus(-self.D(real)).mean()
                )
                self.manual_backward(loss)
            with self.toggle_optimizer(second, step=True):
                loss = (
                    softplus(-self.D(self.G(z) * self.scale)).mean()
                    if not g_first
                    else softplus(self.D((self.G(z) * self.scale).detach())).mean() + softplus(-self.D(real)).mean()
                )
                self.manual_backward(loss)

    def trained_parameters(self) -> list:
        scale = [self.scale] if isinstance(self.scale, nn.Parameter) else []
        return list(self.G.parameters()) + list(self.D.parameters()) + scale

    def configure_optimizers(self) -> tuple:
        generator = [p for p in self.trained_parameters() if not any(p is d for d in self.D.parameters())]
        return torch.optim.Adam(generator, lr=0.01), torch.optim.Adam(self.D.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader:
        torch.manual_seed(1)
        return DataLoader(RandomDataset(32, 64), batch_size=8)


def _fit(model: Any, tmp_path: Any, callbacks: list = ()) -> None:
    trainer = Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        max_steps=6,  # three batches: each steps both optimizers
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )
    trainer.fit(model)


@pytest.fixture(scope="module")
def eager_parameters(tmp_path_factory):
    cache = {}

    def get(discriminator_first: bool, scaled: bool) -> list:
        if (discriminator_first, scaled) not in cache:
            model = TwoPhaseGAN("calls", discriminator_first, scaled)
            _fit(model, tmp_path_factory.mktemp("eager"))
            cache[discriminator_first, scaled] = [p.detach().clone() for p in model.trained_parameters()]
        return cache[discriminator_first, scaled]

    return get


@RunIf(dynamo=True)
@pytest.mark.parametrize("compiled", ["module", "networks"])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    ("discriminator_first", "scaled"),
    [(False, False), (True, False), (True, True)],
    ids=["generator_first", "discriminator_first", "discriminator_first_scaled"],
)
def test_compiled_gan_trains_as_eager(compiled, style, discriminator_first, scaled, eager_parameters, tmp_path):
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    model = TwoPhaseGAN(style, discriminator_first, scaled, backend=counter if compiled == "networks" else None)
    graphs = GraphCountAtStep(counter)
    # the toggles make Dynamo check `requires_grad` again (release 0013): no case may fail or train differently
    _fit(torch.compile(model, backend=counter) if compiled == "module" else model, tmp_path, [graphs])
    # `assert_close`'s tolerance: compiled and eager Adam differ by float rounding (up to 1e-6 here)
    torch.testing.assert_close(model.trained_parameters(), eager_parameters(discriminator_first, scaled))
    assert counter.frame_count > 0, "nothing was compiled"
    # at most one graph per network and toggle state, all compiled in the first step: no recompiles after it
    assert graphs.per_step == [graphs.per_step[0]] * len(graphs.per_step)


class _DetachedLoss(BoringModel):
    """Backpropagates a loss without ``grad_fn`` under a toggle, as a graph reused by pytorch/pytorch#139476 gives."""

    def __init__(self, skip_losses_without_grad: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.skip_losses_without_grad = skip_losses_without_grad

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        if loss.requires_grad or not self.skip_losses_without_grad:
            super().backward(loss, *args, **kwargs)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        self.toggle_optimizer(optimizer)
        optimizer.zero_grad()
        self.manual_backward(self.step(batch).detach())
        optimizer.step()
        self.untoggle_optimizer(optimizer)


def test_a_backward_hook_that_skips_losses_without_grad_keeps_working(tmp_path):
    """As on Lightning 2.6.6: ``manual_backward`` names the Dynamo issue only when the backward itself fails."""
    model = _DetachedLoss(skip_losses_without_grad=True)
    _fit(model, tmp_path)
    assert model.trainer.global_step == 6


@RunIf(dynamo=True)
def test_a_compiled_loss_without_grad_fn_under_a_toggle_names_the_cause_where_dynamo_can_reuse_graphs(tmp_path):
    named = bool(RequirementCache("torch<2.12"))
    match = r"no `grad_fn`.*pytorch/pytorch#139476.*To avoid it," if named else "does not require grad"
    with pytest.raises(RuntimeError, match=match):
        _fit(torch.compile(_DetachedLoss(skip_losses_without_grad=False), backend="aot_eager"), tmp_path)
