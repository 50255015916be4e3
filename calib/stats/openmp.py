"""numba's OpenMP settings, made before numba loads its OpenMP library (by the kernels' module at its import,
and by the warm-up on the main thread before its thread starts)."""
from __future__ import annotations

import os


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
