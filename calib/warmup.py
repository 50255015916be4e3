"""The compiled kernels loaded on a thread while a command loads its model and data; numba's OpenMP settings."""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path


def omp_defaults() -> None:
    """numba's OpenMP threads: a short spin, then sleep, unless the user set either variable (set on the main
    thread, before the warm-up thread starts: the environment is not changed while other threads may read it).

    numba runs the histogram loops on an OpenMP team whose threads, by default, spin for a while after each loop
    (GNU OpenMP: 300000 turns). Between the loops ONNX Runtime computes on the same cores, and on a machine where
    anything else runs, spinning threads take the cores that the one thread still working needs: on a 2-core
    machine shared with a busy test suite the histogram loops ran 7-20 times slower. Fully passive threads cost a
    wake-up of about 0.2 ms per loop instead (a whole MobileNetV2 calibration 1.4x slower on an idle machine). A
    short spin before sleeping keeps both: measured on 2 cores, 64 photos, idle 2.26 s (passive 3.13, spinning
    2.53), beside one busy process 3.85 s (passive 3.46, spinning 5.20). Read by the OpenMP library when it
    loads, at the first parallel loop."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ["GOMP_SPINCOUNT"] = "500"


_thread: threading.Thread | None = None
_cold = False  # no compiled kernels on disk when the thread started: it compiles them


def _compiled_on_disk() -> bool:
    """Whether numba's cache holds calib's kernels (beside calib/kernels.py, where numba keeps them unless
    NUMBA_CACHE_DIR says otherwise; then they are taken to be there)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    return any((Path(__file__).parent / "__pycache__").glob("kernels.histogram_pass-*.nbi"))


def start() -> None:
    """Import numba and load the statistics pass's kernels (calib.kernels.warm_up) on a thread, once per process,
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


def _run() -> None:
    try:
        from calib.kernels import warm_up

        warm_up()
    except Exception as exc:  # the kernels then load (or fail, with their own error) where they are first called
        logging.getLogger(__name__).debug("kernel warm-up: %s", exc)
