"""What every calib command shares: one-line errors instead of tracebacks, the cache-check flags."""
from __future__ import annotations

import functools
import sys

import click

from calib.errors import CalibError, one_line


def handled(fn):
    """Turn a CalibError into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from calib.io.signals import Terminated, terminate_as_interrupt

        try:
            with terminate_as_interrupt():  # SIGTERM cleans up as Ctrl-C does
                return fn(*args, **kwargs)
        except BrokenPipeError:  # `calib cache inspect ... | head`: the reader left; end quietly, as cat does
            _silence_stdout()
            sys.exit(141)
        except CalibError as exc:
            click.echo(f"error: {one_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:  # a read-only folder, a full disk: name the file, no traceback
            where = exc.filename or "output"
            click.echo(f"error: {one_line(f'{where}: {exc.strerror or exc}')}", err=True)
            sys.exit(2)
        except MemoryError:  # past what the machine gives, whatever the budget said: no traceback either
            click.echo("error: out of memory: lower --memory-budget (memory_budget in a recipe) or the input size",
                       err=True)
            sys.exit(2)
        except Terminated:
            click.echo("terminated: nothing was written", err=True)
            sys.exit(143)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing was written", err=True)
            sys.exit(130)

    return wrapper


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
