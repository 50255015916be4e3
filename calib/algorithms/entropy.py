"""Entropy (KL divergence) calibration in the manner of TensorRT's IInt8EntropyCalibrator2.

The |x| histogram is re-binned to `num_bins` bins over [0, absmax]. For every candidate threshold of i bins
(i from `num_levels` up to `num_bins`) the clipped reference distribution P (outliers folded into its last bin)
is compared with Q, P quantised to `num_levels` levels and expanded back over the non-empty bins. The threshold
with the smallest KL(P || Q) wins (the last one on ties). The spike of exact zeros that Relu/Clip outputs carry
is left out of both distributions (`zero_bin="drop"`), which is what brings the result close to TensorRT's.
"""
import numpy as np

NAME = "entropy"


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    ps, qs = p.sum(), q.sum()
    if ps <= 0 or qs <= 0:
        return np.inf
    p = p / ps
    q = q / qs
    m = p > 0
    if np.any(q[m] <= 0):
        return np.inf
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


def divergences(bins: np.ndarray, num_levels: int = 128, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """KL divergence for every candidate threshold i (in bins); returns (i values, divergences).

    The plain numpy statement of the search, O(bins^2); compute_amax uses the O(bins * levels) compiled
    kernel calib.kernels.kl_divergences, which the tests hold to this one."""
    n = bins.size
    cum = np.concatenate([[0.0], np.cumsum(bins)])
    nz = (bins > 0).astype(np.float64)
    cumnz = np.concatenate([[0.0], np.cumsum(nz)])
    total = cum[-1]
    ivals = np.arange(num_levels, n + 1, stride)
    out = np.empty(ivals.size)
    for k, i in enumerate(ivals):
        p = bins[:i].astype(np.float64).copy()
        p[i - 1] += total - cum[i]
        # quantise: level j covers bins [floor(j*i/L), floor((j+1)*i/L)) (as np.linspace + digitize)
        edges = np.floor(np.linspace(0, i, num_levels + 1) + 1e-9).astype(np.int64)
        edges[-1] = i
        s = cum[edges[1:]] - cum[edges[:-1]]
        c = cumnz[edges[1:]] - cumnz[edges[:-1]]
        dens = np.divide(s, c, out=np.zeros_like(s), where=c > 0)
        level = np.repeat(np.arange(num_levels), np.diff(edges))
        q = dens[level] * nz[:i]
        out[k] = _kl(p, q)
    return ivals, out


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
