#!/usr/bin/env bash
# The wheels of dist/ tested as users get them: each installed (uv pip or pip, not editable) into a fresh environment
# with a torch release, the installed-files check and the acceptance suite run against the installed package.
# Options go to `patchseries test-wheels`, e.g. `scripts/test_wheels.sh --torch 2.1.2 --package pytorch_lightning`.
# shellcheck source=scripts/_bootstrap.sh
source "$(dirname "$0")/_bootstrap.sh"
bootstrap_tool_env
exec "$TOOL_ENV/bin/python" -m patchseries test-wheels "$@"
