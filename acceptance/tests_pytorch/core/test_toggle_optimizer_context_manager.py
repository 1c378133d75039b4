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
"""``zero_grad`` and ``step`` of ``toggled_optimizer`` (release 0010, forward 0005) and ``toggle_optimizer`` returning
its context manager (release 0011, release only): the acceptance cases of the with-block.

``with self.toggled_optimizer(opt, step=True):`` and ``with self.toggle_optimizer(opt, step=True):`` toggle, step the
optimizer and then zero its gradients when the block ends without an exception, and always untoggle; ``zero_grad=True``
zeroes when the block starts. Both forms are covered. A bare ``with self.toggle_optimizer(opt):`` is
``with self.toggled_optimizer(opt):``, so a body written for ``toggled_optimizer`` and renamed trains exactly as
before. ``toggle_optimizer`` called without ``with`` only toggles, whatever its flags, as on Lightning 2.6.6.
Everything that worked with 2.6.6 keeps working unchanged: overrides with its signature, copies and pickles, modules
saved whole, automatic optimization, closures, precision plugins, schedulers, optimizers the Trainer does not hold.
Misuse does what its code says, and the cases below assert what that is.
"""

import contextlib
import copy
import functools
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


FORMS = ["toggled_optimizer", "toggle_optimizer"]
STEPPING_STYLES = ["toggled_block", "block"]  # `ManualToggleGAN`'s stepping blocks of either name


def _block(module: LightningModule, optimizer: Any, form: str, **flags: Any) -> Any:
    """``module.toggled_optimizer(optimizer, **flags)`` or ``module.toggle_optimizer(optimizer, **flags)``."""
    return getattr(module, form)(optimizer, **flags)


def _trainable_except_frozen(module: LightningModule) -> bool:
    return all(p.requires_grad for name, p in module.named_parameters() if not name.startswith("frozen"))


# --- the opted-in form trains as the explicit calls -------------------------------------------------------------


@pytest.mark.parametrize("style", STEPPING_STYLES)
@pytest.mark.parametrize("three", [False, True], ids=["two_optimizers", "three_optimizers_shared"])
def test_stepping_blocks_train_like_the_explicit_calls(three, style, tmp_path):
    """The feature request's GAN: a stepping block is the five explicit calls."""
    recorder = RequiresGradRecorder()
    explicit = fit(lambda: ManualToggleGAN("calls", three), tmp_path)
    blocks = fit(lambda: ManualToggleGAN(style, three), tmp_path, callbacks=[recorder])

    assert recorder.changed == []
    assert _equal(explicit, blocks)
    assert blocks.trainer.global_step == explicit.trainer.global_step == 4 * (3 if three else 2)


