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
"""End-to-end tests of optimizer toggling inside a ``torch.compile``-wrapped ``LightningModule``.

Regression tests for https://github.com/Lightning-AI/pytorch-lightning/issues/21513. Each test compiles a module,
trains it with the ``Trainer`` on CPU and compares the result with eager training from the same seed.

Tolerances: ``aot_eager`` runs the same ATen kernels as eager, so parameters must match to 1e-6. ``inductor`` generates
fused kernels whose floating-point reductions may be reordered, so it is compared to 1e-5.
"""

import sys
from typing import Any
from unittest.mock import Mock

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

from lightning.fabric.utilities.imports import _TORCH_GREATER_EQUAL_2_4
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.demos.boring_classes import BoringModel
from tests_pytorch.helpers.compile_toggling import (
    AOT_EAGER_TOLERANCE,
    INDUCTOR_TOLERANCE,
    AutomaticToggleModule,
    GraphCountAtStep,
    ManualToggleGAN,
    RequiresGradRecorder,
    fit,
    max_parameter_difference,
)
from tests_pytorch.helpers.runif import RunIf


@RunIf(dynamo=True)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("accumulate_grad_batches", [1, 2])
def test_automatic_optimization_toggle_and_log_compiled(optimizer, accumulate_grad_batches, tmp_path):
    """The reproducer of #21513: toggle, log and untoggle inside a compiled ``training_step``.

    With Adam it also covers torch 2.1, whose Dynamo sets ``capturable=True`` on the optimizer while the compiled
    ``training_step`` runs inside the optimizer's closure; Lightning resets it before Adam's eager CPU step.
    """
    recorder = RequiresGradRecorder()
    trainer_kwargs = {"accumulate_grad_batches": accumulate_grad_batches}
    eager = fit(lambda: AutomaticToggleModule(optimizer), tmp_path, **trainer_kwargs)
    compiled = fit(
        lambda: AutomaticToggleModule(optimizer), tmp_path, backend="aot_eager", callbacks=[recorder], **trainer_kwargs
    )

    assert recorder.steps == 4
    assert recorder.changed == []
    assert not compiled.frozen.weight.requires_grad
    assert compiled.trainer.callback_metrics["train_loss"].isfinite()
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE


@RunIf(dynamo=True)
@pytest.mark.parametrize("style", ["calls", "toggled"])
@pytest.mark.parametrize("three", [False, True], ids=["two_optimizers", "three_optimizers_shared"])
def test_manual_optimization_toggling_compiled(style, three, tmp_path):
    """A GAN-style module toggles each optimizer in turn; compiled training equals eager training."""
    recorder = RequiresGradRecorder()
    eager = fit(lambda: ManualToggleGAN(style, three), tmp_path)
    compiled = fit(lambda: ManualToggleGAN(style, three), tmp_path, backend="aot_eager", callbacks=[recorder])

    assert recorder.steps == 4
    assert recorder.changed == []
    assert not compiled.frozen.weight.requires_grad
    assert all(p.requires_grad for name, p in compiled.named_parameters() if not name.startswith("frozen"))
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE


@RunIf(dynamo=True)
@pytest.mark.parametrize("style", ["calls", "toggled"])
def test_exception_inside_toggled_region_restores_requires_grad(style, tmp_path):
    """An exception between toggle and untoggle in a compiled step propagates and leaves ``requires_grad`` intact."""
    torch.manual_seed(7)
    module = ManualToggleGAN(style, fail_at=1)
    before = {name: p.requires_grad for name, p in module.named_parameters()}

    with pytest.raises(RuntimeError, match="failure inside the toggled region"):
        fit(lambda: module, tmp_path, backend="aot_eager")

    assert {name: p.requires_grad for name, p in module.named_parameters()} == before
    assert module._param_requires_grad_state == {}


@RunIf(dynamo=True)
@pytest.mark.skipif(sys.platform == "darwin", reason="fatal error: 'omp.h' file not found")
def test_toggling_compiled_with_inductor(tmp_path):
    """The real backend: the two-optimizer GAN compiled with inductor trains like eager."""
    recorder = RequiresGradRecorder()
    eager = fit(lambda: ManualToggleGAN("toggled"), tmp_path)
    compiled = fit(lambda: ManualToggleGAN("toggled"), tmp_path, backend="inductor", callbacks=[recorder])

    assert recorder.changed == []
    assert max_parameter_difference(eager, compiled) <= INDUCTOR_TOLERANCE


@RunIf(dynamo=True)
@pytest.mark.parametrize("make_module", [AutomaticToggleModule, ManualToggleGAN], ids=["automatic", "manual"])
def test_toggling_adds_no_recompilation_after_first_steps(make_module, tmp_path):
    """Keeping the toggles out of Dynamo must not make Dynamo recompile on every step."""
    counter = CompileCounterWithBackend("aot_eager")
    graphs = GraphCountAtStep(counter)
    fit(make_module, tmp_path, backend=counter, steps=6, callbacks=[graphs])

    assert len(graphs.per_step) == 6
    assert counter.frame_count > 0
    # everything is compiled during the first two steps; later steps reuse the cached graphs
    assert graphs.per_step[1:] == [graphs.per_step[1]] * 5


