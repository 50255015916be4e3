"""Entropy (KL divergence) calibration in the manner of TensorRT's IInt8EntropyCalibrator2.

The |x| histogram is re-binned to `num_bins` bins over [0, absmax]. For every candidate threshold of i bins
(i from `num_levels` up to `num_bins`) the clipped reference distribution P (outliers folded into its last bin)
is compared with Q, P quantised to `num_levels` levels and expanded back over the non-empty bins. The threshold
with the smallest KL(P || Q) wins (the last one on ties). The spike of exact zeros that Relu/Clip outputs carry
is left out of both distributions (`zero_bin="drop"`), which is what brings the result close to TensorRT's.
"""
import numpy as np

NAME = "entropy"


def compute_amax(hist, num_bins: int = 2048, num_levels: int = 128, zero_bin: str = "drop",
                 stride: int = 1) -> float:
    top = float(hist.absmax)
    if top == 0.0 or hist.counts.sum() == 0:
        return top
    bins = hist.resample(num_bins, top)
    if zero_bin == "drop":
        bins[0] = 0.0
    elif zero_bin == "copy":
        bins[0] = bins[1]
    elif zero_bin != "keep":
        raise ValueError(f"zero_bin must be drop, copy or keep, got {zero_bin!r}")
    if bins.sum() == 0:
        return top
    from calib.kernels import kl_divergences

    ivals, div = kl_divergences(bins.astype(np.float64), num_levels, num_levels, stride)
    if not np.isfinite(div).any():
        return top
    best = ivals.size - 1 - int(np.argmin(div[::-1]))
    return float(ivals[best] * top / num_bins)