@RunIf(dynamo=True)
@pytest.mark.parametrize("style", STEPPING_STYLES)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("three", [False, True], ids=["two_optimizers", "three_optimizers_shared"])
def test_stepping_blocks_compiled_train_like_eager(three, optimizer, style, tmp_path):
    """Also torch 2.1 with Adam: the step on exit runs eagerly after Dynamo set ``capturable=True``."""
    recorder = RequiresGradRecorder()
    counter = CompileCounterWithBackend("aot_eager")
    eager = fit(lambda: ManualToggleGAN("calls", three, optimizer=optimizer), tmp_path)
    compiled = fit(
        lambda: ManualToggleGAN(style, three, optimizer=optimizer), tmp_path, backend=counter, callbacks=[recorder]
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


def _accumulate_as_the_docs_do(module, batch, batch_idx):
    """Upstream's accumulation examples: on the last micro-batch ``step()``, then ``zero_grad()``."""
    for index, optimizer in enumerate(module.optimizers()):
        module.toggle_optimizer(optimizer)
        module.manual_backward(module.phase_loss(batch, index) * (index + 1) / 2)
        if batch_idx % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
        module.untoggle_optimizer(optimizer)


def _accumulate_in_blocks(form, zero_grad, module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        flags = {"zero_grad": batch_idx % 2 == 0} if zero_grad else {}
        with _block(module, optimizer, form, step=batch_idx % 2 == 1, **flags):
            module.manual_backward(module.phase_loss(batch, index) * (index + 1) / 2)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("zero_grad", [False, True], ids=["step_last", "zero_grad_first_step_last"])
@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_accumulating_blocks_train_like_the_explicit_calls(backend, zero_grad, form, tmp_path):
    """``step=<last micro-batch>`` alone, the natural rewrite of the docs' accumulation example, keeps the gradients
    accumulated before it (the block steps, then zeroes); with ``zero_grad=<first>`` too. Bit for bit in eager mode."""
    explicit = fit(lambda: TwoOptimizers(_accumulate_explicitly), tmp_path, steps=4)
    as_the_docs = fit(lambda: TwoOptimizers(_accumulate_as_the_docs_do), tmp_path, steps=4)
    blocks = fit(
        lambda: TwoOptimizers(lambda *args: _accumulate_in_blocks(form, zero_grad, *args)),
        tmp_path,
        steps=4,
        backend=backend,
    )

    assert blocks.trainer.global_step == explicit.trainer.global_step == as_the_docs.trainer.global_step == 4
    assert _equal(explicit, as_the_docs)
    assert max_parameter_difference(explicit, blocks) <= (0 if backend is None else AOT_EAGER_TOLERANCE)


def _step_explicitly(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        module.toggle_optimizer(optimizer)
        optimizer.zero_grad()
        module.manual_backward(module.phase_loss(batch, index))
        optimizer.step()
        module.untoggle_optimizer(optimizer)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("flags", [{"step": True}, {"zero_grad": True, "step": True}], ids=lambda f: "-".join(f))
def test_blocks_that_step_every_batch_equal_the_explicit_calls_bit_for_bit(flags, form, tmp_path):
    """A GAN phase: ``step=True`` with or without ``zero_grad=True`` is toggle, zero, backward, step, untoggle."""

    def blocks(module, batch, batch_idx):
        for index, optimizer in enumerate(module.optimizers()):
            with _block(module, optimizer, form, **flags):
                module.manual_backward(module.phase_loss(batch, index))

    explicit = fit(lambda: TwoOptimizers(_step_explicitly), tmp_path, steps=4)
    flagged = fit(lambda: TwoOptimizers(blocks), tmp_path, steps=4)

    assert flagged.trainer.global_step == explicit.trainer.global_step == 8
    assert _equal(explicit, flagged)


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


def _step_twice(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        module.toggle_optimizer(optimizer)
        optimizer.zero_grad()
        module.manual_backward(module.phase_loss(batch, index))
        optimizer.step()
        optimizer.step()
        module.untoggle_optimizer(optimizer)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_a_step_inside_a_stepping_block_steps_twice(backend, form, tmp_path):
    """``step=True`` added to a ``toggled_optimizer`` body that steps: the body's step and the block's, as written."""

    def stepping(module, optimizer):
        return _block(module, optimizer, form, step=True)

    doubled = fit(lambda: TwoOptimizers(lambda *args: _step_inside(stepping, *args)), tmp_path, backend=backend)
    explicit = fit(lambda: TwoOptimizers(_step_twice), tmp_path, backend=backend)

    assert doubled.trainer.global_step == explicit.trainer.global_step == 16
    assert max_parameter_difference(explicit, doubled) <= AOT_EAGER_TOLERANCE
    assert _trainable_except_frozen(doubled)


@pytest.mark.parametrize("form", FORMS)
def test_steps_of_the_bare_optimizer_inside_a_stepping_block_are_not_counted(form, tmp_path):
    """The Trainer counts the steps of its ``LightningOptimizer`` only, as on 2.6.6: the block's, not the body's."""

    def body(module, batch, batch_idx):
        optimizer = module.optimizers()[0]
        with _block(module, optimizer, form, step=True):
            module.manual_backward(module.step(batch))
            optimizer.optimizer.step()

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert module.trainer.global_step == 1


def _step_inside_without_zeroing(toggle, module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with toggle(module, optimizer):
            module.manual_backward(module.phase_loss(batch, index))
            optimizer.step()


def _step_in_blocks(module, batch, batch_idx):
    for index, optimizer in enumerate(module.optimizers()):
        with module.toggled_optimizer(optimizer, step=True):
            module.manual_backward(module.phase_loss(batch, index))


@pytest.mark.parametrize("form", FORMS)
def test_zero_grad_alone_zeroes_and_the_body_steps(form, tmp_path):
    """``zero_grad=True`` without ``step``: the block zeroes, the body steps, as a stepping block without the body's
    step would."""

    def zeroing(module, optimizer):
        return _block(module, optimizer, form, zero_grad=True)

    intended = fit(lambda: TwoOptimizers(_step_in_blocks), tmp_path)
    zeroed = fit(lambda: TwoOptimizers(lambda *args: _step_inside_without_zeroing(zeroing, *args)), tmp_path)

    assert zeroed.trainer.global_step == intended.trainer.global_step == 8
    assert _equal(intended, zeroed)


@pytest.mark.parametrize("form", FORMS)
def test_a_bare_block_written_to_zero_and_step_never_steps(form, tmp_path):
    """The feature request's form without flags, ``with self.toggle_optimizer(opt):`` expecting zero_grad and step,
    is ``toggled_optimizer`` as upstream has it: nothing steps, as its code says."""

    def body(module, batch, batch_idx):
        for index, optimizer in enumerate(module.optimizers()):
            with _block(module, optimizer, form):
                module.manual_backward(module.phase_loss(batch, index))

    torch.manual_seed(7)
    initial = _parameters(TwoOptimizers(body))
    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=2, epochs=2)

    assert module.trainer.global_step == 0
    assert all(torch.equal(initial[name], p) for name, p in _parameters(module).items())


def test_bare_blocks_that_step_do_not_warn(tmp_path):
    """Also accumulation whose only step of the first epoch comes after the block of its last batch."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*(step|toggle).*", category=UserWarning)
        for body in BODIES:
            fit(lambda body=body: TwoOptimizers(lambda *args: body(_renamed, *args)), tmp_path, steps=2, epochs=2)


# --- `toggle_optimizer` called without `with`: Lightning 2.6.6, whatever the flags ---------------------------------


def _explicit_with_flags(flags, module, batch, batch_idx):
    """The 2.6.6 loop, with gradients computed before the toggle that a ``zero_grad`` at the call would discard."""
    for index, optimizer in enumerate(module.optimizers()):
        optimizer.zero_grad()
        module.manual_backward(module.phase_loss(batch, 1 - index))  # every parameter gets a gradient
        module.toggle_optimizer(optimizer, **flags)  # the result is dropped, as 2.6.6's None was
        module.seen.append((_requires_grad(module), all(p.grad is not None for p in module.first.parameters())))
        module.manual_backward(module.phase_loss(batch, index))
        optimizer.step()
        module.untoggle_optimizer(optimizer)


@pytest.mark.parametrize(
    "flags", [{"step": True}, {"zero_grad": True}, {"zero_grad": True, "step": True}], ids=lambda f: "-".join(f)
)
@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_toggle_optimizer_with_flags_called_without_with_only_toggles(flags, backend, tmp_path):
    """``self.toggle_optimizer(opt, step=True)`` without ``with`` toggles, and neither zeroes nor steps: it trains
    bit-identically to the plain 2.6.6 call."""

    class Recording(TwoOptimizers):
        seen: list

    def make(flags):
        module = Recording(lambda *args: _explicit_with_flags(flags, *args))
        module.seen = []
        return module

    plain = fit(lambda: make({}), tmp_path, backend=backend)
    flagged = fit(lambda: make(flags), tmp_path, backend=backend)

    assert flagged.trainer.global_step == plain.trainer.global_step == 8
    assert flagged.seen == plain.seen
    assert flagged.seen[0] == (
        {
            "first.weight": True,
            "first.bias": True,
            "layer.weight": False,
            "layer.bias": False,
            "frozen.weight": False,
            "frozen.bias": False,
        },  # fmt: skip
        True,  # not zeroed at the call
    )
    assert max_parameter_difference(plain, flagged) <= (0 if backend is None else AOT_EAGER_TOLERANCE)
    assert _trainable_except_frozen(flagged)


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
        seen["one_untoggle_of_two"] = _requires_grad(module)  # the first toggle is still open, as on 2.6.6
        module.untoggle_optimizer(opt_second)
        seen["both_untoggled"] = _requires_grad(module)  # 2.6.6 left `first` frozen here for good (0014)

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen["during"] == {
        "first.weight": False, "first.bias": False, "layer.weight": True, "layer.bias": True,
        "frozen.weight": False, "frozen.bias": False,
    }  # fmt: skip
    assert seen["after"] == {**seen["during"], "first.weight": True, "first.bias": True}
    assert seen["one_untoggle_of_two"] == seen["during"]
    assert seen["both_untoggled"] == seen["after"]
    assert module.trainer.global_step == 0  # nothing steps without `step=True`


@pytest.mark.parametrize("form", FORMS)
def test_optimizer_the_trainer_does_not_hold(form, tmp_path):
    """A probe optimizer over the module's parameters: plain toggles work as on 2.6.6, and a block zeroes, steps and
    zeroes it again (its own ``zero_grad`` and ``step``), which the Trainer does not count."""
    seen = {}

    def body(module, batch, batch_idx):
        probe = torch.optim.SGD(module.layer.parameters(), lr=0.1)
        module.toggle_optimizer(probe)
        seen["toggled"] = _requires_grad(module)["first.weight"]
        module.untoggle_optimizer(probe)
        before = _requires_grad(module)
        weight = module.layer.weight.detach().clone()
        module.layer.weight.grad = torch.ones_like(weight)  # a stale gradient, which the block zeroes
        with _block(module, probe, form, zero_grad=True, step=True):
            seen["zeroed"] = module.layer.weight.grad is None or not module.layer.weight.grad.any()
            module.manual_backward(module.step(batch))
            grad = module.layer.weight.grad.clone()
        seen["stepped"] = torch.allclose(module.layer.weight, weight - 0.1 * grad, atol=1e-7)
        seen["zeroed after"] = module.layer.weight.grad is None
        seen["restored"] = _requires_grad(module) == before

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"toggled": False, "zeroed": True, "stepped": True, "zeroed after": True, "restored": True}
    assert module.trainer.global_step == 0


def test_overrides_with_the_2_6_6_signature_keep_working(tmp_path):
    """Subclasses written for 2.6.6: plain calls, ``toggled_optimizer`` (also stepping) and ``toggle_model`` call
    them with the optimizer alone and ignore their result."""
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
        with module.toggled_optimizer(opt_second, step=True):
            module.manual_backward(module.step(batch))
        with opt_second.toggle_model():
            opt_second.zero_grad()
            module.manual_backward(module.step(batch))
            opt_second.step()

    for module_class in (OldSignature, ForwardsAndReturnsNone):
        module = fit(lambda module_class=module_class: module_class(body), tmp_path, steps=2)
        assert module.trainer.global_step == 6
        assert _trainable_except_frozen(module)

    assert calls == ["old"] * 8 + ["kwargs"] * 8


@pytest.mark.parametrize("style", STEPPING_STYLES)
def test_an_override_that_returns_super_supports_blocks(style, tmp_path):
    class Forwarding(ManualToggleGAN):
        def toggle_optimizer(self, optimizer, **kwargs):
            return super().toggle_optimizer(optimizer, **kwargs)

    assert _equal(fit(lambda: ManualToggleGAN("calls"), tmp_path), fit(lambda: Forwarding(style), tmp_path))


@pytest.mark.parametrize("form", FORMS)
def test_automatic_optimization_toggles_as_before(form, tmp_path):
    """A bare block in automatic optimization only toggles, like ``toggled_optimizer``; accumulation is kept."""

    def plain(module, batch, batch_idx):
        module.toggle_optimizer(module.optimizers())
        loss = module.step(batch)
        module.untoggle_optimizer(module.optimizers())
        return loss

    def block(module, batch, batch_idx):
        with _block(module, module.optimizers(), form):
            return module.step(batch)

    expected = fit(lambda: TwoOptimizers(plain, automatic=True), tmp_path, accumulate_grad_batches=2)
    actual = fit(lambda: TwoOptimizers(block, automatic=True), tmp_path, accumulate_grad_batches=2)

    assert _equal(expected, actual)


_COPIES: dict[str, Any] = {}


def _copy_inside_a_block(form: str, module: TwoOptimizers, batch: Any, batch_idx: int) -> None:
    with _block(module, module.optimizers()[0], form, step=True):
        module.manual_backward(module.step(batch))
        _COPIES["attributes"] = set(module.__dict__)
        _COPIES["deepcopy"] = copy.deepcopy(module)
        _COPIES["pickle"] = pickle.loads(pickle.dumps(module))


@pytest.mark.parametrize("form", FORMS)
def test_copies_and_pickles_made_inside_a_block(form, tmp_path):
    """An EMA or teacher copy made inside a block is what it was on 2.6.6 inside a toggle: the block adds nothing to
    the module, and the block itself still steps."""
    _COPIES.clear()
    module = fit(lambda: TwoOptimizers(functools.partial(_copy_inside_a_block, form)), tmp_path, steps=1)

    assert module.trainer.global_step == 1
    for kind in ("deepcopy", "pickle"):
        assert set(_COPIES[kind].__dict__) == _COPIES["attributes"], kind
        assert _COPIES[kind]._trainer is None, kind


@pytest.mark.parametrize("style", STEPPING_STYLES)
def test_module_saved_whole_trains_with_blocks_after_loading(style, tmp_path):
    """A module saved whole (``torch.save(module)``), here trained first with blocks and stripped of the record of
    open toggles that the series keeps (0014), as one saved by 2.6.6 has none: it loads and trains with blocks."""
    module = fit(lambda: ManualToggleGAN(style), tmp_path)
    vars(module).pop("_toggle_stack", None)
    module.trainer = None
    torch.save(module, tmp_path / "module.pt")
    loaded = torch.load(tmp_path / "module.pt", weights_only=False)

    retrained = fit(lambda: loaded, tmp_path)
    assert retrained.trainer.global_step == 8
    assert _requires_grad(retrained) == _requires_grad(ManualToggleGAN(style))


@pytest.mark.parametrize("style", STEPPING_STYLES)
def test_lr_scheduler_stepped_after_the_blocks_sees_their_steps(style, tmp_path):
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
        blocks = fit(lambda: Scheduled(style), tmp_path)

    assert not [w for w in caught if "lr_scheduler" in str(w.message)]
    assert _equal(explicit, blocks)
    for optimizer in blocks.optimizers(use_pl_optimizer=False):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.5**4)


@RunIf(min_torch="2.4")  # fp16 autocast on CPU
@pytest.mark.parametrize("style", STEPPING_STYLES)
def test_stepping_block_with_a_gradient_scaler_trains_like_the_explicit_calls(style, tmp_path):
    """A gradient scaler that skips the first step on overflow: the block's step goes through the precision plugin."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    class Overflowing(ManualToggleGAN):
        def _loss(self, phase: int, batch: Any) -> torch.Tensor:
            loss = super()._loss(phase, batch)
            return loss * float("inf") if self.trainer.global_step == 0 else loss

    def plugins():
        return [MixedPrecision("16-mixed", "cpu")]

    explicit = fit(lambda: Overflowing("calls"), tmp_path, steps=2, plugins=plugins())
    blocks = fit(lambda: Overflowing(style), tmp_path, steps=2, plugins=plugins())

    assert blocks.trainer.global_step == explicit.trainer.global_step
    assert blocks.trainer.precision_plugin.scaler.get_scale() == explicit.trainer.precision_plugin.scaler.get_scale()
    assert _equal(explicit, blocks)


@pytest.mark.parametrize("form", FORMS)
def test_closure_optimizer_in_blocks(form, tmp_path):
    class LBFGSModule(TwoOptimizers):
        def configure_optimizers(self) -> Any:
            first = list(self.first.parameters()) + list(self.frozen.parameters())
            return [torch.optim.LBFGS(first, lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]

    def stepping(module, batch, batch_idx):
        with _block(module, module.optimizers()[0], form, step=True):
            module.manual_backward(module.step(batch))

    module = LBFGSModule(stepping)
    with pytest.raises(TypeError, match="float"):  # LBFGS's own error: the block's step passes it no closure
        fit(lambda: module, tmp_path, steps=1)
    assert _trainable_except_frozen(module)

    def closure_step(module, batch, batch_idx):
        lbfgs = module.optimizers()[0]
        with _block(module, lbfgs, form):

            def closure():
                lbfgs.zero_grad()
                loss = module.step(batch)
                module.manual_backward(loss)
                return loss

            lbfgs.step(closure)

    assert fit(lambda: LBFGSModule(closure_step), tmp_path, steps=2).trainer.global_step == 2


# --- misuse of the opted-in form does what its code says ------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("accumulate_grad_batches", [1, 2])
def test_a_stepping_block_in_automatic_optimization_fails_loudly(accumulate_grad_batches, form, tmp_path):
    """The Trainer zeroes and steps there, after the training step; from the second batch on, the block's step on exit
    changes the parameters in place with the gradients the Trainer's last backward left, before the Trainer's
    backward of the loss the block's body computed: autograd refuses that backward, never a silent wrong step (the docs
    say: use a block without flags in automatic optimization)."""

    def block(module, batch, batch_idx):
        with _block(module, module.optimizers(), form, step=True):
            return module.step(batch)

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fit(
            lambda: TwoOptimizers(block, automatic=True),
            tmp_path,
            steps=4,
            accumulate_grad_batches=accumulate_grad_batches,
        )


# --- nesting: another optimizer's block or toggle, well defined (0014) ----------------------------------------------

FIRST = {"first.weight", "first.bias"}
LAYER = {"layer.weight", "layer.bias"}


def _trainable(module: LightningModule) -> set:
    return {name for name, flag in _requires_grad(module).items() if flag}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("outer", ["toggle_model", "toggled_optimizer", "toggle_optimizer_block", "toggle_calls"])
def test_stepping_block_inside_another_optimizers_toggle(outer, form, tmp_path):
    """The block's optimizer's parameters are trainable in it and it steps; the outer toggle's state is back after
    it, and everything after the outer one."""
    seen = {}

    def body(module, batch, batch_idx):
        opt_first, opt_second = module.optimizers()
        weights = _parameters(module)
        outers = {
            "toggle_model": opt_first.toggle_model,
            "toggled_optimizer": lambda: module.toggled_optimizer(opt_first),
            "toggle_optimizer_block": lambda: module.toggle_optimizer(opt_first),
        }
        if outer == "toggle_calls":
            module.toggle_optimizer(opt_first)
        with outers.get(outer, contextlib.nullcontext)():
            with _block(module, opt_second, form, step=True):
                seen["inner"] = _trainable(module)
                module.manual_backward(module.step(batch))
            seen["outer after inner"] = _trainable(module)
        if outer == "toggle_calls":
            module.untoggle_optimizer(opt_first)
        seen["after"] = _trainable(module)
        seen["stepped"] = {name for name, p in _parameters(module).items() if not torch.equal(p, weights[name])}

    module = fit(lambda: TwoOptimizers(body), tmp_path, steps=1)

    assert seen == {"inner": LAYER, "outer after inner": FIRST, "after": FIRST | LAYER, "stepped": LAYER}
    assert module.trainer.global_step == 1


def _nested_phases(form, inner, module, batch, batch_idx):
    opt_first, opt_second = module.optimizers()
    with _block(module, opt_first, form, step=True):
        module.manual_backward(module.phase_loss(batch, 0))
        if inner == "calls":
            module.toggle_optimizer(opt_second)
            opt_second.zero_grad()
            module.manual_backward(module.phase_loss(batch, 1))
            opt_second.step()
            module.untoggle_optimizer(opt_second)
        elif inner == "toggle_model":
            with opt_second.toggle_model():
                opt_second.zero_grad()
                module.manual_backward(module.phase_loss(batch, 1))
                opt_second.step()
        else:
            with _block(module, opt_second, inner, step=True):
                module.manual_backward(module.phase_loss(batch, 1))


def _phases_one_after_the_other(module, batch, batch_idx):
    opt_first, opt_second = module.optimizers()
    module.toggle_optimizer(opt_first)
    opt_first.zero_grad()
    module.manual_backward(module.phase_loss(batch, 0))
    module.untoggle_optimizer(opt_first)
    module.toggle_optimizer(opt_second)
    opt_second.zero_grad()
    module.manual_backward(module.phase_loss(batch, 1))
    opt_second.step()
    module.untoggle_optimizer(opt_second)
    opt_first.step()


@pytest.mark.parametrize("inner", ["toggled_optimizer", "toggle_optimizer", "toggle_model", "calls"])
@pytest.mark.parametrize("form", FORMS)
def test_another_optimizers_phase_inside_a_stepping_block(form, inner, tmp_path):
    """Each optimizer gets the gradients of its own phase only: bit-identical to the phases one after the other."""
    recorder = RequiresGradRecorder()
    nested = fit(
        lambda: TwoOptimizers(lambda *args: _nested_phases(form, inner, *args)), tmp_path, callbacks=[recorder]
    )
    explicit = fit(lambda: TwoOptimizers(_phases_one_after_the_other), tmp_path)

    assert recorder.changed == []
    assert nested.trainer.global_step == explicit.trainer.global_step == 8
    assert _equal(explicit, nested)


# --- exceptions -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", STEPPING_STYLES)
@pytest.mark.parametrize("backend", [None, pytest.param("aot_eager", marks=RunIf(dynamo=True))])
def test_exception_in_a_stepping_block_skips_the_step_and_restores_requires_grad(backend, style, tmp_path):
    torch.manual_seed(7)
    module = ManualToggleGAN(style, fail_at=1)
    before = _requires_grad(module)

    with pytest.raises(RuntimeError, match="failure inside the toggled region"):
        fit(lambda: module, tmp_path, backend=backend)

    assert _requires_grad(module) == before
    assert module.trainer.global_step == 2  # the first batch's two steps; none of the failing one
    assert module._param_requires_grad_state == {}


@pytest.mark.parametrize("form", FORMS)
def test_untoggle_inside_a_stepping_block_still_steps_on_exit(form, tmp_path):
    """The untoggle written in the block restores every parameter; the block steps on exit and untoggles again."""
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        optimizer = module.optimizers()[0]
        with _block(module, optimizer, form, step=True):
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


@pytest.mark.parametrize("form", FORMS)
def test_a_step_that_raises_on_exit_still_untoggles(form, tmp_path):
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        block = _block(module, module.optimizers()[0], form, step=True)
        with pytest.raises(RuntimeError, match="step failed"), block:  # noqa: PT012 - raises on exit
            module.manual_backward(module.step(batch))
        seen["restored"] = _requires_grad(module) == before
        seen["state"] = module._param_requires_grad_state

    fit(lambda: _first_optimizer_failing_in("step")(body), tmp_path, steps=1)

    assert seen == {"restored": True, "state": {}}


@pytest.mark.parametrize("form", FORMS)
def test_failing_zero_grad_leaves_nothing_toggled(form, tmp_path):
    seen = {}

    def body(module, batch, batch_idx):
        before = _requires_grad(module)
        opt_first, opt_second = module.optimizers()
        failing = _block(module, opt_first, form, zero_grad=True, step=True)
        with pytest.raises(RuntimeError, match="zero_grad failed"), failing:
            pass
        seen["restored"] = _requires_grad(module) == before
        with _block(module, opt_second, form, step=True):  # nothing is left toggled
            seen["second"] = _trainable(module)
            module.manual_backward(module.step(batch))

    module = fit(lambda: _first_optimizer_failing_in("zero_grad")(body), tmp_path, steps=1)

    assert seen == {"restored": True, "second": LAYER}
    assert module.trainer.global_step == 1
