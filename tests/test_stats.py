"""Streaming histograms: exact, order- and batch-independent, mergeable, bounded."""
import numpy as np

from calib.stats import HistogramCollector


def test_counts_and_range_exact():
    x = np.array([0.0, -0.5, 0.25, 3.0, -7.5], np.float32)
    c = HistogramCollector(nbins=16)
    c.update("t", x)
    h = c.histogram("t")
    assert h.absmax == 7.5 and h.min == -7.5 and h.max == 3.0 and h.count == 5
    assert h.width == 0.5  # 16 bins of 0.5 cover [0, 8) and 7.5 fits
    assert h.counts.sum() == 5
    assert h.counts[0] == 2  # 0.0 and 0.25
    assert h.counts[1] == 1 and h.counts[6] == 1 and h.counts[15] == 1


def test_order_and_batching_do_not_matter():
    rng = np.random.default_rng(0)
    parts = [rng.normal(0, s, 10_000).astype(np.float32) for s in (0.1, 5.0, 1.0, 30.0)]
    a, b, c = HistogramCollector(), HistogramCollector(), HistogramCollector()
    for p in parts:
        a.update("t", p)
    for p in reversed(parts):
        b.update("t", p)
    c.update("t", np.concatenate(parts))
    for other in (b, c):
        assert np.array_equal(a.histogram("t").counts, other.histogram("t").counts)
        assert a.histogram("t").width == other.histogram("t").width


def test_merge_equals_single_collector():
    rng = np.random.default_rng(1)
    x, y = rng.normal(0, 1, 5000).astype(np.float32), rng.normal(0, 9, 5000).astype(np.float32)
    a, b, both = HistogramCollector(), HistogramCollector(), HistogramCollector()
    a.update("t", x)
    b.update("t", y)
    both.update("t", x)
    both.update("t", y)
    m = a.merge(b)
    assert np.array_equal(m.histogram("t").counts, both.histogram("t").counts)
    assert m.histogram("t").absmax == both.histogram("t").absmax


def test_nonfinite_values_are_skipped_and_counted():
    c = HistogramCollector(nbins=64)
    c.update("t", np.array([1.0, np.nan, np.inf, -2.0], np.float32))
    h = c.histogram("t")
    assert h.nonfinite == 2 and h.count == 2 and h.absmax == 2.0 and h.counts.sum() == 2


def test_all_zero_tensor_then_growth():
    c = HistogramCollector(nbins=32)
    c.update("t", np.zeros(100, np.float32))
    c.update("t", np.array([4.0], np.float32))
    h = c.histogram("t")
    assert h.absmax == 4.0 and h.counts[0] == 100 and h.counts.sum() == 101


def test_memory_is_bounded():
    c = HistogramCollector(nbins=1024)
    for s in range(20):
        c.update("t", np.random.default_rng(s).normal(0, s + 1, 50_000).astype(np.float32))
    assert c.histogram("t").counts.size == 1024