@RunIf(max_torch="2.4")
def test_capturable_reset_clears_every_cpu_group():
    """The reset behind Adam on torch < 2.4 clears ``capturable`` on every group of CPU parameters, where no eager step
    supports it (pytorch/pytorch#182706), also in groups added later, before the step and again after the closure, in
    which a compiled ``training_step`` may set it again; groups on other devices keep theirs."""
    first, second, third = (torch.nn.Parameter(torch.ones(1)) for _ in range(3))
    elsewhere = torch.nn.Parameter(torch.ones(1, device="meta"))
    adam = torch.optim.Adam([{"params": [first]}, {"params": [second], "capturable": True}], lr=0.1)
    lightning_optimizer = LightningOptimizer(adam)
    adam.add_param_group({"params": [third]})
    adam.add_param_group({"params": [elsewhere]})
    seen = []

    def optimizer_step(optimizer, closure, **kwargs):
        seen.append([group["capturable"] for group in adam.param_groups])
        for group in adam.param_groups:
            group["capturable"] = True  # what a compiled `training_step` inside the closure does
        return closure()

    lightning_optimizer._strategy = Mock(optimizer_step=optimizer_step)
    for group in adam.param_groups:
        group["capturable"] = True  # what Dynamo does to an optimizer that enters a compiled frame before torch 2.4

    assert lightning_optimizer.step(closure=lambda: "loss") == "loss"
    assert seen == [[False, False, False, True]]
    assert [group["capturable"] for group in adam.param_groups] == [False, False, False, True]


class ReadsLearningRateMidway(BoringModel):
    """Automatic optimization whose ``training_step`` looks up its optimizer between two layers."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(32, 32)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        hidden = self.first(batch)
        learning_rate = self.optimizers().param_groups[0]["lr"]
        return self.loss(self.layer(hidden)) / learning_rate

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


@RunIf(dynamo=True)
def test_looking_up_the_optimizers_midway_keeps_one_graph_where_dynamo_traces_it(tmp_path):
    """``optimizers()`` is kept out of Dynamo only where Dynamo cannot trace it, because that costs a graph break."""
    counter = CompileCounterWithBackend("aot_eager")
    eager = fit(ReadsLearningRateMidway, tmp_path)
    compiled = fit(ReadsLearningRateMidway, tmp_path, backend=counter)

    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE
    # PyTorch 2.4+ traces the lookup into the step's graph; before, it runs as Python between two graphs
    assert counter.frame_count == (1 if _TORCH_GREATER_EQUAL_2_4 else 2)


@RunIf(dynamo=True)
@pytest.mark.parametrize("style", ["calls", "block"])
def test_clip_gradients_compiled_trains_like_eager(style, tmp_path):
    """The manual optimization docs' clipping between backward and step, with nothing set on the ``Trainer``."""
    unclipped = fit(lambda: ManualToggleGAN(style), tmp_path)
    eager = fit(lambda: ManualToggleGAN(style, clip=1e-3), tmp_path)
    compiled = fit(lambda: ManualToggleGAN(style, clip=1e-3), tmp_path, backend="aot_eager")

    assert max_parameter_difference(unclipped, eager) > 1e-3  # the clipping changed training
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE


@RunIf(dynamo=True)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_explicit_steps_compiled_train_like_eager(optimizer, tmp_path):
    """Explicit ``opt.step()`` calls; before torch 2.4 they run outside Dynamo and reset the ``capturable`` flag."""
    eager = fit(lambda: ManualToggleGAN("calls", optimizer=optimizer), tmp_path)
    compiled = fit(lambda: ManualToggleGAN("calls", optimizer=optimizer), tmp_path, backend="aot_eager")

    assert compiled.trainer.global_step == eager.trainer.global_step == 8
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE


class StepsWithClosure(BoringModel):
    """Manual optimization that computes the loss inside the closure it passes to ``opt.step``."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()

        def closure() -> torch.Tensor:
            # ``self.layer``, not ``self(batch)``: the Trainer compiles ``forward`` on its own, which would hide
            # whether the closure itself is traced
            loss = self.loss(self.layer(batch))
            optimizer.zero_grad()
            self.manual_backward(loss)
            return loss

        optimizer.step(closure=closure)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


@RunIf(dynamo=True)
def test_model_code_in_a_step_closure_stays_compiled(tmp_path):
    """A step with a closure is traced, so that Dynamo still compiles the model code inside the closure."""
    counter = CompileCounterWithBackend("aot_eager")
    eager = fit(StepsWithClosure, tmp_path)
    compiled = fit(StepsWithClosure, tmp_path, backend=counter)

    assert counter.frame_count > 0
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE


class RecordsWhereTheStepRuns(ManualToggleGAN):
    """Records, in the precision plugin's ``on_before_optimizer_step`` hook, whether Dynamo was tracing the step."""

    def __init__(self) -> None:
        super().__init__("calls")
        self.step_traced: list[bool] = []

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.step_traced.append(torch._dynamo.is_compiling())


@RunIf(dynamo=True)
def test_closure_less_step_is_traced_from_torch_2_4_and_eager_before(tmp_path):
    """Upstream traces ``opt.step()``, so that its update is compiled; before torch 2.4 tracing it splits the step into
    many small graphs, so there it runs outside Dynamo. ``manual_backward`` runs outside Dynamo on every torch."""
    compiled = fit(RecordsWhereTheStepRuns, tmp_path, backend="aot_eager", steps=2)

    assert compiled.step_traced == [_TORCH_GREATER_EQUAL_2_4] * 4
