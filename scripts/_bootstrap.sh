# shellcheck shell=bash
# Sourced by the scripts: make (once) and use the tool's own virtual environment under .work/tool-env.
# Only Python 3.10+, git and PyPI are needed. Everything in it comes from requirements/tool.lock (exact versions, sha256
# hashes checked by pip), the tool itself is installed editable without dependencies and without build isolation (its
# build backend is in the lock too). The environment is remade when pyproject.toml, the lock or the Python changes, and
# a half-made one (no ready-marker, e.g. an interrupted install) is removed and made again.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL_ENV="${PATCHSERIES_TOOL_ENV:-$ROOT/.work/tool-env}"
TOOL_LOCK="$ROOT/requirements/tool.lock"
PYTHON="${PYTHON:-python3}"

# A missing or too old $PYTHON is one `error:` line and exit status 2, like every refusal of the tool itself.
require_python() {
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "error: PYTHON=$PYTHON is not a command; set PYTHON to a Python 3.10+ interpreter (e.g. PYTHON=python3.11)," \
      "or unset it to use python3" >&2
    exit 2
  fi
  if [ "$("$PYTHON" -c 'import sys; print(sys.version_info >= (3, 10))' 2>/dev/null)" != True ]; then
    echo "error: PYTHON=$PYTHON is not Python 3.10 or newer ($("$PYTHON" --version 2>&1 | head -n 1)); set PYTHON" \
      "to a Python 3.10+ interpreter (e.g. PYTHON=python3.11)" >&2
    exit 2
  fi
}

bootstrap_tool_env() {
  local marker="$TOOL_ENV/.patchseries-ready" stamp
  require_python
  stamp="$({ cat "$ROOT/pyproject.toml" "$TOOL_LOCK"; "$PYTHON" --version; } | sha256sum | cut -c1-16)"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
    return 0
  fi
  echo "[bootstrap] creating $TOOL_ENV from ${TOOL_LOCK#"$ROOT"/}" >&2
  rm -rf "$TOOL_ENV"
  "$PYTHON" -m venv "$TOOL_ENV"
  local pip=("$TOOL_ENV/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install --quiet --require-hashes --no-deps -r "$TOOL_LOCK" >&2
  "${pip[@]}" install --quiet --no-deps --no-build-isolation -e "$ROOT" >&2
  echo "$stamp" > "$marker"
}
