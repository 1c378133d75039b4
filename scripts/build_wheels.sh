#!/usr/bin/env bash
# The release wheels (issue #38): lightning, pytorch_lightning and lightning_fabric with the series applied, built
# from the pinned sdists into dist/. Options go to `patchseries wheels` (see `scripts/build_wheels.sh --help`).
# shellcheck source=scripts/_bootstrap.sh
source "$(dirname "$0")/_bootstrap.sh"
bootstrap_tool_env
exec "$TOOL_ENV/bin/python" -m patchseries wheels "$@"
