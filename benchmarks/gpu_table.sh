#!/usr/bin/env bash
# The should-I-compile table on a CUDA machine, as one prepared command (issue #32): for a session lent a device.
#
# Here first (makes the patched Lightning tree):  scripts/apply_and_test.sh   (or python -m patchseries apply)
# Then on the device, with the device tool's `run`:
#   command: bash benchmarks/gpu_table.sh      carry: [".work/trees/sdist-2.6.6/src"]      timeout_s: 570
# It uses the device's own python3 and torch (nothing can be installed there) with the series' Lightning from the
# carried tree, measures every variant with inductor at 10, 100 and 250 modules, and writes $OUT/gpu-table.md and
# $OUT/gpu.jsonl (one line per measurement, as they come: a run cut short keeps what it measured). Render or re-render
# here with: python benchmarks/should_i_compile.py table --from-json gpu.jsonl --device cuda [--write-docs PAGE]
set -euo pipefail
cd "$(dirname "$0")"
out="${OUT:-.}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
timeout 540 python3 should_i_compile.py table --tree ../.work/trees/sdist-2.6.6 --python python3 --device cuda \
    --backends inductor --sizes "${SIZES:-10,100,250}" --steps 30 --save "$out/gpu.jsonl" | tee "$out/gpu-table.md"
