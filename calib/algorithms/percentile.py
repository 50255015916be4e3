"""Percentile: the value below which `percentile` % of |x| lies, interpolated inside the histogram bin."""
import numpy as np

NAME = "percentile"


def check(percentile: float = 99.99) -> str | None:
    """What is wrong with the parameters, or None (called before any pass over data)."""
    if isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 0.0 < percentile <= 100.0:
        return f"percentile must be a number in (0, 100], got {percentile!r}"
    return None


def compute_amax(hist, percentile: float = 99.99) -> float:
    if not 0.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    total = int(hist.counts.sum())
    if total == 0 or hist.absmax == 0.0:
        return float(hist.absmax)
    cum = np.cumsum(hist.counts, dtype=np.float64)
    target = total * percentile / 100.0
    i = int(np.searchsorted(cum, target, side="left"))
    i = min(i, hist.nbins - 1)
    before = cum[i - 1] if i > 0 else 0.0
    inside = hist.counts[i]
    frac = (target - before) / inside if inside else 1.0
    return float(min(hist.absmax, (i + frac) * hist.width))
