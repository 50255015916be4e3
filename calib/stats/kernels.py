"""Compiled inner loops for the statistics pass (numba, parallel over the machine's cores)."""
from __future__ import annotations

from calib.stats.openmp import omp_defaults

omp_defaults()  # before numba loads its OpenMP library

import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402


# The histogram pass works on float32 values and their int32 bits. Order, absmax and finiteness come from the
# bits (integer min/max reductions vectorize; float ones with NaN semantics do not), bins are computed into a
# small buffer block by block and scattered afterwards with unsigned indices (no negative-index fix-up), into four
# interleaved sub-histograms so that runs of one bin do not wait on each other. Non-finite values go to a dump bin.
BLOCK = 2048
_LOW = 0x7FFFFFFF
_INF_BITS = 0x7F800000


@njit(cache=True, nogil=True, inline="always")
def _key(b):
    """int32 bits of a float32 -> an int32 with the same order as the floats."""
    return b ^ ((b >> np.int32(31)) & np.int32(_LOW))


@njit(cache=True, nogil=True)
def _bins_block(xs, bs, buf, s1, s2, nbins, off, width, dump, state):
    """Bin indices of xs into buf; state (kmin, kmax, absmax bits) updated over the finite values."""
    kmin, kmax, amax = state[0], state[1], state[2]
    top = np.float32(nbins)
    last = np.float32(nbins - 1)
    for j in range(xs.size):
        x = xs[j]
        b = bs[j]
        a = b & np.int32(_LOW)
        ok = a < np.int32(_INF_BITS)
        v = (abs(x) * s1) * s2
        v = v if v < top else last
        k = np.uint32(np.int32(v)) + (off if x < 0 else np.uint32(0)) + (np.uint32(j) & np.uint32(3)) * width
        buf[j] = k if ok else dump
        amax = max(amax, a if ok else np.int32(0))
        key = _key(b)
        kmin = min(kmin, key if ok else np.int32(_LOW))
        kmax = max(kmax, key if ok else np.int32(-_LOW - 1))
    state[0] = kmin
    state[1] = kmax
    state[2] = amax


@njit(cache=True, nogil=True)
def _range_block(bs, state):
    """state (kmin, kmax, absmax bits, nonfinite count) updated over the finite values of bs."""
    kmin, kmax, amax, bad = state[0], state[1], state[2], state[3]
    for j in range(bs.size):
        b = bs[j]
        a = b & np.int32(_LOW)
        ok = a < np.int32(_INF_BITS)
        amax = max(amax, a if ok else np.int32(0))
        key = _key(b)
        kmin = min(kmin, key if ok else np.int32(_LOW))
        kmax = max(kmax, key if ok else np.int32(-_LOW - 1))
        bad += np.int32(0) if ok else np.int32(1)
    state[0] = kmin
    state[1] = kmax
    state[2] = amax
    state[3] = bad


@njit(cache=True, nogil=True)
def _scatter(buf, m, h):
    for j in range(m):
        h[buf[j]] += 1


_NEG_INF_KEY = -2139095041  # _key of -inf's bits; keys above +inf's bits (0x7F800000) or at or below this are NaN/inf


@njit(cache=True, nogil=True)
def _block_keys(bs):
    """The smallest and largest order key of a block (non-finite values included), and its count of zeros."""
    kmin = np.int32(_LOW)
    kmax = np.int32(-_LOW - 1)
    z = 0
    for j in range(bs.size):
        b = bs[j]
        key = _key(b)
        kmin = min(kmin, key)
        kmax = max(kmax, key)
        z += (b & np.int32(_LOW)) == np.int32(0)
    return kmin, kmax, z


@njit(cache=True, nogil=True)
def _bins_fast(xs, buf, s1, s2, last, off, pat):
    """_bins_block for a block of finite values: a loop the compiler vectorizes (copy offsets from `pat`)."""
    for j in range(xs.size):
        x = xs[j]
        v = (abs(x) * s1) * s2
        v = v if v < last else last
        buf[j] = np.uint32(v) + (off if x < np.float32(0.0) else np.uint32(0)) + pat[j]


@njit(cache=True, nogil=True)
def _grid_fast(xs, buf, w, lo, hi, last, absmode, pat):
    """_grid_block for a block of finite values (vectorized; copy offsets from `pat`)."""
    if absmode:
        for j in range(xs.size):
            q = abs(xs[j]) / w
            q = q if q < last else last
            buf[j] = np.uint32(q) + pat[j]
    else:
        for j in range(xs.size):
            q = min(max(xs[j], lo), hi) / w
            q = q if q < last else last
            buf[j] = np.uint32(q) + pat[j]


@njit(cache=True, nogil=True)
def _float_of(bits):
    return np.float64(np.array([bits], np.int32).view(np.float32)[0])


