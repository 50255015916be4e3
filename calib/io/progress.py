"""One way to show progress for every pass over data: a tqdm bar counting images, with images/s."""
from __future__ import annotations

import logging
import sys
from contextlib import contextmanager

_QUIET = {"value": False}


def set_quiet(quiet: bool) -> None:
    _QUIET["value"] = bool(quiet)


def is_quiet() -> bool:
    return _QUIET["value"]


@contextmanager
def bar(desc: str, total: int | None = None, unit: str = "img"):
    """A progress bar advanced with .update(n); silent when quiet or when nothing is a terminal."""
    from tqdm import tqdm

    t = tqdm(total=total, desc=desc, unit=unit, unit_scale=False, disable=is_quiet(), file=sys.stderr,
             dynamic_ncols=True, leave=True, mininterval=0.2)
    try:
        yield t
    finally:
        t.close()


def setup_logging(verbose: bool = False, log_file=None) -> None:
    root = logging.getLogger("calib")
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    fmt = logging.Formatter("%(message)s")
    if not is_quiet():
        sh = logging.StreamHandler(sys.stderr)
        sh.setLevel(logging.DEBUG if verbose else logging.INFO)
        sh.setFormatter(fmt)
        root.addHandler(sh)
    if log_file is not None:
        fh = logging.FileHandler(log_file, mode="w", encoding="utf-8", errors="backslashreplace")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(fh)
    if not root.handlers:
        root.addHandler(logging.NullHandler())  # quiet: not even logging's last-resort handler
    root.propagate = False
