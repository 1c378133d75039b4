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
"""Nested toggles (release 0014; forward 0004 only warns, as release 0009 does until 0014): a stack.

On Lightning 2.6.6 a toggle inside another recorded the parameters the outer toggle had frozen as frozen, and the
untoggles restored them frozen: the other optimizer's parameters never trained again. Now each untoggle restores what
its own toggle found, so the outermost one restores every parameter to what it was before any toggle, also when a
block raises. An inner toggle of the same optimizer changes nothing for the outer one, and a parameter the user froze
inside a toggle stays frozen. A toggle of another optimizer inside a toggle makes that optimizer's parameters trainable
as they were before the toggles froze them, freezes every other one, and its untoggle puts the outer toggle's state
back.

Each case nests toggles in the first batch only, recording which parameters require grad at each level, then trains
plain steps of both optimizers: the nested module trains bit-identically to one that never nested (with the same
parameters frozen by the user), so every once-frozen parameter trains again. Code that does not nest trains
bit-identically to Lightning 2.6.6's toggles, copied below. Every branch of 0014 has a test: the nestings, the cap of
16 open toggles (here and in test_unbalanced_toggles.py), each way of undoing toggles, and no warning left from 0009.
"""

import functools
from collections.abc import Callable
from typing import Any
from unittest.mock import Mock

import pytest
import torch
from torch import nn

from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.demos.boring_classes import BoringModel
from tests_pytorch.helpers.compile_toggling import fit

FIRST = frozenset({"first.weight", "first.bias"})  # the first optimizer's trainable parameters (`frozen` is the user's)
LAYER = frozenset({"layer.weight", "layer.bias"})  # the second optimizer's
BOTH = FIRST | LAYER


def _trainable(module: nn.Module) -> frozenset:
    return frozenset(name for name, p in module.named_parameters() if p.requires_grad)


