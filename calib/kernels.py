"""Compiled inner loops for the statistics pass (numba, parallel over the machine's cores)."""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, nogil=True)
def range_stats(flat, nchunks):
    """Return (min, max, absmax, nonfinite) of a 1-D float array; non-finite values are skipped."""
    n = flat.size
    step = (n + nchunks - 1) // nchunks
    mins = np.full(nchunks, np.inf)
    maxs = np.full(nchunks, -np.inf)
    bad = np.zeros(nchunks, np.int64)
    for c in prange(nchunks):
        lo = c * step
        hi = min(n, lo + step)
        mn = np.inf
        mx = -np.inf
        nb = 0
        for i in range(lo, hi):
            v = flat[i]
            if v - v == 0.0:
                mn = min(mn, v)
                mx = max(mx, v)
            else:
                nb += 1
        mins[c] = mn
        maxs[c] = mx
        bad[c] = nb
    mn = mins.min()
    mx = maxs.max()
    return mn, mx, max(abs(mn), abs(mx)) if mn <= mx else 0.0, bad.sum()


@njit(parallel=True, cache=True, nogil=True)
def abs_histogram_fused(flat, inv_width, nbins, nchunks, signed, careful):
    """One pass: counts of floor(|x| * inv_width) and (min, max, all-finite flag) of the values seen.

    signed: 2 * nbins counts, [0, nbins) for x >= 0 and [nbins, 2 nbins) for x < 0 (the negative values' own).
    careful=False: branch-light; values past the last bin (and NaN) land in the last bin, and the caller checks
    absmax and the flag. careful=True: non-finite values are skipped (the caller has widened the bins)."""
    n = flat.size
    step = (n + nchunks - 1) // nchunks
    width = 2 * nbins if signed else nbins
    local = np.zeros((nchunks, 4, width), np.int64)
    mins = np.full(nchunks, np.inf)
    maxs = np.full(nchunks, -np.inf)
    poison = np.zeros(nchunks)
    top = np.float64(nbins)
    last = np.float64(nbins - 1)
    for c in prange(nchunks):
        lo = c * step
        hi = min(n, lo + step)
        h = local[c]
        mn = np.inf
        mx = -np.inf
        z = 0.0
        for i in range(lo, hi):
            x = flat[i]
            if careful and not (x - x == 0.0):
                continue
            v = abs(x) * inv_width
            v = v if v < top else last
            h[i & 3, int(v) + (nbins if signed and x < 0 else 0)] += 1
            z += x * 0.0
            if x < mn:
                mn = x
            if x > mx:
                mx = x
        mins[c] = mn
        maxs[c] = mx
        poison[c] = z
    out = np.zeros(width, np.int64)
    for c in range(nchunks):
        for k in range(4):
            out += local[c, k]
    mn = mins.min()
    mx = maxs.max()
    return out, mn, mx, poison.sum() == 0.0


@njit(cache=True, nogil=True)
def kl_divergences(bins, num_levels, start, stride):
    """KL(P || Q) for every candidate threshold of i bins, i = start, start + stride, ..., len(bins).

    P is bins[:i] with the outliers folded into its last bin; Q spreads each of `num_levels` levels evenly over
    its non-empty bins. Prefix sums of b*log(b) make each candidate O(num_levels)."""
    n = bins.size
    cum = np.zeros(n + 1)
    cumnz = np.zeros(n + 1)
    cumblogb = np.zeros(n + 1)
    for k in range(n):
        b = bins[k]
        cum[k + 1] = cum[k] + b
        cumnz[k + 1] = cumnz[k] + (1.0 if b > 0 else 0.0)
        cumblogb[k + 1] = cumblogb[k] + (b * np.log(b) if b > 0 else 0.0)
    total = cum[n]
    count = (n - start) // stride + 1
    out = np.empty(count)
    ivals = np.empty(count, np.int64)
    for t in range(count):
        i = start + t * stride
        ivals[t] = i
        outliers = total - cum[i]
        last = bins[i - 1] + outliers
        qs = cum[i]
        if total <= 0 or qs <= 0 or (outliers > 0 and bins[i - 1] <= 0):
            out[t] = np.inf
            continue
        plogp = cumblogb[i - 1] + (last * np.log(last) if last > 0 else 0.0)
        cross = 0.0
        step = i / num_levels
        e0 = 0
        for j in range(num_levels):
            e1 = i if j == num_levels - 1 else int(np.floor((j + 1) * step + 1e-9))
            sj = cum[e1] - cum[e0]
            cnt = cumnz[e1] - cumnz[e0]
            if cnt > 0:
                pj = sj + (outliers if e1 == i else 0.0)
                cross += pj * np.log(sj / cnt / qs)
            e0 = e1
        out[t] = (plogp - total * np.log(total) - cross) / total
    return ivals, out


@njit(cache=True, nogil=True)
def mse_errors(centers, counts, amaxes):
    """Sum of squared symmetric-int8 quantisation error over a histogram, for each candidate amax."""
    out = np.empty(amaxes.size)
    for t in range(amaxes.size):
        s = amaxes[t] / 127.0
        e = 0.0
        for k in range(centers.size):
            c = centers[k]
            q = np.rint(c / s)
            if q > 127.0:
                q = 127.0
            e += counts[k] * (c - q * s) ** 2
        out[t] = e
    return out
