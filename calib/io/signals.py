"""Ctrl-C and SIGTERM: a clean stop when the process can take one, and a bounded one when it cannot.

SIGTERM (`kill`, a container stopping, a batch system's time limit) is handled as Ctrl-C: an exception raised where
the main thread was, so that the same clean-up runs (the lock and the staging folder removed, the previous results
kept).

Raised anywhere, that exception hung or crashed calib now and then (found by sending signals at random moments of
many runs on a loaded machine):
- raised inside importlib while the kernels' thread imported numba, it was swallowed in importlib's weakref callback
  with the global import lock held, and both threads then waited for ever (a run that never ended);
- raised inside a native module's initialisation (ONNX's pybind11 module), it left a half-made module whose
  destructor crashed the process; raised in a callback that C code makes (llvmlite's object cache while numba loads
  a kernel), it was printed with a traceback and dropped;
- a main thread blocked in C (a sleep or a wait that only a signal sent to it would cut short, while the kernel
  handed the signal to another thread) hears of it only when that call returns; a thread that is not a daemon, or an
  atexit handler waiting for one, is waited for at exit.
So, in the `calib` process (watch()): the handler raises once, and never while the main thread is importing or in a
callback from C; CPython's C-level handler writes each signal's number to a pipe at once, from whatever thread took
it, and a watcher thread reading that pipe hands the signal to the main thread again (after 50 ms, then up to every
400 ms) until its handler has raised; the command line ends the process as soon as its clean-up is done (end_now:
nothing joined, nothing freed); and if the process is still alive GRACE_S seconds after the signal, the watcher runs the clean-ups registered with on_forced_exit() (no
imports there: the import lock may be what is stuck), writes one line and ends it with 130 (SIGINT) or 143 (SIGTERM).
A signal the process inherited as ignored (SIGINT in a shell's background job) stays ignored.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

GRACE_S = 5.0  # from the signal to the forced exit
_AGAIN_S = 0.05  # the signal is handed to the main thread again after 50 ms, 100, 200, then every 400 ms

_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_lock = threading.Lock()  # a forced exit's clean-ups against a publication deciding to commit
_cleanups: dict[int, Callable[[], str | None]] = {}
_state: dict = {"signal": None, "reported": False, "stopping": False, "watching": False, "publication": None,
                "defer": 0}
_heard = threading.Event()  # the Python-level handler ran in the main thread


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


def received() -> int | None:
    """The signal (SIGINT or SIGTERM) the watched process received, or None."""
    return _state["signal"]


def exit_code(signum: int) -> int:
    return _CODES.get(signum, 128 + int(signum))


def interrupted_line(signum: int) -> str:
    """The one line for a signal: what it left of the output folder (note_publication)."""
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    state, out = _state.get("publication") or (None, None)
    if state == "committing":
        return f"{word} while publishing {out}: the next calib run on it finishes that"
    if state == "done":
        return f"{word} after the results were published whole in {out}"
    return f"{word}: nothing was written"


def note_publication(out: str, state: str | None) -> None:
    """What the line after a signal says of `out`: 'committing' (a publication changing it), 'done', None."""
    _state["publication"] = (state, out) if state else None


def reported() -> None:
    """The command line has written its one line about the signal: a forced exit writes none."""
    _state["reported"] = True


def end_now(code: int) -> None:
    """In the watched `calib` process, once a signal came and the clean-up is done: end it here, with `code`. Not
    even the frames of the interrupted work are freed: a native object cut in the middle (seen: ONNX's C++ module,
    1 run in 75 under load) can crash its destructor, and a thread still running or an atexit handler would be
    waited for. Elsewhere (no watch, no signal) it returns."""
    if not _state["watching"] or _state["signal"] is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def was_reported() -> bool:
    return _state["reported"]


@contextmanager
def on_forced_exit(cleanup: Callable[[], str | None]):
    """While inside: a forced exit calls cleanup() on the watcher thread first (it must not import anything; it may
    return the line to write instead of 'nothing was written')."""
    key = id(cleanup)
    with _lock:
        _cleanups[key] = cleanup
    try:
        yield
    finally:
        with _lock:
            _cleanups.pop(key, None)


@contextmanager
def no_forced_exit_cleanup():
    """A step a forced exit must not undo half-way (a publication that begins to change `out`): raises
    KeyboardInterrupt where a forced exit has begun; otherwise the clean-ups cannot start until the block ends."""
    with _lock:
        if _state["stopping"]:
            raise KeyboardInterrupt
        yield


_CALLED_FROM_C = (f"{os.sep}llvmlite{os.sep}", f"{os.sep}numba{os.sep}", f"{os.sep}ctypes{os.sep}")


def _unsafe(frame) -> bool:
    """Whether an exception raised here could be lost or leave a library half-made: inside an import (importlib's
    frames on the main thread's stack), or in the Python callbacks that C code calls (llvmlite's object cache while
    numba loads a kernel: ctypes prints such an exception and drops it)."""
    if frame is not None and any(p in frame.f_code.co_filename for p in _CALLED_FROM_C):
        return True
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextmanager
def deferred():
    """A short step that a signal should not cut (a publication's renames): the handler waits for its end (the
    watcher hands the signal over again), bounded like every exit by the forced one."""
    _state["defer"] += 1
    try:
        yield
    finally:
        _state["defer"] -= 1


def ending() -> None:
    """The command is done and the process ends: a signal from now on raises nowhere (in an atexit callback it was
    printed with a traceback and dropped); the process ends on its own or by the forced exit."""
    _state["defer"] += 1


def _handler(exc: type[BaseException]):
    def handle(signum, frame):
        if _state["signal"] is None:
            _state["signal"] = signum
        if _heard.is_set():  # once: a second Ctrl-C must not cut the clean-up the first one started
            return
        if _unsafe(frame) or _state["defer"]:  # not inside an import, a callback from C or a deferred step:
            return  # the watcher sends it again
        _heard.set()
        raise exc()
    return handle


def watch(grace: float = GRACE_S) -> bool:
    """In the main thread of the `calib` process: SIGINT and SIGTERM raise KeyboardInterrupt / Terminated once,
    and a watcher thread bounds the exit that follows (see the module's docstring). Only for a signal whose action
    is still the interpreter's default (an ignored SIGINT, a background job's, stays ignored). False where nothing
    could be installed."""
    if _state["watching"] or threading.current_thread() is not threading.main_thread():
        return False
    wanted = []
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        wanted.append((signal.SIGINT, KeyboardInterrupt))
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        wanted.append((signal.SIGTERM, Terminated))
    if not wanted:
        return False
    r, w = os.pipe()
    os.set_blocking(w, False)
    main_id = threading.main_thread().ident
    # the thread first: a signal while it starts would raise in Thread.start() once the handlers are in place
    threading.Thread(target=_watch, args=(r, {s for s, _ in wanted}, main_id, grace), name="calib-signals",
                     daemon=True).start()
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(w)  # the watcher reads the end of the pipe and ends
        return False
    for signum, exc in wanted:
        signal.signal(signum, _handler(exc))
    _state["watching"] = True
    return True


def _watch(fd: int, wanted: set, main_id: int, grace: float) -> None:
    while True:
        data = os.read(fd, 64)
        if not data:
            return
        sig = next((b for b in data if b in wanted), None)
        if sig is not None:
            break
    deadline = time.monotonic() + grace
    again = _AGAIN_S
    while not _heard.wait(again) and time.monotonic() < deadline:
        again = min(again * 2, 0.4)
        try:  # the main thread sleeps or waits in C, or was importing: hand the signal to it again
            signal.pthread_kill(main_id, sig)
        except (OSError, ValueError):
            break
    threading.Event().wait(max(0.0, deadline - time.monotonic()))
    _force_exit(sig)


def _force_exit(sig: int) -> None:
    """The process did not end within the grace period: clean up what is registered, one line, exit."""
    got = _lock.acquire(timeout=1.0)
    _state["stopping"] = True
    cleanups = list(_cleanups.values())
    if got:
        _lock.release()
    line = None
    for fn in cleanups:
        try:
            line = fn() or line
        except BaseException:  # noqa: BLE001  (the exit must happen whatever a clean-up does)
            pass
    if not _state["reported"]:
        text = f"{line or interrupted_line(sig)} (calib stopped {GRACE_S:g} s after the signal)\n"
        try:
            os.write(2, text.encode("utf-8", "replace"))
        except OSError:
            pass
    os._exit(exit_code(sig))
