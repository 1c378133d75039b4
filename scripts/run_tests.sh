#!/usr/bin/env bash
# The project's test suite: lint, type check, and pytest (which includes one run of the main job on the default
# torch). Arguments go to pytest, e.g. `scripts/run_tests.sh -m "not slow"` for the fast part only.
# shellcheck source=scripts/_bootstrap.sh
source "$(dirname "$0")/_bootstrap.sh"
bootstrap_tool_env
cd "$ROOT" || exit 2
# Only the tool environment and the system's own directories (for git) are on PATH: a tool someone installed by hand
# elsewhere must not make the suite pass where a fresh machine would fail.
git_dir="$(dirname "$(command -v git)")"
export PATH="$TOOL_ENV/bin:$git_dir:/usr/bin:/bin"
"$TOOL_ENV/bin/python" -m ruff check src tests benchmarks reproducers acceptance
"$TOOL_ENV/bin/python" -m ruff format --check src tests benchmarks reproducers acceptance
"$TOOL_ENV/bin/python" -m mypy
exec "$TOOL_ENV/bin/python" -m pytest "$@"
