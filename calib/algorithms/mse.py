"""MSE: the amax that minimises the mean squared error of symmetric int8 quantisation over the histogram."""
import numpy as np

NAME = "mse"


def compute_amax(hist, num_bins: int = 2048, candidates: int = 512, start: float = 0.05) -> float:
    top = float(hist.absmax)
    if top == 0.0 or hist.counts.sum() == 0:
        return top
    counts = hist.resample(num_bins, top)
    width = top / num_bins
    centers = (np.arange(num_bins) + 0.5) * width
    keep = counts > 0
    c, h = centers[keep], counts[keep]
    amaxes = np.linspace(start * top, top, candidates)
    from calib.stats.kernels import mse_errors

    err = mse_errors(c.astype(np.float64), h.astype(np.float64), amaxes)
    return float(amaxes[int(np.argmin(err))])
