#!/usr/bin/env bash
# Regenerate requirements/tool.lock, the tool environment's exact versions and hashes, from pyproject.toml (the
# project's dependencies and its `dev` extra) and requirements/build.in (the build backend). One resolution for every
# platform and every Python from 3.10 on, preferring one version of each package for all of them, from PyPI only
# (no uv or pip configuration of this machine is read). Arguments go to `uv pip compile`, e.g. `--upgrade-package zizmor`;
# without any, the versions already in the lock are kept where they still fit (pass `--upgrade` to take the newest).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LOCK_ENV="$ROOT/.work/lock-env"
PYTHON="${PYTHON:-python3}"
cd "$ROOT"
# the uv release the lock already holds (any, for a first lock), in a venv of its own
uv_pin="$(grep -oE '^uv==[^ ;]+' requirements/tool.lock 2>/dev/null || echo uv)"
if [ "$(cat "$LOCK_ENV/.uv-pin" 2>/dev/null)" != "$uv_pin" ]; then
  rm -rf "$LOCK_ENV"
  "$PYTHON" -m venv "$LOCK_ENV"
  "$LOCK_ENV/bin/python" -m pip install --quiet --disable-pip-version-check "$uv_pin" >&2
  echo "$uv_pin" > "$LOCK_ENV/.uv-pin"
fi
"$LOCK_ENV/bin/uv" pip compile --quiet --no-config --universal --python-version 3.10 --fork-strategy fewest \
  --generate-hashes --custom-compile-command scripts/update_lock.sh \
  pyproject.toml requirements/build.in --extra dev --output-file requirements/tool.lock "$@"
echo "written: requirements/tool.lock"
