"""Entropy (KL divergence) calibration in the manner of TensorRT's IInt8EntropyCalibrator2.

TensorRT (8.6, checked against its caches in tests/golden) histograms |x| into 2048 bins whose range is the first
calibration batch's absmax; a later batch past the range doubles the bin width (neighbouring bins summed) until it
fits. The threshold is the centre of a bin: (i + 0.5) * width, i bins kept (i may reach 2048, past the absmax).
`grid="tensorrt"` rebuilds that grid from calib's finer histogram (its first-batch absmax and its absmax);
`grid="absmax"` spreads the 2048 bins over [0, absmax] and puts the threshold on a bin edge: a grid that batch
size and order cannot change, registered as its own algorithm, `entropy-stable` (calib.algorithms.entropy_stable).

For every candidate threshold of i bins (i from `num_levels` up to `num_bins`) the clipped reference distribution
P (outliers folded into its last bin) is compared with Q, P quantised to `num_levels` levels and expanded back over
the non-empty bins. The threshold with the smallest KL(P || Q) wins (the last one on ties). The spike of exact
zeros that Relu/Clip outputs carry is left out of both distributions (`zero_bin="drop"`: the first bin dropped, as
TensorRT describes; `"zeros"`: only the exact zeros).
"""
import numpy as np

NAME = "entropy"
GRIDS = ("tensorrt", "absmax")


def check(num_bins, num_levels, zero_bin, stride, grid):
    if grid not in GRIDS:
        return f"grid must be one of {', '.join(GRIDS)}, got {grid!r}"
    if zero_bin not in ("drop", "zeros", "copy", "keep"):
        return f"zero_bin must be drop, zeros, copy or keep, got {zero_bin!r}"
    if not (1 <= num_levels <= num_bins):
        return f"num_levels must be in [1, num_bins], got {num_levels}"
    return None


def tensorrt_width(first_absmax: float, absmax: float, num_bins: int = 2048) -> float:
    """The bin width TensorRT ends with: first_absmax / num_bins, doubled until absmax fits."""
    w = first_absmax / num_bins
    while absmax > num_bins * w:
        w *= 2.0
    return w


def compute_amax(hist, num_bins: int = 2048, num_levels: int = 128, zero_bin: str = "drop",
                 stride: int = 1, grid: str = "tensorrt") -> float:
    top = float(hist.absmax)
    if top == 0.0 or hist.counts.sum() == 0:
        return top
    first = getattr(hist, "first_absmax", None)
    exact = getattr(hist, "trt", None)
    trt = grid == "tensorrt" and first is not None and first > 0.0
    if trt and exact is not None and exact.width is not None and exact.counts.size == num_bins:
        width, bins = exact.width, exact.counts.astype(np.float64)
    else:
        width = tensorrt_width(first, top, num_bins) if trt else top / num_bins
        bins = hist.resample(num_bins, num_bins * width)
    if zero_bin == "drop":
        bins[0] = 0.0
    elif zero_bin == "zeros":
        bins[0] = max(0.0, bins[0] - getattr(hist, "zeros", 0))
    elif zero_bin == "copy":
        bins[0] = bins[1]
    if bins.sum() == 0:
        return top
    from calib.stats.kernels import kl_divergences, kl_divergences_tensorrt

    if trt:
        div = kl_divergences_tensorrt(bins.astype(np.float64), num_levels, num_levels)
        if not np.isfinite(div).any():
            return top
        best = div.size - 1 - int(np.argmin(div[::-1]))  # the last minimum: many candidates tie on sparse tensors
        return float((num_levels + best + 0.5) * width)
    ivals, div = kl_divergences(bins.astype(np.float64), num_levels, num_levels, stride)
    if not np.isfinite(div).any():
        return top
    best = ivals.size - 1 - int(np.argmin(div[::-1]))
    return float((ivals[best] + 0.5) * width) if trt else float(ivals[best] * width)