@njit(cache=True, nogil=True)
def _finish(states, bad, n):
    """(min, max, absmax) of the finite values from per-chunk states; (inf, -inf, 0) when there are none."""
    if bad >= n:
        return np.inf, -np.inf, 0.0
    kmin = states[:, 0].min()
    kmax = states[:, 1].max()
    return _float_of(_key(kmin)), _float_of(_key(kmax)), _float_of(states[:, 2].max())


@njit(parallel=True, cache=True, nogil=True)
def range_stats(flat, nchunks):
    """Return (min, max, absmax, nonfinite) of a 1-D float32 array; non-finite values are skipped."""
    if flat.itemsize != 4:
        raise ValueError("float32 values expected")
    bits = flat.view(np.int32)
    n = flat.size
    step = (n + nchunks - 1) // nchunks
    states = np.zeros((nchunks, 4), np.int32)
    bads = np.zeros(nchunks, np.int64)
    for c in prange(nchunks):
        st = states[c]
        st[0] = np.int32(_LOW)
        st[1] = np.int32(-_LOW - 1)
        lo = min(n, c * step)
        hi = min(n, lo + step)
        for s in range(lo, hi, 1 << 20):  # the int32 count restarts every block
            st[3] = 0
            _range_block(bits[s:min(hi, s + (1 << 20))], st)
            bads[c] += st[3]
    bad = bads.sum()
    mn, mx, amax = _finish(states, bad, n)
    return mn, mx, amax, bad


def abs_histogram(flat, inv_width, nbins, nchunks, signed):
    """One pass over a 1-D float32 array: (counts, min, max, absmax, nonfinite).

    counts[i] holds the values with floor(|x| * inv_width) == i; values past the last bin land in the last bin
    (the caller compares absmax with the range). signed: 2 * nbins counts, [0, nbins) for x >= 0 and
    [nbins, 2 nbins) for x < 0. Non-finite values are counted apart and left out of everything else.
    inv_width must be a power of two (the products are then exact)."""
    counts, _grids, mn, mx, amax, bad, _zeros = histogram_pass(flat, float(inv_width), int(nbins), bool(signed), _NO_GRID,
                                                               _NO_GRID, _NO_GRID, TRT_GRID_BINS, int(nchunks))
    return counts, mn, mx, amax, bad


TRT_GRID_BINS = 2048
_CHUNK_MAX = 1 << 30  # values per chunk of histogram_pass, so that its int32 counts cannot overflow
_NO_GRID = np.zeros(0)


