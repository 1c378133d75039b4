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
"""Nested toggles (release 0010, forward 0008): no parameter stays frozen that was trainable before the outermost one.

On Lightning 2.6.6 a toggle inside another recorded the parameters the outer toggle had frozen as frozen, and the
untoggles restored them frozen: the other optimizer's parameters never trained again. Toggles of one optimizer inside
each other now restore every parameter; a toggle of another optimizer, whose parameters the outer toggle froze, is
refused with a ``RuntimeError`` (which state to restore would be ambiguous). Each case nests toggles in the first
batch only, then trains plain steps of both optimizers, and checks every parameter's ``requires_grad`` after the
nesting and that the once-frozen parameters train afterwards. A parameter the user froze stays frozen.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from lightning.pytorch.demos.boring_classes import BoringModel
from tests_pytorch.helpers.compile_toggling import fit


class Nested(BoringModel):
    """Two optimizers (``first`` with the user-frozen ``frozen``, and ``layer``); ``nest`` runs in the first batch."""

    def __init__(self, nest: Callable[["Nested", Any, Any], None]) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.nest = nest
        self.first = nn.Linear(32, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)
        self.after_nesting: dict[str, bool] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.first(self.frozen(x)))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_first, opt_second = self.optimizers()
        if batch_idx == 0:
            self.nest(self, opt_first, opt_second)
            self.after_nesting = {name: p.requires_grad for name, p in self.named_parameters()}
        for optimizer in (opt_first, opt_second):
            with self.toggled_optimizer(optimizer):
                optimizer.zero_grad()
                self.manual_backward(self.step(batch))
                optimizer.step()

    def configure_optimizers(self) -> Any:
        first = list(self.first.parameters()) + list(self.frozen.parameters())
        return [torch.optim.SGD(first, lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]


def _toggled_optimizer_in_toggle_model(module: Nested, opt_first: Any, opt_second: Any) -> None:
    with opt_first.toggle_model(), module.toggled_optimizer(opt_first):
        pass


def _toggle_call_in_toggle_model(module: Nested, opt_first: Any, opt_second: Any) -> None:
    with opt_first.toggle_model():
        module.toggle_optimizer(opt_first)  # never untoggled itself


def _toggled_twice_then_untoggled_twice(module: Nested, opt_first: Any, opt_second: Any) -> None:
    module.toggle_optimizer(opt_first)
    module.toggle_optimizer(opt_first)
    module.untoggle_optimizer(opt_first)
    module.untoggle_optimizer(opt_first)


def _other_optimizer_toggled_inside(module: Nested, opt_first: Any, opt_second: Any) -> None:
    """Ambiguous (2.6.6 froze the inner optimizer's own parameters): refused, and the outer block restores."""
    with pytest.raises(RuntimeError, match="another optimizer's toggle"), module.toggled_optimizer(opt_first):
        module.toggled_optimizer(opt_second).__enter__()


def _block_inside_toggle_model(module: Nested, opt_first: Any, opt_second: Any) -> None:
    with pytest.raises(RuntimeError, match="another optimizer's toggle"), opt_second.toggle_model():
        module.toggle_optimizer(opt_first)


def _same_optimizer_block_inside_toggle_model(module: Nested, opt_first: Any, opt_second: Any) -> None:
    with opt_first.toggle_model(), module.toggle_optimizer(opt_first):
        pass


NESTINGS = [
    _toggled_optimizer_in_toggle_model,
    _toggle_call_in_toggle_model,
    _toggled_twice_then_untoggled_twice,
    _other_optimizer_toggled_inside,
    _block_inside_toggle_model,
    _same_optimizer_block_inside_toggle_model,
]


@pytest.mark.parametrize("nest", NESTINGS, ids=lambda nest: nest.__name__.strip("_"))
def test_nested_toggles_restore_every_parameter(nest, tmp_path):
    torch.manual_seed(7)
    initial = {name: p.detach().clone() for name, p in Nested(nest).named_parameters()}

    module = fit(lambda: Nested(nest), tmp_path, steps=3)

    assert module.after_nesting == {
        "layer.weight": True, "layer.bias": True, "first.weight": True, "first.bias": True,
        "frozen.weight": False, "frozen.bias": False,
    }  # fmt: skip
    assert module._param_requires_grad_state == {}
    assert module.trainer.global_step == 6
    for name, param in module.named_parameters():
        changed = not torch.equal(initial[name], param)
        assert changed is not name.startswith("frozen"), name
