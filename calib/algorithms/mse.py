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
    best, best_err = top, np.inf
    for chunk in np.array_split(amaxes, max(1, candidates // 64)):
        s = (chunk / 127.0)[:, None]
        q = np.clip(np.rint(c[None, :] / s), -127, 127) * s
        err = ((c[None, :] - q) ** 2 * h[None, :]).sum(axis=1)
        j = int(np.argmin(err))
        if err[j] < best_err:
            best_err, best = float(err[j]), float(chunk[j])
    return best
