"""NVTX ranges around calib's phases (build, calibrate, run, bench), so that an Nsight Systems timeline
(`nsys profile calib run recipe.yaml`) shows them beside TensorRT's and CUDA's own ranges.

NVTX is loaded through ctypes from libnvToolsExt (CUDA toolkits and the nvidia-nvtx wheels ship it); where it is
absent, or CALIB_NVTX=0, every range is a no-op costing one attribute lookup.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from contextlib import contextmanager

_NAMES = ("libnvToolsExt.so.1", "libnvToolsExt.so")


@functools.cache
def _lib():
    if os.environ.get("CALIB_NVTX", "1") == "0":
        return None
    candidates = list(_NAMES)  # the loader's own search (LD_LIBRARY_PATH, ldconfig's cache, the system folders)
    for base in sys.path:  # the nvidia-nvtx-cu* wheels
        candidates += glob.glob(os.path.join(base, "nvidia", "nvtx", "lib", "libnvToolsExt.so*"))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):  # a CUDA toolkit
        if home:
            candidates += glob.glob(os.path.join(home, "lib64", "libnvToolsExt.so*"))
    # (not ctypes.util.find_library: it runs ldconfig, gcc and ld, 35 ms of every calibration where NVTX is absent)
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
            return lib
        except (OSError, AttributeError):
            continue
    return None


def available() -> bool:
    return _lib() is not None


@contextmanager
def nvtx_range(name: str):
    """`with nvtx_range("calib.build"):` pushes a named range for the block (nothing without NVTX)."""
    lib = _lib()
    if lib is None:
        yield
        return
    lib.nvtxRangePushA(name.encode("utf-8", "replace"))
    try:
        yield
    finally:
        lib.nvtxRangePop()
