"""SIGTERM (`kill`, a container stopping, a batch system's time limit) handled as Ctrl-C: an exception raised where
the process was, so that the same clean-up runs (the lock and the staging folder removed, the previous results
kept)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _raise(signum, frame):
    raise Terminated()


@contextmanager
def terminate_as_interrupt():
    """While inside: SIGTERM raises Terminated in the main thread. Only where SIGTERM still has its default
    action (a program embedding calib keeps its own handler); the previous action is put back on leaving."""
    installed = False
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _raise)
                installed = True
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