@njit(parallel=True, cache=True, nogil=True)
def histogram_pass(flat, inv_width, nbins, signed, gwidth, glo, ghi, gbins, nchunks):
    """Everything the statistics keep of a 1-D float32 array, from one read of it (block by block, each block
    binned while it is in the core's cache): (counts, grids, min, max, absmax, nonfinite, zeros).

    counts: as abs_histogram. grids[g]: as grid_histogram(flat, gwidth[g], glo[g], ghi[g], gbins) (TensorRT's
    histograms, one row per grid asked for). zeros: the values that are exactly zero (either sign)."""
    if flat.itemsize != 4:
        raise ValueError("float32 values expected")
    bits = flat.view(np.int32)
    n = flat.size
    nchunks = max(nchunks, (n + _CHUNK_MAX - 1) // _CHUNK_MAX)  # int32 counts per chunk
    step = (n + nchunks - 1) // nchunks
    width = 2 * nbins if signed else nbins
    dump = 4 * width
    ng = gwidth.size
    local = np.zeros((nchunks, dump + 1), np.int32)  # int32: half the cache lines of int64 (1.2x faster)
    glocal = np.zeros((nchunks, ng, 4 * gbins + 1), np.int32)
    states = np.zeros((nchunks, 3), np.int32)
    zeros = np.zeros(nchunks, np.int64)
    s1 = np.float32(min(inv_width, 2.0 ** 126))  # two factors: 2**-149 bins need 2**149, past float32
    s2 = np.float32(inv_width / min(inv_width, 2.0 ** 126))
    off = np.uint32(nbins if signed else 0)
    glast = np.float32(gbins - 1)
    gdump = np.uint32(4 * gbins)
    flast = np.float32(nbins - 1)
    copy = np.arange(BLOCK).astype(np.uint32) & np.uint32(3)  # the sub-histogram of each position in a block
    pat = copy * np.uint32(width)
    gpat = copy * np.uint32(gbins)
    for c in prange(nchunks):
        lo = min(n, c * step)
        hi = min(n, lo + step)
        h = local[c]
        buf = np.empty(BLOCK, np.uint32)
        st = states[c]
        st[0] = np.int32(_LOW)
        st[1] = np.int32(-_LOW - 1)
        z = 0
        for s in range(lo, hi, BLOCK):
            e = min(hi, s + BLOCK)
            xs = flat[s:e]
            kmin, kmax, zb = _block_keys(bits[s:e])
            z += zb
            if kmax >= np.int32(_INF_BITS) or kmin <= np.int32(_NEG_INF_KEY):  # NaN or inf here: the exact loops
                _bins_block(xs, bits[s:e], buf, s1, s2, nbins, off, np.uint32(width), np.uint32(dump), st)
                _scatter(buf, e - s, h)
                for g in range(ng):
                    _grid_block(xs, buf, np.float32(gwidth[g]), np.float32(glo[g]),
                                np.float32(min(ghi[g], 3.0e38)), glast, gbins, gdump, glo[g] < 0.0)
                    _scatter(buf, e - s, glocal[c, g])
            else:
                st[0] = min(st[0], kmin)
                st[1] = max(st[1], kmax)
                st[2] = max(st[2], _key(kmin) & np.int32(_LOW), _key(kmax) & np.int32(_LOW))
                _bins_fast(xs, buf, s1, s2, flast, off, pat)
                _scatter(buf, e - s, h)
                for g in range(ng):
                    _grid_fast(xs, buf, np.float32(gwidth[g]), np.float32(glo[g]), np.float32(min(ghi[g], 3.0e38)),
                               glast, glo[g] < 0.0, gpat)
                    _scatter(buf, e - s, glocal[c, g])
        zeros[c] = z
    out = np.zeros(width, np.int64)
    grids = np.zeros((ng, gbins), np.int64)
    bad = 0
    for c in range(nchunks):
        for q in range(4):
            out += local[c, q * width:(q + 1) * width]
            for g in range(ng):
                grids[g] += glocal[c, g, q * gbins:(q + 1) * gbins]
        bad += local[c, dump]
    mn, mx, amax = _finish(states, bad, n)
    return out, grids, mn, mx, amax, bad, zeros.sum()


@njit(cache=True, nogil=True)
def _prefix_sums(bins):
    """Prefix sums of the counts, of the non-empty bins and of b*log(b): each KL candidate in O(levels)."""
    n = bins.size
    cum = np.zeros(n + 1)
    cumnz = np.zeros(n + 1)
    cumblogb = np.zeros(n + 1)
    for k in range(n):
        b = bins[k]
        cum[k + 1] = cum[k] + b
        cumnz[k + 1] = cumnz[k] + (1.0 if b > 0 else 0.0)
        cumblogb[k + 1] = cumblogb[k] + (b * np.log(b) if b > 0 else 0.0)
    return cum, cumnz, cumblogb


@njit(parallel=True, cache=True, nogil=True)
def kl_divergences(bins, num_levels, start, stride):
    """KL(P || Q) for every candidate threshold of i bins, i = start, start + stride, ..., len(bins).

    P is bins[:i] with the outliers folded into its last bin; Q spreads each of `num_levels` levels evenly over
    its non-empty bins. Prefix sums of b*log(b) make each candidate O(num_levels)."""
    n = bins.size
    cum, cumnz, cumblogb = _prefix_sums(bins)
    total = cum[n]
    count = (n - start) // stride + 1
    out = np.empty(count)
    ivals = np.empty(count, np.int64)
    for t in prange(count):
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
def _grid_block(xs, buf, w, lo, hi, last, nbins, dump, absmode):
    """Bin indices of xs into buf (4 interleaved copies of the nbins bins; non-finite values to `dump`)."""
    for j in range(xs.size):
        x = xs[j]
        v = abs(x) if absmode else min(max(x, lo), hi)
        q = v / w
        q = q if q < last else last
        k = np.uint32(np.int32(q)) + (np.uint32(j) & np.uint32(3)) * np.uint32(nbins)
        buf[j] = k if np.isfinite(x) else dump


@njit(parallel=True, cache=True, nogil=True)
def grid_histogram(flat, width, lo, hi, nbins, nchunks):
    """Counts of floor(clip(x, lo, hi)' / width) over a 1-D float32 array, where x' = |x| when lo < 0 (the |x|
    histogram) and x clipped to [lo, hi] otherwise (a Relu/Clip output); indices past the last bin land in it.
    Non-finite values are left out. The division is done in float32, as on the GPU."""
    n = flat.size
    step = (n + nchunks - 1) // nchunks
    dump = np.uint32(4 * nbins)
    local = np.zeros((nchunks, 4 * nbins + 1), np.int64)
    w = np.float32(width)
    flo = np.float32(lo)
    fhi = np.float32(min(hi, 3.0e38))
    last = np.float32(nbins - 1)
    absmode = lo < 0.0
    for c in prange(nchunks):
        a = min(n, c * step)
        b = min(n, a + step)
        h = local[c]
        buf = np.empty(BLOCK, np.uint32)
        for s in range(a, b, BLOCK):
            e = min(b, s + BLOCK)
            _grid_block(flat[s:e], buf, w, flo, fhi, last, nbins, dump, absmode)
            _scatter(buf, e - s, h)
    out = np.zeros(nbins, np.int64)
    for c in range(nchunks):
        for q in range(4):
            out += local[c, q * nbins:(q + 1) * nbins]
    return out


@njit(parallel=True, cache=True, nogil=True)
def kl_divergences_tensorrt(bins, num_levels, start):
    """KL(P || Q) for every candidate of i bins, i = start .. len(bins), as TensorRT's EntropyCalibration2 has it
    (8.6, matched bit for bit on tests/golden): P is bins[:i] with the outliers folded into its last bin; bin k < i
    goes to level floor(k * num_levels / i); Q spreads each level's count (of bins[:i], outliers not included) evenly
    over the level's non-empty bins of `bins`. inf where P has mass that Q lacks (an empty last bin with outliers)."""
    n = bins.size
    cum, cumnz, cumblogb = _prefix_sums(bins)
    total = cum[n]
    count = n - start + 1
    out = np.empty(count)
    for t in prange(count):
        i = start + t
        outliers = total - cum[i]
        qs = cum[i]
        if total <= 0 or qs <= 0 or (outliers > 0 and bins[i - 1] <= 0):
            out[t] = np.inf
            continue
        last = bins[i - 1] + outliers
        plogp = cumblogb[i - 1] + (last * np.log(last) if last > 0 else 0.0)
        cross = 0.0
        for j in range(num_levels):
            e0 = (j * i + num_levels - 1) // num_levels  # first k with floor(k * L / i) == j: ceil(j * i / L)
            e1 = ((j + 1) * i + num_levels - 1) // num_levels
            if e1 > i:
                e1 = i
            if e1 <= e0:
                continue
            sj = cum[e1] - cum[e0]
            cnt = cumnz[e1] - cumnz[e0]
            if cnt > 0:
                pj = sj + (outliers if e1 == i else 0.0)
                cross += pj * np.log(sj / cnt / qs)
        out[t] = (plogp - total * np.log(total) - cross) / total
    return out


@njit(parallel=True, cache=True, nogil=True)
def mse_errors(centers, counts, amaxes):
    """Sum of squared symmetric-int8 quantisation error over a histogram, for each candidate amax."""
    out = np.empty(amaxes.size)
    for t in prange(amaxes.size):
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


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _compare_block(r, t, acc):
    """acc += (sum r*r, sum d*d, sum r*t, sum t*t) over r, t (float64 sums; d = r - t); returns max |d|."""
    rr = 0.0
    dd = 0.0
    rt = 0.0
    tt = 0.0
    m = 0.0
    for j in range(r.size):
        a = np.float64(r[j])
        b = np.float64(t[j])
        d = a - b
        rr += a * a
        dd += d * d
        rt += a * b
        tt += b * b
        m = max(m, abs(d))
    acc[0] += rr
    acc[1] += dd
    acc[2] += rt
    acc[3] += tt
    return m


@njit(parallel=True, cache=True, nogil=True)
def compare_sums(ref, test, nchunks):
    """One pass over two equally long 1-D float arrays: (sum r^2, sum (r-t)^2, sum r*t, sum t^2, max |r-t|).

    Sums in float64 by blocks of 4096 values; NaN in either input makes the sums and the maximum NaN (any NaN
    difference makes sum (r-t)^2 NaN, so that sum says it)."""
    n = ref.size
    step = (n + nchunks - 1) // nchunks
    accs = np.zeros((nchunks, 4))
    maxes = np.zeros(nchunks)
    for c in prange(nchunks):
        lo = min(n, c * step)
        hi = min(n, lo + step)
        acc = accs[c]
        m = 0.0
        for s in range(lo, hi, 4096):
            e = min(hi, s + 4096)
            m = max(m, _compare_block(ref[s:e], test[s:e], acc))
        maxes[c] = m
    tot = accs.sum(axis=0)
    m = maxes.max() if nchunks > 0 else 0.0
    if tot[1] != tot[1]:
        m = np.nan
    return tot[0], tot[1], tot[2], tot[3], m


def warm_up() -> None:
    """Load the statistics pass's kernels and those of a default calibration's algorithms (see calib.stats.warmup)."""
    x = np.zeros(8, np.float32)
    g = np.zeros(1)
    range_stats(x, 1)
    histogram_pass(x, 1.0, 8, True, g, g, g, 8, 1)
    kl_divergences_tensorrt(np.ones(16), 4, 8)
    mse_errors(np.ones(4), np.ones(4), np.ones(2))
