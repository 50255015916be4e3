"""The compiled kernels loaded on a thread while a command loads its model and data."""
from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from calib.stats.openmp import omp_defaults


_thread: threading.Thread | None = None
_cold = False  # no compiled kernels on disk when the thread started: it compiles them


def _compiled_on_disk() -> bool:
    """Whether numba's cache holds calib's kernels (beside calib/stats/kernels.py, where numba keeps them unless
    NUMBA_CACHE_DIR says otherwise; then they are taken to be there)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    return any((Path(__file__).parent / "__pycache__").glob("kernels.histogram_pass-*.nbi"))


def start() -> None:
    """Import numba and load the statistics pass's kernels (calib.stats.kernels.warm_up) on a thread, once per process,
    while the caller imports ONNX, loads the model and data, and ONNX Runtime sets up and runs (releasing the GIL).
    That is ~0.7 s of mostly Python (numba's import, its compiler set-up, each kernel from its cache) that otherwise
    came before the first batch's statistics (YOLOv3-tiny: 0.3 s off a whole calibration). A kernel called while
    it loads waits for the load, as numba's dispatch has it."""
    global _thread, _cold
    if _thread is None:
        omp_defaults()
        _cold = not _compiled_on_disk()
        # a daemon: a command that fails before it needs the kernels exits at once (the `calib` process ends with
        # os._exit; in a Python session the work that follows waits for the kernels anyway)
        _thread = threading.Thread(target=_run, name="calib-kernels", daemon=True)
        _thread.start()


def settle() -> None:
    """Before the statistics pass: where the thread compiles the kernels (the first run after an install, ~20 s),
    wait for it, so that the compiler's memory (~150 MB) is not added to the pass's peak; otherwise return at once."""
    if _cold and _thread is not None:
        _thread.join()


def wait() -> None:
    """Until the thread has loaded the kernels (where it was started): what they hold is then in the process's RSS
    whole, never in part, when calib.runners.budget reads it."""
    if _thread is not None:
        _thread.join()


def loaded() -> bool:
    """Whether the kernels are loaded in this process: by the thread, or by a first call (the comparison's)."""
    if _thread is not None and not _thread.is_alive():
        return True
    kernels = sys.modules.get("calib.stats.kernels")
    return kernels is not None and bool(getattr(kernels.compare_sums, "signatures", ()))


def _run() -> None:
    try:
        from calib.stats.kernels import warm_up

        warm_up()
    except Exception as exc:  # the kernels then load (or fail, with their own error) where they are first called
        logging.getLogger(__name__).debug("kernel warm-up: %s", exc)
