"""Algorithms on hand-made histograms with known answers."""
import dataclasses

import numpy as np
import pytest

from calib.algorithms import compute, names
from calib.algorithms.entropy import tensorrt_width
from calib.algorithms.registry import check_params
from calib.errors import CalibError
from calib.stats.histogram import Histogram, HistogramCollector


def hist_of(counts, width=1.0, absmax=None):
    counts = np.asarray(counts, np.int64)
    top = absmax if absmax is not None else width * (np.nonzero(counts)[0].max() + 1)
    return Histogram(counts, width, absmax=top, count=int(counts.sum()))


def test_registry_has_five():
    assert names() == ["minmax", "entropy", "percentile", "mse", "entropy-stable"]


def test_minmax_is_absmax():
    assert compute("minmax", hist_of([1, 2, 3], absmax=2.75)) == 2.75


def test_percentile_interpolates_inside_bin():
    # 100 values: 90 in bin 0 ([0,1)), 10 in bin 9 ([9,10)). 95 % lies half way into bin 9.
    h = hist_of([90] + [0] * 8 + [10], absmax=10.0)
    assert compute("percentile", h, percentile=95.0) == pytest.approx(9.5)
    assert compute("percentile", h, percentile=90.0) == pytest.approx(1.0)
    assert compute("percentile", h, percentile=100.0) == pytest.approx(10.0)


def test_percentile_rejects_bad_parameter():
    with pytest.raises(ValueError):
        compute("percentile", hist_of([1, 1]), percentile=0)


def test_mse_clips_a_lone_outlier():
    # a million values near 1 and one at 30: clipping the outlier costs less than coarse steps for the rest
    c = HistogramCollector(nbins=4096)
    x = np.concatenate([np.random.default_rng(0).uniform(0, 1, 1_000_000), [30.0]]).astype(np.float32)
    c.update("t", x)
    a = compute("mse", c.histogram("t"))
    assert a < 10.0
    assert compute("minmax", c.histogram("t")) == 30.0


def test_mse_keeps_full_range_of_uniform():
    c = HistogramCollector(nbins=4096)
    c.update("t", np.random.default_rng(0).uniform(-4, 4, 200_000).astype(np.float32))
    assert compute("mse", c.histogram("t")) == pytest.approx(4.0, rel=0.03)


def test_entropy_uniform_keeps_range():
    # uniform |x| over [0, 1): every threshold below the top throws mass away; KL picks (close to) the top
    h = hist_of(np.full(2048, 1000), width=1 / 2048, absmax=1.0)
    assert compute("entropy", h) == pytest.approx(1.0, abs=2 / 2048)


def test_entropy_clips_long_tail():
    # a Gaussian with a few far outliers: entropy threshold sits well below the absmax
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1, 500_000), [40.0, -40.0]]).astype(np.float32)
    c = HistogramCollector()
    c.update("t", x)
    a = compute("entropy", c.histogram("t"))
    assert 3.0 < a < 15.0


def test_entropy_zero_bin_modes_differ_on_relu_like_data():
    rng = np.random.default_rng(0)
    x = np.maximum(rng.normal(0, 1, 400_000), 0).astype(np.float32)
    c = HistogramCollector()
    c.update("t", x)
    h = c.histogram("t")
    assert compute("entropy", h, zero_bin="drop") != compute("entropy", h, zero_bin="keep")


def test_tensorrt_entropy_follows_the_first_batch_and_the_stable_one_does_not():
    # one histogram of a long-tailed tensor, told three different first-batch ranges: TensorRT's grid (2048 bins
    # of first_absmax / 2048, doubled until the absmax fits) moves the threshold; calib's own grid does not
    rng = np.random.default_rng(0)
    x = np.abs(rng.standard_t(3, 400_000)).astype(np.float32)
    c = HistogramCollector()
    c.update("t", x)
    h = c.histogram("t")
    top = float(x.max())
    trt, stable = {}, {}
    for first in (top, top / 3, top / 5):
        hf = dataclasses.replace(h, first_absmax=first, trt=None)
        trt[first], stable[first] = compute("entropy", hf), compute("entropy-stable", hf)
        w = tensorrt_width(first, top)
        assert 2048 * w / 2 < top <= 2048 * w
        i = trt[first] / w - 0.5  # the threshold is a bin centre of that grid: (i + 0.5) * width
        assert i == pytest.approx(round(i), abs=1e-6) and 128 <= round(i) <= 2048
    assert len(set(trt.values())) == 3, trt
    assert len(set(stable.values())) == 1, stable
    assert stable[top] == compute("entropy", h, grid="absmax")
    assert 0.0 < stable[top] < top


def test_entropy_stable_checks_its_parameters():
    assert set(check_params("entropy-stable", {})) == {"num_bins", "num_levels", "zero_bin", "stride"}
    with pytest.raises(CalibError, match="'entropy-stable': num_levels must be in"):
        check_params("entropy-stable", {"num_levels": 4096})
    with pytest.raises(CalibError, match="no parameter 'grid'"):
        check_params("entropy-stable", {"grid": "tensorrt"})


def test_empty_histogram_gives_zero():
    h = Histogram(np.zeros(16, np.int64), 1.0)
    for n in names():
        assert compute(n, h) == 0.0


def test_unknown_algorithm_and_parameter():
    with pytest.raises(CalibError, match="unknown algorithm 'kl'"):
        compute("kl", hist_of([1]))
    with pytest.raises(CalibError, match="no parameter 'pct'"):
        check_params("percentile", {"pct": 3})


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

    The plain numpy statement of the search, O(bins^2), that the compiled O(bins * levels) kernel
    calib.stats.kernels.kl_divergences (used by the entropy algorithm) is held to."""
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



def test_compiled_kl_search_equals_plain_numpy():
    from calib.stats.kernels import kl_divergences

    rng = np.random.default_rng(5)
    for shape in (0.5, 1.0, 3.0):
        bins = np.histogram(rng.gamma(shape, 1.0, 50_000), bins=600)[0].astype(np.float64)
        bins[rng.integers(0, 600, 40)] = 0  # empty bins inside the range
        i1, d1 = divergences(bins, 64)
        i2, d2 = kl_divergences(bins, 64, 64, 1)
        assert np.array_equal(i1, i2)
        finite = np.isfinite(d1)
        assert np.array_equal(finite, np.isfinite(d2))
        assert np.allclose(d1[finite], d2[finite], rtol=1e-9, atol=1e-12)
