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
"""Modules compiled before ``import lightning``: Fabric records no compile arguments for them.

Lightning wraps ``torch.compile`` at import time, so the order of imports is the thing under test and every case runs
in a fresh interpreter. Only re-applying ``torch.compile`` in ``Fabric.setup`` needs the arguments; everything else
must work.
"""

import subprocess
import sys
import textwrap

import pytest

from tests_fabric.helpers.runif import RunIf

COMPILE_BEFORE_IMPORT = """
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)


torch.manual_seed(0)
compiled = torch.compile(TinyNet(), backend="eager")  # before lightning is imported: no arguments recorded

from lightning.fabric import Fabric
from lightning.fabric.wrappers import _unwrap_objects, is_wrapped

fabric = Fabric(accelerator="cpu", devices=1)
"""


def _run(body: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "case.py"
    script.write_text(COMPILE_BEFORE_IMPORT + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)


def _assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK")


@RunIf(dynamo=True)
def test_unwrapping_needs_no_compile_arguments(tmp_path):
    proc = _run(
        """
        assert not is_wrapped(compiled)
        # not a Fabric wrapper, so it is returned as it is (Lightning 2.6.6 raised here)
        assert _unwrap_objects({"model": compiled})["model"] is compiled
        print("OK")
        """,
        tmp_path,
    )
    _assert_ok(proc)


@RunIf(dynamo=True)
def test_setup_without_reapply_trains_and_round_trips_a_checkpoint(tmp_path):
    proc = _run(
        """
        import torch
        model = fabric.setup(compiled, _reapply_compile=False)
        assert is_wrapped(model)
        optimizer = fabric.setup_optimizers(torch.optim.SGD(compiled.parameters(), lr=0.1))
        before = compiled._orig_mod.layer.weight.detach().clone()

        with fabric.no_backward_sync(model):
            loss = model(torch.ones(3, 4)).sum()
        fabric.backward(loss, model=model)
        optimizer.step()
        trained = compiled._orig_mod.layer.weight.detach().clone()
        assert not torch.equal(before, trained)

        fabric.save("ckpt.pt", {"model": model, "step": 1})
        with torch.no_grad():
            compiled._orig_mod.layer.weight.zero_()
        state = {"model": model, "step": 0}
        fabric.load("ckpt.pt", state)
        assert state["step"] == 1
        assert torch.equal(compiled._orig_mod.layer.weight, trained)
        print("OK")
        """,
        tmp_path,
    )
    _assert_ok(proc)


@RunIf(dynamo=True)
@pytest.mark.parametrize("method", ["setup", "setup_module"])
def test_reapplying_compile_fails_with_every_remedy_named(tmp_path, method):
    proc = _run(
        f"""
        try:
            fabric.{method}(compiled)
        except RuntimeError as error:
            print(error)
        """,
        tmp_path,
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    message = proc.stdout.strip()
    assert message.startswith("Failed to determine the arguments that were used to compile the module (`TinyNet`)")
    assert "it was compiled before `lightning` was imported" in message
    assert "Import `lightning` first" in message
    assert "pass `_reapply_compile=False` to `fabric.setup(...)`" in message
    # the remedies are the ones Fabric's compile guide gives, which says to compile *before* `fabric.setup()`
    assert "returned by `fabric.setup(...)`" not in message


@RunIf(dynamo=True)
def test_usual_import_order_reapplies_compile_with_the_same_arguments(tmp_path):
    script = tmp_path / "usual.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from lightning.fabric import Fabric
            from torch._dynamo import OptimizedModule

            compiled = torch.compile(torch.nn.Linear(4, 2), backend="eager", dynamic=False)
            fabric = Fabric(accelerator="cpu", devices=1)
            model = fabric.setup(compiled)
            assert isinstance(model._forward_module, OptimizedModule)
            assert model._forward_module._compile_kwargs == {"backend": "eager", "dynamic": False}
            assert model(torch.ones(3, 4)).shape == (3, 2)
            print("OK")
            """
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    _assert_ok(proc)


@RunIf(dynamo=True)
def test_no_backward_sync_skips_the_sync_of_a_compiled_ddp_module(tmp_path):
    """With a strategy that syncs gradients, Fabric unwraps the re-compiled module to reach DDP's ``no_sync``."""
    script = tmp_path / "ddp.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from lightning.fabric import Fabric

            compiled = torch.compile(torch.nn.Linear(4, 2), backend="eager")
            fabric = Fabric(accelerator="cpu", devices=1, strategy="ddp")
            fabric.launch()
            model = fabric.setup(compiled)
            ddp = model._forward_module._orig_mod
            with fabric.no_backward_sync(model):
                assert not ddp.require_backward_grad_sync
                fabric.backward(model(torch.ones(3, 4)).sum(), model=model)
            assert ddp.require_backward_grad_sync
            assert compiled._orig_mod.weight.grad is not None
            print("OK")
            """
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    _assert_ok(proc)
