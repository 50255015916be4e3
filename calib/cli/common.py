"""What every calib command shares: one-line errors instead of tracebacks, the cache-check flags, --ray."""
from __future__ import annotations

import contextlib
import functools
import sys

import click

from calib.errors import CalibError, one_line


def handled(fn):
    """Turn a CalibError into one line on stderr and exit code 2; Ctrl-C and SIGTERM into one line and 130 / 143."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from calib.io.signals import terminate_as_interrupt

        try:
            with terminate_as_interrupt():  # SIGTERM cleans up as Ctrl-C does
                return fn(*args, **kwargs)
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001  (each kind below, the rest raised again)
            code, line = outcome(exc)
            if code is None:
                raise
            if line:
                click.echo(line, err=True)
            from calib.io.signals import end_now

            end_now(code)  # the `calib` process after a signal; in a program embedding calib, returns
            sys.exit(code)

    return wrapper


def outcome(exc: BaseException) -> tuple[int | None, str | None]:
    """The exit code and the one line for an exception that reached the command line; (None, None): a bug, raised.
    Once a signal came, whatever surfaces is its doing (a library's ImportError when Ctrl-C hit its import)."""
    from calib.io.signals import Terminated, exit_code, interrupted_line, received, reported

    sig = received()
    if sig is not None or isinstance(exc, KeyboardInterrupt):
        if sig is None:
            import signal

            sig = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        reported()
        return exit_code(sig), interrupted_line(sig)
    if isinstance(exc, BrokenPipeError):  # `calib cache inspect ... | head`: the reader left; end quietly, as cat
        _silence_stdout()
        return 141, None
    if isinstance(exc, CalibError):
        return exc.exit_code, f"error: {one_line(exc)}"
    if isinstance(exc, OSError):  # a read-only folder, a full disk: name the file, no traceback
        where = exc.filename or "output"
        return 2, f"error: {one_line(f'{where}: {exc.strerror or exc}')}"
    if isinstance(exc, MemoryError):  # past what the machine gives, whatever the budget said: no traceback either
        return 2, "error: out of memory: lower --memory-budget (memory_budget in a recipe) or the input size"
    return None, None


def given_path(path, flag: str = "-o") -> None:
    """An empty or blank output path (`-o ''`, an unset shell variable) is refused naming the flag, before any
    file is read or written."""
    if path is not None and not str(path).strip():
        raise CalibError(f"{flag}: empty path: give the output to write")


def cache_checks(fn):
    """--ignore-sidecar and --allow-partial, for every command that uses a cache."""
    fn = click.option("--allow-partial", is_flag=True,
                      help="Use a cache that leaves quantized layers without a scale (they stay unscaled).")(fn)
    return click.option("--ignore-sidecar", is_flag=True,
                        help="Use a calib cache whose sidecar is missing, malformed or disagrees with it.")(fn)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush does not fail again on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (tests): nothing left to flush
        pass


def ray_option(what: str):
    """--ray auto|ADDRESS: `what` runs on a Ray cluster's workers (the [ray] extra), with the same results."""
    return click.option("--ray", "ray_address", metavar="auto|ADDRESS",
                        help=f"Run {what} on a Ray cluster's workers: 'auto' (the running cluster) or its address "
                             "(needs the [ray] extra; the results are those of one process).")


@contextlib.contextmanager
def pool_for(address: str | None):
    """The calib.scale pool --ray asks for (None without it), closed at the end."""
    from calib.scale.pool import open_pool

    pool = open_pool(address)
    try:
        yield pool
    finally:
        if pool is not None:
            pool.close()