class Nested(BoringModel):
    """Two optimizers (``first`` with the user-frozen ``frozen``, and ``layer``); ``nest`` runs in the first batch.

    ``nest(module, opt_first, opt_second)`` calls ``module.record(label)`` to remember which parameters require grad.

    """

    def __init__(self, nest: Callable[["Nested", Any, Any], None]) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.nest = nest
        self.first = nn.Linear(32, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)
        self.levels: dict[str, frozenset] = {}
        self.after_nesting: frozenset = frozenset()

    def record(self, label: str) -> None:
        self.levels[label] = _trainable(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.first(self.frozen(x)))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_first, opt_second = self.optimizers()
        if batch_idx == 0:
            self.nest(self, opt_first, opt_second)
            self.after_nesting = _trainable(self)
        for optimizer in (opt_first, opt_second):
            with self.toggled_optimizer(optimizer):
                optimizer.zero_grad()
                self.manual_backward(self.step(batch))
                optimizer.step()

    def configure_optimizers(self) -> Any:
        first = list(self.first.parameters()) + list(self.frozen.parameters())
        return [torch.optim.SGD(first, lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]


# --- the two cases ------------------------------------------------------------------------------------------


def _same_optimizer_twice(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        m.record("outer")
        with m.toggled_optimizer(o1):
            m.record("inner")
        m.record("outer after inner")  # v5 made `layer` trainable here, inside o1's toggle


def _user_freezes_inside_then_same_optimizer(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        m.first.bias.requires_grad_(False)
        with m.toggled_optimizer(o1):  # v5 raised a RuntimeError here; 2.6.6 runs it
            m.record("inner")
        m.record("outer after inner")


# --- another optimizer inside a toggle ------------------------------------------------------------------------------


def _other_optimizer_inside(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        m.record("outer")
        with m.toggled_optimizer(o2):
            m.record("inner")
        m.record("outer after inner")


def _other_optimizer_inside_with_toggle_blocks(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggle_optimizer(o2):
        m.record("outer")
        with m.toggle_optimizer(o1):
            m.record("inner")
        m.record("outer after inner")


def _other_optimizer_inside_with_calls(m: Nested, o1: Any, o2: Any) -> None:
    m.toggle_optimizer(o1)
    m.toggle_optimizer(o2)
    m.record("inner")
    m.untoggle_optimizer(o2)
    m.record("outer after inner")
    m.untoggle_optimizer(o1)


def _user_freezes_then_other_optimizer_inside(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        m.first.bias.requires_grad_(False)
        with m.toggled_optimizer(o2):
            m.record("inner")
        m.record("outer after inner")  # the user's freeze is kept


# --- blocks that raise ----------------------------------------------------------------------------------------------


def _inner_block_raises(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        with pytest.raises(ValueError, match="inner"), m.toggled_optimizer(o2):  # noqa: PT012 - raises in the block
            m.record("inner")
            raise ValueError("inner")
        m.record("outer after inner")


def _innermost_of_three_raises_through_all(m: Nested, o1: Any, o2: Any) -> None:
    with (  # noqa: PT012 - raises in the block
        pytest.raises(ValueError, match="innermost"),
        m.toggled_optimizer(o1),
        m.toggled_optimizer(o2),
        m.toggled_optimizer(o1),
    ):
        m.record("innermost")
        raise ValueError("innermost")


def _same_optimizer_inner_block_raises(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggle_optimizer(o1):
        with pytest.raises(ValueError, match="inner"), m.toggle_optimizer(o1):  # noqa: PT012 - raises in the block
            m.record("inner")
            raise ValueError("inner")
        m.record("outer after inner")


# --- three levels ---------------------------------------------------------------------------------------------------


def _three_levels(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        m.record("1")
        m.first.bias.requires_grad_(False)
        with m.toggled_optimizer(o2):
            m.record("2")
            with m.toggled_optimizer(o1):
                m.record("3")
            m.record("2 after 3")
        m.record("1 after 2")


def _three_levels_with_calls(m: Nested, o1: Any, o2: Any) -> None:
    for index, optimizer in enumerate((o2, o1, o2), 1):
        m.toggle_optimizer(optimizer)
        m.record(str(index))
    for index, optimizer in zip((2, 1), (o2, o1), strict=True):
        m.untoggle_optimizer(optimizer)
        m.record(f"{index} after {index + 1}")
    m.untoggle_optimizer(o2)


def _same_optimizer_twice_with_calls(m: Nested, o1: Any, o2: Any) -> None:
    m.toggle_optimizer(o1)
    m.toggle_optimizer(o1)
    m.untoggle_optimizer(o1)
    m.record("outer after inner")
    m.untoggle_optimizer(o1)


# --- with `toggle_model` --------------------------------------------------------------------------------------------


def _toggled_optimizer_in_toggle_model(m: Nested, o1: Any, o2: Any) -> None:
    with o1.toggle_model():
        with m.toggled_optimizer(o1):
            m.record("inner")
        m.record("outer after inner")


def _other_optimizer_in_toggle_model(m: Nested, o1: Any, o2: Any) -> None:
    with o2.toggle_model():
        with m.toggled_optimizer(o1):
            m.record("inner")
        m.record("outer after inner")


def _toggle_model_in_toggled_optimizer(m: Nested, o1: Any, o2: Any) -> None:
    with m.toggled_optimizer(o1):
        with o2.toggle_model():
            m.record("inner")
        m.record("outer after inner")


def _toggle_calls_in_toggle_model(m: Nested, o1: Any, o2: Any) -> None:
    with o1.toggle_model():
        m.toggle_optimizer(o2)
        m.record("inner")
        m.untoggle_optimizer(o2)
        m.record("outer after inner")


def _toggle_model_raises_in_toggle_block(m: Nested, o1: Any, o2: Any) -> None:
    with pytest.raises(ValueError, match="inner"), m.toggle_optimizer(o2), o1.toggle_model():  # noqa: PT012
        m.record("inner")
        raise ValueError("inner")


NESTINGS = [
    pytest.param(
        _same_optimizer_twice, {"outer": FIRST, "inner": FIRST, "outer after inner": FIRST}, BOTH, id="same_twice"
    ),
    pytest.param(
        _user_freezes_inside_then_same_optimizer,
        {"inner": FIRST - {"first.bias"}, "outer after inner": FIRST - {"first.bias"}},
        BOTH - {"first.bias"},
        id="user_freezes_inside_then_same",
    ),
    pytest.param(
        _other_optimizer_inside, {"outer": FIRST, "inner": LAYER, "outer after inner": FIRST}, BOTH, id="other_inside"
    ),
    pytest.param(
        _other_optimizer_inside_with_toggle_blocks,
        {"outer": LAYER, "inner": FIRST, "outer after inner": LAYER},
        BOTH,
        id="other_inside_toggle_optimizer_blocks",
    ),
    pytest.param(
        _other_optimizer_inside_with_calls,
        {"inner": LAYER, "outer after inner": FIRST},
        BOTH,
        id="other_inside_calls",
    ),
    pytest.param(
        _user_freezes_then_other_optimizer_inside,
        {"inner": LAYER, "outer after inner": FIRST - {"first.bias"}},
        BOTH - {"first.bias"},
        id="user_freezes_then_other_inside",
    ),
    pytest.param(_inner_block_raises, {"inner": LAYER, "outer after inner": FIRST}, BOTH, id="inner_block_raises"),
    pytest.param(_innermost_of_three_raises_through_all, {"innermost": FIRST}, BOTH, id="innermost_raises_through_all"),
    pytest.param(
        _same_optimizer_inner_block_raises,
        {"inner": FIRST, "outer after inner": FIRST},
        BOTH,
        id="same_inner_block_raises",
    ),
    pytest.param(
        _three_levels,
        {
            "1": FIRST,
            "2": LAYER,
            "3": FIRST - {"first.bias"},
            "2 after 3": LAYER,
            "1 after 2": FIRST - {"first.bias"},
        },
        BOTH - {"first.bias"},
        id="three_levels",
    ),
    pytest.param(
        _three_levels_with_calls,
        {"1": LAYER, "2": FIRST, "3": LAYER, "2 after 3": FIRST, "1 after 2": LAYER},
        BOTH,
        id="three_levels_calls",
    ),
    pytest.param(_same_optimizer_twice_with_calls, {"outer after inner": FIRST}, BOTH, id="same_twice_calls"),
    pytest.param(
        _toggled_optimizer_in_toggle_model,
        {"inner": FIRST, "outer after inner": FIRST},
        BOTH,
        id="toggled_optimizer_in_toggle_model",
    ),
    pytest.param(
        _other_optimizer_in_toggle_model,
        {"inner": FIRST, "outer after inner": LAYER},
        BOTH,
        id="other_in_toggle_model",
    ),
    pytest.param(
        _toggle_model_in_toggled_optimizer,
        {"inner": LAYER, "outer after inner": FIRST},
        BOTH,
        id="toggle_model_in_toggled_optimizer",
    ),
    pytest.param(
        _toggle_calls_in_toggle_model,
        {"inner": LAYER, "outer after inner": FIRST},
        BOTH,
        id="toggle_calls_in_toggle_model",
    ),
    pytest.param(_toggle_model_raises_in_toggle_block, {"inner": FIRST}, BOTH, id="toggle_model_raises_in_block"),
]


@pytest.mark.parametrize(("nest", "levels", "after"), NESTINGS)
def test_nested_toggles_nest_like_a_stack(nest, levels, after, tmp_path):
    """``requires_grad`` at each level, every parameter as before the outermost toggle after it, and training as if
    nothing had nested."""
    user_frozen = BOTH - after

    def freeze_only(m: Nested, o1: Any, o2: Any) -> None:  # what the nesting leaves: the user's own freezes
        for name in user_frozen:
            m.get_parameter(name).requires_grad_(False)

    torch.manual_seed(7)
    initial = {name: p.detach().clone() for name, p in Nested(nest).named_parameters()}

    nested = fit(lambda: Nested(nest), tmp_path, steps=3)
    plain = fit(lambda: Nested(freeze_only), tmp_path, steps=3)

    assert nested.levels == levels
    assert nested.after_nesting == after
    assert _trainable(nested) == after
    assert nested._param_requires_grad_state == {}
    assert nested.trainer.global_step == 6
    for name, param in nested.named_parameters():
        assert torch.equal(param, plain.get_parameter(name)), name  # bit-identical to training without nesting
        assert (not torch.equal(initial[name], param)) is (name in after), name  # the once-frozen ones trained


# --- without nesting: Lightning 2.6.6, bit for bit ------------------------------------------------------------------


def _toggle_2_6_6(module: BoringModel, optimizer: Any, record: str = "state_2_6_6") -> None:
    """``LightningModule.toggle_optimizer`` of Lightning 2.6.6 (which records in ``_param_requires_grad_state``)."""
    param_requires_grad_state = {}
    for opt in module.trainer.optimizers:
        for group in opt.param_groups:
            for param in group["params"]:
                if param in param_requires_grad_state:
                    continue
                param_requires_grad_state[param] = param.requires_grad
                param.requires_grad = False
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.requires_grad = param_requires_grad_state[param]
    setattr(module, record, param_requires_grad_state)


def _untoggle_2_6_6(module: BoringModel, optimizer: Any, record: str = "state_2_6_6") -> None:
    """``LightningModule.untoggle_optimizer`` of Lightning 2.6.6."""
    state = getattr(module, record)
    for opt in module.trainer.optimizers:
        if not (opt is optimizer or (isinstance(optimizer, LightningOptimizer) and opt is optimizer.optimizer)):
            for group in opt.param_groups:
                for param in group["params"]:
                    if param in state:
                        param.requires_grad = state[param]
    setattr(module, record, {})


class NotNested(BoringModel):
    """Three optimizers, one sharing ``shared`` with the others, one holding the user-frozen ``frozen``; in the
    second batch the user freezes ``first.bias`` inside its optimizer's toggle (2.6.6 keeps it frozen)."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.style = style
        self.first = nn.Linear(32, 32)
        self.shared = nn.Linear(32, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)
        self.seen: list[frozenset] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.shared(self.first(self.frozen(x))))

    def _phase(self, optimizer: Any, index: int, batch: Any, batch_idx: int) -> None:
        optimizer.zero_grad()
        if index == 0 and batch_idx == 1:
            self.first.bias.requires_grad_(False)
        self.seen.append(_trainable(self))
        self.manual_backward((index + 1) * self.step(batch))
        optimizer.step()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        for index, optimizer in enumerate(self.optimizers()):
            if self.style == "2.6.6":
                _toggle_2_6_6(self, optimizer)
                self._phase(optimizer, index, batch, batch_idx)
                _untoggle_2_6_6(self, optimizer)
            elif self.style == "calls":
                self.toggle_optimizer(optimizer)
                self._phase(optimizer, index, batch, batch_idx)
                self.untoggle_optimizer(optimizer)
            elif self.style == "toggled_optimizer":
                with self.toggled_optimizer(optimizer):
                    self._phase(optimizer, index, batch, batch_idx)
            elif self.style == "toggle_optimizer_block":
                with self.toggle_optimizer(optimizer):
                    self._phase(optimizer, index, batch, batch_idx)
            else:
                with optimizer.toggle_model():
                    self._phase(optimizer, index, batch, batch_idx)
            self.seen.append(_trainable(self))

    def configure_optimizers(self) -> Any:
        first = [*self.first.parameters(), *self.frozen.parameters(), *self.shared.parameters()]
        second = [*self.layer.parameters(), *self.shared.parameters()]
        return [torch.optim.SGD(p, lr=0.1) for p in (first, second, self.shared.parameters())]


@pytest.mark.parametrize("style", ["calls", "toggled_optimizer", "toggle_optimizer_block", "toggle_model"])
def test_toggles_without_nesting_train_bit_identically_to_2_6_6(style, tmp_path):
    reference = fit(lambda: NotNested("2.6.6"), tmp_path, steps=3)
    module = fit(lambda: NotNested(style), tmp_path, steps=3)

    assert module.trainer.global_step == reference.trainer.global_step == 9
    assert module.seen == reference.seen
    assert "first.bias" not in module.seen[-1]
    for name, param in module.named_parameters():
        assert torch.equal(param, reference.get_parameter(name)), name


def _undone_by_hand(module: Any, toggle: Callable, untoggle: Callable, opts: list) -> None:
    toggle(module, opts[0])
    module.requires_grad_(True)  # the user's own reset, instead of an untoggle
    toggle(module, opts[1])
    module.record()
    untoggle(module, opts[1])


def _subclass_own_toggle(module: Any, toggle: Callable, untoggle: Callable, opts: list) -> None:
    own_toggle = functools.partial(_toggle_2_6_6, record="_param_requires_grad_state")  # 2.6.6's code, overriding
    toggle(module, opts[0])
    untoggle(module, opts[0])
    own_toggle(module, opts[1])
    module.record()
    untoggle(module, opts[1])
    toggle(module, opts[0])
    own_toggle(module, opts[0])
    module.record()
    untoggle(module, opts[0])


def _saved_by_2_6_6(module: Any, toggle: Callable, untoggle: Callable, opts: list) -> None:
    vars(module).pop("_toggle_stack", None)  # a module pickled by 2.6.6 loads without a record of open toggles
    for optimizer in opts:
        toggle(module, optimizer)
        module.record()
        untoggle(module, optimizer)


@pytest.mark.parametrize("undo", [_undone_by_hand, _subclass_own_toggle, _saved_by_2_6_6])
def test_toggles_undone_another_way_run_as_on_2_6_6(undo):
    """Where toggles were undone without an untoggle, the record of open toggles is ignored: what 2.6.6 did."""

    def trace(toggle: Callable, untoggle: Callable) -> list:
        torch.manual_seed(0)
        module = BoringModel()
        module.other = nn.Linear(32, 2)
        opts = [torch.optim.SGD(module.layer.parameters(), lr=0.1), torch.optim.SGD(module.other.parameters(), lr=0.1)]
        module.trainer = Mock(optimizers=opts)
        seen: list = []
        module.record = lambda: seen.append(_trainable(module))
        undo(module, toggle, untoggle, opts)
        seen.append(_trainable(module))
        return seen

    series = trace(lambda m, o: m.toggle_optimizer(o), lambda m, o: m.untoggle_optimizer(o))
    reference = trace(
        functools.partial(_toggle_2_6_6, record="_param_requires_grad_state"),
        functools.partial(_untoggle_2_6_6, record="_param_requires_grad_state"),
    )
    assert series == reference


def _two_optimizers() -> tuple[BoringModel, list]:
    module = BoringModel()
    module.other = nn.Linear(32, 2)
    opts = [torch.optim.SGD(module.layer.parameters(), lr=0.1), torch.optim.SGD(module.other.parameters(), lr=0.1)]
    module.trainer = Mock(optimizers=opts)
    return module, opts


@pytest.mark.parametrize(("depth", "other_trainable_after"), [(16, True), (17, False)])
def test_at_most_16_open_toggles_are_recorded(depth, other_trainable_after):
    """The cap: 16 nested toggles restore every parameter; beyond 16 the outermost record is dropped, and its untoggle
    runs as on 2.6.6, which left the other optimizer's parameters frozen after any nesting."""
    module, (opt, _) = _two_optimizers()
    for _ in range(depth):
        module.toggle_optimizer(opt)
    assert len(module._toggle_stack) == min(depth, 16)
    assert not module.other.weight.requires_grad
    for _ in range(depth):
        module.untoggle_optimizer(opt)
    assert module.other.weight.requires_grad is other_trainable_after
    assert module.layer.weight.requires_grad
    assert module._toggle_stack == ()


def test_nested_toggles_do_not_warn(recwarn):
    """Release 0009's warning about nested toggles is gone with 0014: nesting trains right, so it warns of nothing."""
    module, (opt, other_opt) = _two_optimizers()
    with module.toggled_optimizer(opt), module.toggled_optimizer(other_opt):
        assert module.other.weight.requires_grad
    assert not [w for w in recwarn if "toggle" in str(w.message)]
    assert module.other.weight.requires_grad
