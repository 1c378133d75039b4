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
"""Placeholder of the acceptance suite: a compiled ``BoringModel`` trains one step with the ``Trainer`` on CPU.

It exercises the plumbing (the suite copied into the tree's ``tests/``, run beside the patches' tests) until the
series' own proof moves here.
"""

import torch
from torch._dynamo.testing import CompileCounterWithBackend

from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel
from tests_pytorch.helpers.runif import RunIf


@RunIf(dynamo=True)
def test_compiled_boring_model_trains_one_step(tmp_path):
    counter = CompileCounterWithBackend("eager")
    model = torch.compile(BoringModel(), backend=counter)
    trainer = Trainer(
        default_root_dir=tmp_path,
        fast_dev_run=1,
        accelerator="cpu",
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )

    trainer.fit(model)

    assert trainer.global_step == 1
    assert counter.frame_count >= 1  # the training step was compiled
