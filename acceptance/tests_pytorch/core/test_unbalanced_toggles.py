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
"""Toggles that are never untoggled (release 0014): what 2.6.6 ran keeps running, and nothing grows.

#21513's reproducer toggles its only optimizer in every ``training_step`` and never untoggles, in automatic
optimization. Nested toggles now nest like a stack, so each toggle is recorded; the stack keeps at most 16, so such
code trains exactly as without the toggle (as on 2.6.6) and keeps a bounded record however long it trains. Two
optimizers toggled in turn without untoggles both train: on 2.6.6 the second toggle kept the second optimizer's
parameters frozen (the first toggle had frozen them), so it never trained.
"""

from typing import Any

import pytest
import torch
from torch import nn

from lightning.pytorch.demos.boring_classes import BoringModel
from tests_pytorch.helpers.compile_toggling import fit, max_parameter_difference
from tests_pytorch.helpers.runif import RunIf


class ToggleEveryStep(BoringModel):
    """#21513's reproducer on a ``BoringModel``: automatic optimization, one Adam, a toggle that is never undone."""

    def __init__(self, toggle: bool) -> None:
        super().__init__()
        self.toggle = toggle

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.toggle:
            self.toggle_optimizer(self.optimizers())
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.02)


def test_a_toggle_never_untoggled_trains_as_without_it(tmp_path):
    toggled = fit(lambda: ToggleEveryStep(toggle=True), tmp_path, steps=40)
    plain = fit(lambda: ToggleEveryStep(toggle=False), tmp_path, steps=40)

    assert toggled.trainer.global_step == 40
    assert max_parameter_difference(toggled, plain) == 0
    assert len(toggled._toggle_stack) <= 16  # a bounded record: what a long run relies on for its memory


@RunIf(dynamo=True)
def test_a_toggle_never_untoggled_in_a_compiled_training_step_trains_as_eager(tmp_path):
    compiled = fit(lambda: ToggleEveryStep(toggle=True), tmp_path, backend="aot_eager", steps=20)
    eager = fit(lambda: ToggleEveryStep(toggle=True), tmp_path, steps=20)

    assert max_parameter_difference(compiled, eager) < 1e-5


class TwoOptimizersInTurn(BoringModel):
    """Manual optimization; each optimizer toggled before its step and never untoggled."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.other = nn.Linear(2, 2)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        for optimizer in self.optimizers():
            self.toggle_optimizer(optimizer)
            optimizer.zero_grad()
            self.manual_backward(self.other(self.layer(batch)).sum())
            optimizer.step()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.other.parameters(), lr=0.1)


@pytest.mark.parametrize("steps", [3, 30])
def test_two_optimizers_toggled_in_turn_without_untoggles_both_train(steps, tmp_path):
    torch.manual_seed(7)
    initial = {name: p.detach().clone() for name, p in TwoOptimizersInTurn().named_parameters()}

    module = fit(TwoOptimizersInTurn, tmp_path, steps=steps)

    assert module.trainer.global_step == 2 * steps
    for name, param in module.named_parameters():
        assert not torch.equal(initial[name], param), name
    assert len(module._toggle_stack) <= 16
