#!/usr/bin/env bash
# The main job: get the pinned Lightning, apply the series, install it with torch, run the series' tests.
# All options are passed to `patchseries test`; see `scripts/apply_and_test.sh --help`.
# shellcheck source=scripts/_bootstrap.sh
source "$(dirname "$0")/_bootstrap.sh"
bootstrap_tool_env
# the name the job's help and errors use for itself
export PATCHSERIES_PROG="$0"
exec "$TOOL_ENV/bin/python" -m patchseries test "$@"
