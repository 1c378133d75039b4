"""Interrupts: SIGTERM and SIGHUP unwind as Ctrl-C does (exit 130); a file is replaced whole or not at all. At a stage,
``PATCHSERIES_SIGNAL_AT=<stage>[:<SIGNAL>][,...]`` makes the process signal itself (default SIGTERM), for the tests."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

SIGNAL_AT_ENV = "PATCHSERIES_SIGNAL_AT"
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """The first SIGINT, SIGTERM or SIGHUP raises KeyboardInterrupt; later ones, ignored, never cut clean-up short."""
    received = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        if not received:
            received = True
            raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in _INTERRUPTS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is interrupt:  # not after ignore_interrupts()
                signal.signal(signum, handler)


def ignore_interrupts() -> None:
    for signum in _INTERRUPTS:
        signal.signal(signum, signal.SIG_IGN)


def stage(name: str) -> None:
    for wanted in os.environ.get(SIGNAL_AT_ENV, "").split(","):
        if (at := wanted.partition(":"))[0] == name:  # a stage, and a signal (SIGTERM if none)
            os.kill(os.getpid(), getattr(signal, at[2] or "SIGTERM"))


def write_file(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one rename: an interrupt or a failed write leaves ``path`` as it was."""
    os.close((made := tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".partial"))[0])  # a name
    staged = Path(made[1])
    try:
        staged.write_bytes(text.encode())
        staged.chmod(0o644)
        stage(f"write-{path.name}")
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
