"""Numbers an input must hold for the arithmetic after it to stay finite: image normalization (scale, mean, std) in
the type the model is fed."""
from __future__ import annotations

import math

import numpy as np


def normalization_fault(scale: float, mean, std, dtype: str = "float32") -> tuple[str, str] | None:
    """(key, what is wrong) where `scale`, `mean` or `std` is not a finite number of the type fed (`dtype`; uint8
    input is normalized in float32), `std` or `scale` is 0 there, or a pixel value 0..255 goes past that type's
    range after them; None where all hold. The key is the recipe's (scale, mean[i], std[i], std for the range)."""
    ftype = np.dtype("float32" if dtype == "uint8" else dtype)
    top = float(np.finfo(ftype).max)
    with np.errstate(all="ignore"):
        for key, values, nonzero in (("scale", (scale,), True), ("mean", tuple(mean), False),
                                     ("std", tuple(std), True)):
            for i, v in enumerate(values):
                name = key if key == "scale" else f"{key}[{i}]"
                if not math.isfinite(v) or not abs(float(np.float32(v))) <= top:
                    return name, f"{v!r} is not a finite {ftype} number"
                if nonzero and np.float32(v) == 0:
                    return name, f"{v!r} is 0 in float32"
        if dtype == "uint8":
            return None
        s, m, d = np.float32(scale), np.asarray(mean, np.float32), np.asarray(std, np.float32)
        for pixel in (0, 255):
            out = ((np.float32(pixel) * s - m) / d).astype(ftype)
            if not np.isfinite(out).all():
                return "std", (f"pixel value {pixel} becomes {float(np.abs(out).max()):g} after scale, mean and std, "
                               f"past {ftype}'s range")
    return None
