"""Progress lines: one per stage, so a long run always says what it is doing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

Log = Callable[[str], None]


def make_log(prefix: str = "patchseries") -> Log:
    start = time.monotonic()
    return lambda message: print(f"[{prefix} +{time.monotonic() - start:5.1f}s] {message}", file=sys.stderr, flush=True)


def quiet(message: str) -> None:
    """A logger that drops everything (for tests and library use)."""
