# Sourced by the scripts: make (once) and use the tool's own virtual environment under .work/tool-env.
# Only Python 3.9+, git and PyPI are needed. The environment is remade when pyproject.toml changes, and a half-made
# one (no ready-marker, e.g. an interrupted install) is removed and made again.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL_ENV="${PATCHSERIES_TOOL_ENV:-$ROOT/.work/tool-env}"
PYTHON="${PYTHON:-python3}"

bootstrap_tool_env() {
  local marker="$TOOL_ENV/.patchseries-ready" stamp
  stamp="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
    return 0
  fi
  echo "[bootstrap] creating $TOOL_ENV" >&2
  rm -rf "$TOOL_ENV"
  "$PYTHON" -m venv "$TOOL_ENV"
  "$TOOL_ENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[dev]" >&2
  echo "$stamp" > "$marker"
}
