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
from dataclasses import dataclass


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


GB = 1 << 30
MB = 1 << 20
_UNITS = {"": GB, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": MB, "mb": MB, "mib": MB,
          "g": GB, "gb": GB, "gib": GB, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


MAX_SIZE = 1 << 63  # a byte count past int64 means nothing to the runtimes below


def size_text(n: float) -> str:
    if n < MB / 2:  # a small model's activations: not "0 MB"
        return f"{n / 1024:.0f} KB"
    return f"{n / GB:.2f} GB" if n >= GB / 2 else f"{n / MB:.0f} MB"


def parse_size(text, where: str = "memory_budget") -> int:
    """Bytes from '2GB', '512MB', '1.5 GiB' or a bare number of GB (units of 1024); an error names `where`."""
    from calib.errors import CalibError

    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or not value > 0 or value != value or value == float("inf"):
        raise CalibError(f"{where}: '{text}': expected a size such as 2GB or 512MB")
    size = value * _UNITS[unit]
    if not size < MAX_SIZE:
        raise CalibError(f"{where}: '{text}': past the largest size calib takes ({MAX_SIZE // (1 << 60)} EiB)")
    return max(1, int(size))


@dataclass(frozen=True)
class Budget:
    """The most memory a command may hold (its peak RSS), and what the user called the option that set it."""

    limit: int = 2 * GB
    name: str = "memory_budget"
    outside: int = 0  # host memory a GPU runtime took (TensorRT, CUDA, their libraries and engines): not counted

    def samples(self, held: int, per_sample: int, what: str, hint: str = "") -> int:
        """How many samples one run may hold when `held` bytes are taken already and each sample costs
        `per_sample`; a budget too small for one is a BudgetError saying what one needs (and `hint`, another way
        out)."""
        from calib.errors import BudgetError

        room = self.limit - held
        if room < per_sample:
            need = held + per_sample
            raise BudgetError(f"{self.name} {size_text(self.limit)}: too small for one sample of {what}: one needs "
                              f"about {size_text(need)} ({size_text(held)} for the model, runtime and data in "
                              f"flight, {size_text(per_sample)} for one sample's activations"
                              + (f"; {size_text(self.outside)} a GPU runtime holds besides, not counted"
                                 if self.outside else "") + f"); raise {self.name}, "
                              + (f"use {hint}, " if hint else "") + "or make the input smaller")
        return max(1, room // max(1, per_sample))
