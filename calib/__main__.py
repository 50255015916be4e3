"""The `calib` process (`python -m calib`, and the `calib` command): Ctrl-C and SIGTERM watched before anything heavy
is imported, the command line (calib.cli), then a quick exit. It lives here, outside calib.cli, because importing
calib.cli imports the commands."""
from __future__ import annotations

import atexit
import os
import sys
import threading


def entry() -> None:
    """Run the command line as the `calib` process.

    Ctrl-C / SIGTERM are watched first (calib.io.signals), so that one at start-up (importing ONNX Runtime, numba on
    the kernels' thread) ends in one line and 130 / 143 like one during the run, and the exit after it is bounded.
    Once the command is done (its files written and closed), the threads that are not daemons are joined and the
    atexit handlers run; the interpreter's own teardown would take 0.2 s more (numba's and ONNX Runtime's modules
    and objects freed one by one, YOLOv3-tiny's calibration 3.6 s in all), so the process ends with the command's
    exit status instead. After a signal, nothing is joined: the clean-up is done, and a thread still running (or an
    atexit handler waiting for one) is what would keep the process alive."""
    try:
        from calib.io.signals import watch

        watch()
        code = _run()
    except KeyboardInterrupt as exc:  # before the watch was set, or while it was
        from calib.cli.common import outcome

        code, line = outcome(exc)
        print(line, file=sys.stderr)
    from calib.io.signals import ending, exit_code, received

    ending()
    if received() is None and code not in (exit_code(2), exit_code(15)):
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
        getattr(atexit, "_run_exitfuncs", lambda: None)()
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) if s}.values():
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`calib ... | head`): nothing more to write
            if code == 0:
                code = 120  # as the interpreter's own exit has it
    os._exit(code)


def _run() -> int:
    """The command line's exit status; a signal before or between commands (importing, parsing) as one line."""
    try:
        from calib.cli.main import main

        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # noqa: BLE001  (a signal during start-up; anything else is raised again)
        from calib.cli.common import outcome
        from calib.io.signals import received

        if received() is None and not isinstance(exc, KeyboardInterrupt):
            raise
        code, line = outcome(exc)
        print(line, file=sys.stderr)
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        return 1
    from calib.io.signals import exit_code, interrupted_line, received, reported, was_reported

    sig = received()
    if sig is not None and code != exit_code(sig):  # click's own "Aborted!" (a signal while it parsed) and the like
        if not was_reported():
            print(interrupted_line(sig), file=sys.stderr)
        reported()
        code = exit_code(sig)
    return code


if __name__ == "__main__":
    entry()
