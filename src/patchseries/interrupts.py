"""SIGTERM handled as Ctrl-C, and named points where a test makes a run signal itself.

A run stopped by SIGTERM (a CI timeout, ``kill``) would end without running any ``finally`` or ``with`` exit: scratch
clones in the system's temporary folder, ``tmp*`` folders in the work directory and a staged ``export.partial/`` would
outlive it. Raised as :class:`KeyboardInterrupt` instead, it unwinds as Ctrl-C
does: every scratch folder is a context manager that removes it, and the command line exits 130.

:func:`stage` marks a point of a run by name. The tests set ``PATCHSERIES_SIGNAL_AT=<stage>[:<SIGNAL>]`` to make
the process send itself that signal (default SIGTERM) there: an interrupt at a chosen point, without a sleep.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNAL_AT_ENV = "PATCHSERIES_SIGNAL_AT"
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, the first SIGINT, SIGTERM or SIGHUP raises KeyboardInterrupt; later ones are ignored, so
    that the clean-up the first one started is not itself cut short (a second Ctrl-C left a half-unpacked sdist). The
    old handlers are restored afterwards, except where :func:`ignore_interrupts` has been called."""
    received = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        if not received:
            received = True
            raise KeyboardInterrupt

    # SIGHUP too: a closed terminal or ssh session stops the run as Ctrl-C would, removing what it was building
    previous = {signum: signal.signal(signum, interrupt) for signum in _INTERRUPTS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is interrupt:
                signal.signal(signum, handler)


def ignore_interrupts() -> None:
    """From now on, SIGINT, SIGTERM and SIGHUP are ignored: the run's work is done, and its exit status says how."""
    for signum in _INTERRUPTS:
        signal.signal(signum, signal.SIG_IGN)


def stage(name: str) -> None:
    """A named point of a run: send this process the signal ``$PATCHSERIES_SIGNAL_AT`` asks for here, if any (a
    comma-separated list of ``<stage>[:<SIGNAL>]``: a second interrupt during the first one's clean-up, too)."""
    for wanted in os.environ.get(SIGNAL_AT_ENV, "").split(","):
        at, _, signame = wanted.partition(":")
        if at == name:
            os.kill(os.getpid(), getattr(signal, signame or "SIGTERM"))
