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
"""``toggle_optimizer`` as a context manager (release 0012, forward 0010): the acceptance cases of the with-block.

A bare ``with self.toggle_optimizer(opt):`` is ``with self.toggled_optimizer(opt):``; ``step=True`` opts into
``zero_grad()`` when called and the step on a normal exit. Everything that worked with Lightning 2.6.6 keeps working
unchanged, and a body written for ``toggled_optimizer`` and renamed trains exactly as before. Series v5 keeps one
refusal (``step=True`` for an optimizer that is not the Trainer's ``LightningOptimizer``); every other misuse does what
its code says, and the cases below assert what that is.
"""

import copy
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

from lightning.pytorch import LightningModule
from lightning.pytorch.demos.boring_classes import BoringModel
from tests_pytorch.helpers.compile_toggling import (
    AOT_EAGER_TOLERANCE,
    ManualToggleGAN,
    RequiresGradRecorder,
    fit,
    max_parameter_difference,
)
from tests_pytorch.helpers.runif import RunIf


class TwoOptimizers(BoringModel):
    """Runs ``body(self, batch, batch_idx)`` as its training step.

    Manual optimization has two optimizers, one for ``first`` (and the frozen layer) and one for ``BoringModel``'s
    ``layer``; ``automatic=True`` has one optimizer for all of them.
    """

    def __init__(self, body: Callable[..., Any], automatic: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = automatic
        self.body = body
        self.first = nn.Linear(32, 32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.first(self.frozen(x)))

    def phase_loss(self, batch: Any, index: int) -> torch.Tensor:
        """The loss of optimizer ``index``'s phase, one graph per phase when compiled.

        Each phase computes its own loss, as a GAN's do. The same code run under both toggle states in a compiled
        frame of its own would meet pytorch/pytorch#139476 (see ``test_compiled_gan_styles.py``).

        """
        hidden = self.first(self.frozen(batch))
        if index == 0:
            return self.loss(self.layer(hidden))
        return 2 * self.loss(self.layer(hidden))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.body(self, batch, batch_idx)

    def configure_optimizers(self) -> Any:
        first = list(self.first.parameters()) + list(self.frozen.parameters())
        if self.automatic_optimization:
            return torch.optim.SGD(first + list(self.layer.parameters()), lr=0.1)
        return [torch.optim.SGD(first, lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]


def _requires_grad(module: LightningModule) -> dict[str, bool]:
    return {name: p.requires_grad for name, p in module.named_parameters()}


def _parameters(module: LightningModule) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _equal(first: LightningModule, second: LightningModule) -> bool:
    return max_parameter_difference(first, second) == 0


# --- the opted-in form trains as the explicit calls -------------------------------------------------------------


@pytest.mark.parametrize("three", [False, True], ids=["two_optimizers", "three_optimizers_shared"])
def test_stepping_blocks_train_like_the_explicit_calls(three, tmp_path):
    """The feature request's GAN: ``with self.toggle_optimizer(opt, step=True):`` is the five explicit calls."""
    recorder = RequiresGradRecorder()
    explicit = fit(lambda: ManualToggleGAN("calls", three), tmp_path)
    blocks = fit(lambda: ManualToggleGAN("block", three), tmp_path, callbacks=[recorder])

    assert recorder.changed == []
    assert _equal(explicit, blocks)
    assert blocks.trainer.global_step == explicit.trainer.global_step == 4 * (3 if three else 2)


@RunIf(dynamo=True)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("three", [False, True], ids=["two_optimizers", "three_optimizers_shared"])
def test_stepping_blocks_compiled_train_like_eager(three, optimizer, tmp_path):
    """Also torch 2.1 with Adam: the step on exit runs eagerly after Dynamo set ``capturable=True``."""
    recorder = RequiresGradRecorder()
    counter = CompileCounterWithBackend("aot_eager")
    eager = fit(lambda: ManualToggleGAN("calls", three, optimizer=optimizer), tmp_path)
    compiled = fit(
        lambda: ManualToggleGAN("block", three, optimizer=optimizer), tmp_path, backend=counter, callbacks=[recorder]
    )

    assert counter.frame_count > 0
    assert recorder.changed == []
    assert compiled.trainer.global_step == eager.trainer.global_step
    assert max_parameter_difference(eager, compiled) <= AOT_EAGER_TOLERANCE


def _accumulate_explicitly(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        module.toggle_optimizer(optimizer)
        if batch_idx % 2 == 0:
            optimizer.zero_grad()
        module.manual_backward(module.phase_loss(batch, index) * (index + 1) / 2)
        if batch_idx % 2 == 1:
            optimizer.step()
        module.untoggle_optimizer(optimizer)


def _accumulate_in_blocks(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with module.toggle_optimizer(optimizer, zero_grad=batch_idx % 2 == 0, step=batch_idx % 2 == 1):
            module.manual_backward(module.phase_loss(batch, index) * (index + 1) / 2)


@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_accumulating_blocks_train_like_the_explicit_calls(backend, tmp_path):
    """``zero_grad=first, step=last`` accumulates as the explicit calls do, eager and compiled."""
    explicit = fit(lambda: TwoOptimizers(_accumulate_explicitly), tmp_path, steps=4)
    blocks = fit(lambda: TwoOptimizers(_accumulate_in_blocks), tmp_path, steps=4, backend=backend)

    assert blocks.trainer.global_step == explicit.trainer.global_step == 4
    assert max_parameter_difference(explicit, blocks) <= (0 if backend is None else AOT_EAGER_TOLERANCE)


# --- a body written for `toggled_optimizer`, renamed, trains exactly as before -------------------------------------


def _step_inside(toggle, module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with toggle(module, optimizer):
            optimizer.zero_grad()
            module.manual_backward(module.phase_loss(batch, index))
            optimizer.step()


def _accumulate_step_inside(toggle, module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with toggle(module, optimizer):
            if batch_idx % 2 == 0:
                optimizer.zero_grad()
            module.manual_backward(module.phase_loss(batch, index) / 2)
            if batch_idx % 2 == 1:
                optimizer.step()


def _accumulate_step_after(toggle, module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with toggle(module, optimizer):
            if batch_idx % 2 == 0:
                optimizer.zero_grad()
            module.manual_backward(module.phase_loss(batch, index) / 2)
        if batch_idx % 2 == 1:
            optimizer.step()


BODIES = [_step_inside, _accumulate_step_inside, _accumulate_step_after]


def _toggled(module, optimizer):
    return module.toggled_optimizer(optimizer)


def _renamed(module, optimizer):
    return module.toggle_optimizer(optimizer)


@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
@pytest.mark.parametrize("body", BODIES, ids=lambda body: body.__name__.strip("_"))
def test_toggled_optimizer_body_renamed_trains_exactly_as_before(body, backend, tmp_path):
    original = fit(lambda: TwoOptimizers(lambda *args: body(_toggled, *args)), tmp_path, backend=backend)
    renamed = fit(lambda: TwoOptimizers(lambda *args: body(_renamed, *args)), tmp_path, backend=backend)

    assert renamed.trainer.global_step == original.trainer.global_step
    assert _equal(original, renamed)


def _stepping(module, optimizer):
    return module.toggle_optimizer(optimizer, step=True)


def _step_twice(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        module.toggle_optimizer(optimizer)
        optimizer.zero_grad()
        module.manual_backward(module.phase_loss(batch, index))
        optimizer.step()
        optimizer.step()
        module.untoggle_optimizer(optimizer)


@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_a_step_inside_a_stepping_block_steps_twice(backend, tmp_path):
    """``step=True`` added to a ``toggled_optimizer`` body that steps: the body's step and the block's, as written."""
    doubled = fit(lambda: TwoOptimizers(lambda *args: _step_inside(_stepping, *args)), tmp_path, backend=backend)
    explicit = fit(lambda: TwoOptimizers(_step_twice), tmp_path, backend=backend)

    assert doubled.trainer.global_step == explicit.trainer.global_step == 16
    assert max_parameter_difference(explicit, doubled) <= AOT_EAGER_TOLERANCE
    assert all(p.requires_grad for name, p in doubled.named_parameters() if not name.startswith("frozen"))


def test_steps_of_the_bare_optimizer_inside_a_stepping_block_are_not_seen(tmp_path):
    """Documented limit: only the Trainer's ``LightningOptimizer`` knows it is inside a stepping block."""

    def body(module, batch, batch_idx):
        optimizer = module.optimizers()[0]
        with module.toggle_optimizer(optimizer, step=True):
            module.manual_backward(module.step(batch))
            optimizer.optimizer.step()

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert module.trainer.global_step == 1  # the Trainer counts the block's step only


def _step_inside_without_zeroing(toggle, module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with toggle(module, optimizer):
            module.manual_backward(module.phase_loss(batch, index))
            optimizer.step()


def test_zero_grad_alone_zeroes_and_the_body_steps(tmp_path):
    """``zero_grad=True`` without ``step``: the block zeroes, the body steps, as a stepping block without the body's
    step would."""
    intended = fit(lambda: TwoOptimizers(_step_in_blocks), tmp_path)
    zeroing = fit(
        lambda: TwoOptimizers(
            lambda *args: _step_inside_without_zeroing(lambda m, o: m.toggle_optimizer(o, zero_grad=True), *args)
        ),
        tmp_path,
    )
    assert _equal(intended, zeroing)


def _step_in_blocks(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with module.toggle_optimizer(optimizer, step=True):
            module.manual_backward(module.phase_loss(batch, index))


def test_a_bare_block_written_to_zero_and_step_never_steps(tmp_path):
    """The feature request's form, ``with self.toggle_optimizer(opt):`` expecting zero_grad and step, is
    ``toggled_optimizer``: nothing steps, as its code says (v4 warned after an epoch; v5 documents it)."""

    def body(module, batch, batch_idx):
        for index, optimizer in enumerate(module.optimizers()):
            with module.toggle_optimizer(optimizer):
                module.manual_backward(module.phase_loss(batch, index))

    torch.manual_seed(7)
    initial = _parameters(TwoOptimizers(body))
    torch.manual_seed(7)
    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=2, epochs=2)

    assert module.trainer.global_step == 0
    assert all(torch.equal(initial[name], p) for name, p in _parameters(module).items())


def test_bare_blocks_that_step_do_not_warn(tmp_path):
    """Also accumulation whose only step of the first epoch comes after the block of its last batch."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*(step|toggle).*", category=UserWarning)
        for body in BODIES:
            fit(lambda body=body: TwoOptimizers(lambda *args: body(_renamed, *args)), tmp_path, steps=2, epochs=2)


def test_step_true_without_a_with_statement_zeroes_and_toggles_only(tmp_path):
    """A plain call with ``step=True`` zeroes and toggles at once; only a ``with`` block steps on exit."""
    seen = {}

    def body(module, batch, batch_idx):
        optimizer = module.optimizers()[0]
        module.manual_backward(module.step(batch))
        module.toggle_optimizer(optimizer, step=True)
        seen["zeroed"] = all(p.grad is None for p in module.first.parameters())
        seen["toggled"] = not module.layer.weight.requires_grad
        module.untoggle_optimizer(optimizer)

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"zeroed": True, "toggled": True}
    assert module.trainer.global_step == 0
    assert all(p.requires_grad for name, p in module.named_parameters() if not name.startswith("frozen"))


# --- what worked on 2.6.6 keeps working ----------------------------------------------------------------------------


def test_plain_calls_behave_as_before(tmp_path):
    seen = {}

    def body(module, batch, batch_idx):
        _, opt_second = module.optimizers()
        module.toggle_optimizer(opt_second)  # the result may be ignored, as before
        seen["during"] = _requires_grad(module)
        module.untoggle_optimizer(opt_second)
        seen["after"] = _requires_grad(module)
        module.toggle_optimizer(opt_second)  # toggling again without untoggling, as 2.6.6 allowed
        module.toggle_optimizer(opt_second)
        module.untoggle_optimizer(opt_second)
        # 2.6.6 left `first` frozen here for good; with 0010 the second toggle keeps what the first one recorded
        seen["repeated"] = _requires_grad(module)["first.weight"]

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen["during"] == {
        "first.weight": False, "first.bias": False, "layer.weight": True, "layer.bias": True,
        "frozen.weight": False, "frozen.bias": False,
    }  # fmt: skip
    assert seen["after"] == {**seen["during"], "first.weight": True, "first.bias": True}
    assert seen["repeated"] is True
    assert module.trainer.global_step == 0  # nothing steps without `step=True`


def test_optimizer_the_trainer_does_not_hold(tmp_path):
    """A probe optimizer over the module's parameters: plain toggles and bare blocks work as on 2.6.6; only the
    opted-in step, which must go through the Trainer's ``LightningOptimizer``, is refused, before anything toggles."""
    seen = {}

    def body(module, batch, batch_idx):
        probe = torch.optim.SGD(module.layer.parameters(), lr=0.1)
        module.toggle_optimizer(probe)
        seen["toggled"] = _requires_grad(module)["first.weight"]
        module.untoggle_optimizer(probe)
        before = _requires_grad(module)
        with pytest.raises(TypeError, match=r"needs the optimizer `self.optimizers\(\)` returns"):
            module.toggle_optimizer(probe, step=True)
        seen["restored"] = _requires_grad(module) == before
        layer = module.layer.weight.detach().clone()
        with module.toggle_optimizer(probe):
            module.manual_backward(module.step(batch))
            probe.step()
        seen["probe_stepped"] = not torch.equal(layer, module.layer.weight)

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"toggled": False, "restored": True, "probe_stepped": True}
    assert module.trainer.global_step == 0


def test_overrides_with_the_2_6_6_signature_keep_working(tmp_path):
    """Subclasses written for 2.6.6: plain calls, ``toggled_optimizer`` and ``toggle_model`` call them as before."""
    calls = []

    class OldSignature(TwoOptimizers):
        def toggle_optimizer(self, optimizer):
            calls.append("old")
            super().toggle_optimizer(optimizer)

    class ForwardsAndReturnsNone(TwoOptimizers):
        def toggle_optimizer(self, optimizer, **kwargs):
            calls.append("kwargs")
            super().toggle_optimizer(optimizer, **kwargs)

    def body(module, batch, batch_idx):
        opt_first, opt_second = module.optimizers()
        module.toggle_optimizer(opt_first)
        module.untoggle_optimizer(opt_first)
        with module.toggled_optimizer(opt_first):
            opt_first.zero_grad()
            module.manual_backward(module.step(batch))
            opt_first.step()
        with opt_second.toggle_model():
            opt_second.zero_grad()
            module.manual_backward(module.step(batch))
            opt_second.step()

    for module_class in (OldSignature, ForwardsAndReturnsNone):
        module = fit(lambda module_class=module_class: module_class(body), tmp_path, steps=2)
        assert module.trainer.global_step == 4
        assert all(p.requires_grad for name, p in module.named_parameters() if not name.startswith("frozen"))

    assert calls == ["old"] * 6 + ["kwargs"] * 6


def test_an_override_that_returns_super_supports_blocks(tmp_path):
    class Forwarding(ManualToggleGAN):
        def toggle_optimizer(self, optimizer, **kwargs):
            return super().toggle_optimizer(optimizer, **kwargs)

    assert _equal(fit(lambda: ManualToggleGAN("calls"), tmp_path), fit(lambda: Forwarding("block"), tmp_path))


def test_automatic_optimization_toggles_as_before(tmp_path):
    """A bare block in automatic optimization only toggles, like ``toggled_optimizer``; accumulation is kept."""

    def plain(module, batch, batch_idx):
        module.toggle_optimizer(module.optimizers())
        loss = module.step(batch)
        module.untoggle_optimizer(module.optimizers())
        return loss

    def block(module, batch, batch_idx):
        with module.toggle_optimizer(module.optimizers()):
            return module.step(batch)

    expected = fit(lambda: TwoOptimizers(plain, automatic=True), tmp_path, accumulate_grad_batches=2)
    actual = fit(lambda: TwoOptimizers(block, automatic=True), tmp_path, accumulate_grad_batches=2)

    assert _equal(expected, actual)


_COPIES: dict[str, Any] = {}


def _copy_inside_a_block(module: TwoOptimizers, batch: Any, batch_idx: int) -> None:
    with module.toggle_optimizer(module.optimizers()[0], step=True):
        module.manual_backward(module.step(batch))
        _COPIES["attributes"] = set(module.__dict__)
        _COPIES["deepcopy"] = copy.deepcopy(module)
        _COPIES["pickle"] = pickle.loads(pickle.dumps(module))


def test_copies_and_pickles_made_inside_a_block(tmp_path):
    """An EMA or teacher copy made inside a block is what it was on 2.6.6 inside a toggle: the block adds nothing to
    the module, and the block itself still steps."""
    _COPIES.clear()
    module = fit(lambda: TwoOptimizers(_copy_inside_a_block), tmp_path, steps=1)

    assert module.trainer.global_step == 1
    for kind in ("deepcopy", "pickle"):
        assert set(_COPIES[kind].__dict__) == _COPIES["attributes"], kind
        assert _COPIES[kind]._trainer is None, kind


def test_module_saved_whole_trains_with_blocks_after_loading(tmp_path):
    """A module saved whole (as with 2.6.6's ``torch.save(module)``) loads and trains with blocks."""
    torch.manual_seed(7)
    torch.save(ManualToggleGAN("block"), tmp_path / "module.pt")
    loaded = torch.load(tmp_path / "module.pt", weights_only=False)

    module = fit(lambda: loaded, tmp_path)
    assert module.trainer.global_step == 8


def test_lr_scheduler_stepped_after_the_blocks_sees_their_steps(tmp_path):
    class Scheduled(ManualToggleGAN):
        def configure_optimizers(self) -> Any:
            optimizers = super().configure_optimizers()
            return optimizers, [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5) for opt in optimizers]

        def training_step(self, batch: Any, batch_idx: int) -> None:
            super().training_step(batch, batch_idx)
            for scheduler in self.lr_schedulers():
                scheduler.step()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explicit = fit(lambda: Scheduled("calls"), tmp_path)
        blocks = fit(lambda: Scheduled("block"), tmp_path)

    assert not [w for w in caught if "lr_scheduler" in str(w.message)]
    assert _equal(explicit, blocks)
    for optimizer in blocks.optimizers(use_pl_optimizer=False):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.5**4)


@RunIf(min_torch="2.4")  # fp16 autocast on CPU
def test_stepping_block_with_a_gradient_scaler_trains_like_the_explicit_calls(tmp_path):
    """A gradient scaler that skips the first step on overflow: the block's step goes through the precision plugin."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    class Overflowing(ManualToggleGAN):
        def _loss(self, phase: int, batch: Any) -> torch.Tensor:
            loss = super()._loss(phase, batch)
            return loss * float("inf") if self.trainer.global_step == 0 else loss

    def plugins():
        return [MixedPrecision("16-mixed", "cpu")]

    explicit = fit(lambda: Overflowing("calls"), tmp_path, steps=2, plugins=plugins())
    blocks = fit(lambda: Overflowing("block"), tmp_path, steps=2, plugins=plugins())

    assert blocks.trainer.global_step == explicit.trainer.global_step
    assert blocks.trainer.precision_plugin.scaler.get_scale() == explicit.trainer.precision_plugin.scaler.get_scale()
    assert _equal(explicit, blocks)


def test_closure_optimizer_with_a_bare_block(tmp_path):
    class LBFGSModule(TwoOptimizers):
        def configure_optimizers(self) -> Any:
            first = list(self.first.parameters()) + list(self.frozen.parameters())
            return [torch.optim.LBFGS(first, lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]

    def stepping(module, batch, batch_idx):
        with module.toggle_optimizer(module.optimizers()[0], step=True):
            module.manual_backward(module.step(batch))

    module = LBFGSModule(stepping)
    with pytest.raises(TypeError, match="float"):  # LBFGS's own error: the block's step passes it no closure
        fit(lambda: module, tmp_path, steps=1)
    assert all(p.requires_grad for name, p in module.named_parameters() if not name.startswith("frozen"))

    def closure_step(module, batch, batch_idx):
        lbfgs = module.optimizers()[0]
        with module.toggle_optimizer(lbfgs):

            def closure():
                lbfgs.zero_grad()
                loss = module.step(batch)
                module.manual_backward(loss)
                return loss

            lbfgs.step(closure)

    assert fit(lambda: LBFGSModule(closure_step), tmp_path, steps=2).trainer.global_step == 2


# --- misuse of the opted-in form does what its code says ------------------------------------------------------------


@pytest.mark.parametrize(("accumulate_grad_batches", "same_as_plain"), [(1, True), (2, False)])
def test_a_stepping_block_in_automatic_optimization_zeroes_and_steps_as_written(
    accumulate_grad_batches, same_as_plain, tmp_path
):
    """The Trainer zeroes and steps there; the block zeroes when called and steps the not yet computed gradients on
    exit. Without accumulation that changes nothing; with it, the block's ``zero_grad`` discards the accumulated
    gradients, as written (the docs say: use a bare block in automatic optimization)."""

    def plain(module, batch, batch_idx):
        return module.step(batch)

    def block(module, batch, batch_idx):
        with module.toggle_optimizer(module.optimizers(), step=True):
            return module.step(batch)

    kwargs = {"steps": 4, "accumulate_grad_batches": accumulate_grad_batches}
    expected = fit(lambda: TwoOptimizers(plain, automatic=True), tmp_path, **kwargs)
    actual = fit(lambda: TwoOptimizers(block, automatic=True), tmp_path, **kwargs)

    assert actual.trainer.global_step == expected.trainer.global_step
    assert _equal(expected, actual) is same_as_plain
    assert all(p.requires_grad for name, p in actual.named_parameters() if not name.startswith("frozen"))


@pytest.mark.parametrize("outer", ["toggle_model", "toggled_optimizer", "toggle_optimizer"])
def test_stepping_block_inside_another_optimizers_toggle_is_refused(outer, tmp_path):
    """Inside another optimizer's toggle (0010): refused before anything toggles or steps; the outer one restores."""
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        opt_first, opt_second = module.optimizers()
        with pytest.raises(RuntimeError, match="another optimizer's toggle"):  # noqa: PT012 - each form of nesting
            if outer == "toggle_model":
                with opt_first.toggle_model(), module.toggle_optimizer(opt_second, step=True):
                    pass
            elif outer == "toggled_optimizer":
                with module.toggled_optimizer(opt_first), module.toggle_optimizer(opt_second, step=True):
                    pass
            else:  # a plain call, untoggled after the block
                module.toggle_optimizer(opt_first)
                try:
                    with module.toggle_optimizer(opt_second, step=True):
                        pass
                finally:
                    module.untoggle_optimizer(opt_first)
        seen["restored"] = _requires_grad(module) == before
        seen["state"] = module._param_requires_grad_state

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"restored": True, "state": {}}
    assert module.trainer.global_step == 0


@pytest.mark.parametrize("inner", ["toggle_optimizer", "toggled_optimizer", "toggle_model"])
def test_toggle_of_the_other_optimizer_inside_a_stepping_block_is_refused(inner, tmp_path):
    """The inner toggle raises (0010); the block skips its step on the exception and restores every parameter."""
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        opt_first, opt_second = module.optimizers()
        toggles = {
            "toggle_optimizer": lambda: module.toggle_optimizer(opt_second),
            "toggled_optimizer": lambda: module.toggled_optimizer(opt_second).__enter__(),
            "toggle_model": lambda: opt_second.toggle_model().__enter__(),
        }
        block = module.toggle_optimizer(opt_first, step=True)
        with pytest.raises(RuntimeError, match="another optimizer's toggle"), block:  # noqa: PT012 - raises in it
            module.manual_backward(module.step(batch))
            toggles[inner]()
        seen["restored"] = _requires_grad(module) == before

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"restored": True}
    assert module.trainer.global_step == 0


def test_a_result_entered_twice_untoggles_twice(tmp_path):
    """A second ``with`` on one result toggles nothing (the call toggled once) and its untoggle restores nothing."""
    seen = {}

    def body(module, batch, batch_idx):
        toggle = module.toggle_optimizer(module.optimizers()[0])
        with toggle:
            module.manual_backward(module.step(batch))
        with toggle:
            seen["toggled"] = not module.layer.weight.requires_grad
        seen["requires_grad"] = all(p.requires_grad for n, p in module.named_parameters() if not n.startswith("frozen"))

    fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"toggled": False, "requires_grad": True}


@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_exception_in_a_stepping_block_skips_the_step_and_restores_requires_grad(backend, tmp_path):
    torch.manual_seed(7)
    module = ManualToggleGAN("block", fail_at=1)
    before = _requires_grad(module)

    with pytest.raises(RuntimeError, match="failure inside the toggled region"):
        fit(lambda: module, tmp_path, backend=backend)

    assert _requires_grad(module) == before
    assert module.trainer.global_step == 2  # the first batch's two steps; none of the failing one
    assert module._param_requires_grad_state == {}


def test_untoggle_inside_a_stepping_block_still_steps_on_exit(tmp_path):
    """The untoggle written in the block restores every parameter; the block steps on exit and untoggles again."""
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        optimizer = module.optimizers()[0]
        with module.toggle_optimizer(optimizer, step=True):
            module.manual_backward(module.step(batch))
            module.untoggle_optimizer(optimizer)
        seen["restored"] = _requires_grad(module) == before

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"restored": True}
    assert module.trainer.global_step == 1


def _first_optimizer_failing_in(method: str) -> type[TwoOptimizers]:
    """``TwoOptimizers`` whose first optimizer raises ``RuntimeError("<method> failed")`` from ``method``."""

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{method} failed")

    failing = type(f"Failing_{method}", (torch.optim.SGD,), {method: fail})

    class Module(TwoOptimizers):
        def configure_optimizers(self) -> Any:
            first = list(self.first.parameters()) + list(self.frozen.parameters())
            return [failing(first, lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]

    return Module


def test_a_step_that_raises_on_exit_still_untoggles(tmp_path):
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        block = module.toggle_optimizer(module.optimizers()[0], step=True)
        with pytest.raises(RuntimeError, match="step failed"), block:  # noqa: PT012 - raises on exit
            module.manual_backward(module.step(batch))
        seen["restored"] = _requires_grad(module) == before
        seen["state"] = module._param_requires_grad_state

    fit(lambda: _first_optimizer_failing_in("step")(body), tmp_path, steps=1)

    assert seen == {"restored": True, "state": {}}


def test_failing_zero_grad_leaves_nothing_toggled(tmp_path):
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        opt_first, opt_second = module.optimizers()
        with pytest.raises(RuntimeError, match="zero_grad failed"), module.toggle_optimizer(opt_first, step=True):
            pass
        seen["restored"] = _requires_grad(module) == before
        with module.toggle_optimizer(opt_second, step=True):  # nothing is left toggled
            module.manual_backward(module.step(batch))

    module = fit(lambda: _first_optimizer_failing_in("zero_grad")(body), tmp_path, steps=1)

    assert seen == {"restored": True}
    assert module.trainer.global_step == 1
