"""Handing freed memory back to the system between phases of a command.

glibc keeps what Python, protobuf and ONNX Runtime free in its heaps (model bytes, parsed protos, a session's
set-up copies) and reuses it only for later requests of fitting sizes: a process that builds several sessions one
after the other holds the set-up garbage of each. `release()` collects Python's cycles and asks glibc to give free
pages back (malloc_trim); elsewhere it only collects."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows)
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def release() -> None:
    """Free Python's unreachable objects and return the C heap's free pages to the system."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def rss_mb() -> float | None:
    """This process's resident set size now, in MB (Linux; None elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
