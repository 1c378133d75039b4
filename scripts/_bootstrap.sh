# Sourced by the scripts: make (once) and activate the tool's own virtual environment under .work/tool-env.
# Only Python 3.9+, git and PyPI are needed; a half-made environment (no ready-marker) is rebuilt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL_ENV="${PATCHSERIES_TOOL_ENV:-$ROOT/.work/tool-env}"
PYTHON="${PYTHON:-python3}"

bootstrap_tool_env() {
  local extras="$1" marker="$TOOL_ENV/.ready-$1"
  local stamp
  stamp="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
    return 0
  fi
  echo "[bootstrap] creating $TOOL_ENV ($extras)" >&2
  rm -rf "$TOOL_ENV"
  "$PYTHON" -m venv "$TOOL_ENV"
  "$TOOL_ENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT$extras" >&2
  echo "$stamp" > "$marker"
}
