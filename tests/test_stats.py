"""Streaming histograms: exact, order- and batch-independent, mergeable, bounded."""
import numpy as np
import pytest

from calib.stats.histogram import HistogramCollector


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


def _direct_at(x: np.ndarray, width: float, nbins: int):
    """A histogram of x collected directly, brought to `width` (a power-of-two multiple of its own)."""
    c = HistogramCollector(nbins=nbins)
    c.update("y", x)
    h = c.histogram("y")
    h.coarsen_to(width)
    return h


def test_signed_histogram_counts_negatives_and_keeps_abs_counts():
    rng = np.random.default_rng(4)
    parts = [rng.normal(0, s, 20_000).astype(np.float32) for s in (0.3, 4.0, 1.0)]
    plain, signed = HistogramCollector(nbins=256), HistogramCollector(nbins=256, signed=frozenset({"t"}))
    for p in parts:
        plain.update("t", p)
        signed.update("t", p)
    a, b = plain.histogram("t"), signed.histogram("t")
    assert np.array_equal(a.counts, b.counts) and a.width == b.width and a.absmax == b.absmax
    neg = _direct_at(np.abs(np.concatenate(parts)[np.concatenate(parts) < 0]), b.width, 256)
    assert np.array_equal(b.neg, neg.counts)


def test_relu_and_clip_outputs_derived_from_their_input_equal_a_direct_pass():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(0.5, 2.0, 30_000), [6.0, -0.0, 7.9, -3.0]]).astype(np.float32)
    for hi in (np.inf, 6.0, float(np.float32(1.3))):  # a Clip's bound is a float32 constant
        c = HistogramCollector(nbins=16, signed=frozenset({"x"}))
        for part in np.array_split(x, 7):
            c.update("x", part)
        c.derive("y", "x", hi)
        got = c.histogram("y")
        y = np.clip(x, 0.0, hi)
        want = _direct_at(y, got.width, 16)
        assert got.width == c.histogram("x").width
        assert np.array_equal(got.counts, want.counts), hi
        assert (got.absmax, got.min, got.max, got.count) == (float(y.max()), 0.0, float(y.max()), x.size)


def test_derived_histogram_with_nonfinite_input_and_merge():
    x = np.array([1.0, -2.0, np.nan, 3.5, -np.inf], np.float32)
    a, b = HistogramCollector(nbins=16, signed=frozenset({"x"})), HistogramCollector(nbins=16, signed=frozenset({"x"}))
    a.update("x", x[:3])
    b.update("x", x[3:] * 4)  # grows the range: merging must coarsen the negative counts too
    m = a.merge(b)
    m.derive("y", "x", np.inf)
    h = m.histogram("x")
    assert h.count == 3 and h.nonfinite == 2 and h.neg.sum() == 1
    y = m.histogram("y")
    assert y.counts.sum() == 3 and y.absmax == 14.0 and y.counts[0] == 1  # -2 -> 0


def test_pass_derives_relu_output_instead_of_reading_it(tiny_model, tiny_data):
    from calib.calibrate import collect, relu_outputs
    from calib.data.arrays import ArraySource, load_array
    from calib.quantize.model import inspect_model

    info = inspect_model(tiny_model)
    assert relu_outputs(tiny_model, info) == {"relu1": ("conv1", float("inf"))}
    src = ArraySource(load_array(tiny_data), "input", batch_size=6)
    _, fast, n1, fp1 = collect(tiny_model, src, derive=True)
    _, slow, n2, fp2 = collect(tiny_model, src, derive=False)
    assert (n1, fp1) == (n2, fp2) and set(fast.names()) == set(slow.names()) == set(info.activations)
    got, want = fast.histogram("relu1"), slow.histogram("relu1")
    want.coarsen_to(got.width)
    assert np.array_equal(got.counts, want.counts) and got.absmax == want.absmax and got.count == want.count
    for name in info.activations:
        if name != "relu1":
            assert np.array_equal(fast.histogram(name).counts, slow.histogram(name).counts), name


def test_capture_session_settings_change_no_value(tiny_model, tiny_data):
    from calib.data.arrays import load_array
    from calib.quantize.model import inspect_model
    from calib.runners.onnxruntime import OrtRunner

    acts = list(inspect_model(tiny_model).activations)
    x = {"input": load_array(tiny_data)[:6]}
    want = OrtRunner(tiny_model, expose=acts).run(x)
    for _ in range(2):  # the lean arena is registered once per process; a second session shares it
        got = OrtRunner(tiny_model, expose=acts, spin=False, lean=True).run(x)
        assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)


def _reference(x, inv_width, nbins, signed):
    """Plain numpy answer of calib.stats.kernels.abs_histogram, in float64."""
    x = x.astype(np.float64)
    fin = x[np.isfinite(x)]
    k = np.minimum(np.floor(np.abs(fin) * inv_width), nbins - 1).astype(np.int64)
    if signed:
        k = k + np.where(fin < 0, nbins, 0)
    counts = np.bincount(k, minlength=2 * nbins if signed else nbins)
    if fin.size == 0:
        return counts, np.inf, -np.inf, 0.0, x.size
    return counts, fin.min(), fin.max(), np.abs(fin).max(), x.size - fin.size


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("nchunks", [1, 2, 3])
def test_histogram_kernel_matches_numpy_on_hard_values(signed, nchunks):
    from calib.stats.kernels import abs_histogram, range_stats

    rng = np.random.default_rng(7)
    x = (rng.laplace(size=10_007) * 0.3).astype(np.float32)  # not a multiple of the block or the chunks
    x[::11] = 0.0
    x[5::13] = -0.0
    x[3], x[50], x[5000], x[9999] = np.nan, np.inf, -np.inf, np.float32(3e38)
    x[7], x[8] = np.float32(1e-45), np.float32(-1e-40)  # subnormals
    for inv_width in (2.0 ** 8, 2.0 ** -3, 2.0 ** 149, 2.0 ** 130):
        got = abs_histogram(x, inv_width, 2048, nchunks, signed)
        want = _reference(x, inv_width, 2048, signed)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:] == want[1:]
        assert range_stats(x, nchunks) == (want[1], want[2], want[3], want[4])
    nan = np.full(100, np.nan, np.float32)
    assert abs_histogram(nan, 1.0, 16, nchunks, signed)[1:] == (np.inf, -np.inf, 0.0, 100)
    assert range_stats(nan, nchunks) == (np.inf, -np.inf, 0.0, 100)
    with pytest.raises(ValueError, match="float32"):
        abs_histogram(x.astype(np.float64), 1.0, 16, nchunks, signed)


def _grid_reference(v, w, nbins=2048):
    return np.bincount(np.minimum((v / np.float32(w)).astype(np.int64), nbins - 1), minlength=nbins)


def test_grid_histogram_and_zero_count_against_numpy():
    from calib.stats.kernels import grid_histogram, histogram_pass

    rng = np.random.default_rng(3)
    x = (rng.standard_normal(300_001) * 3).astype(np.float32)
    x[::97] = 0.0
    x[1], x[2], x[3], x[4] = np.inf, -np.inf, np.nan, -0.0
    fin = x[np.isfinite(x)]
    w = np.float32(12.0 / 2048)
    views = ((-1.0, np.inf, np.abs(fin)), (0.0, 6.0, np.clip(fin, np.float32(0), np.float32(6))))
    for lo, hi, v in views:
        for chunks in (1, 2):
            assert (grid_histogram(x, float(w), lo, hi, 2048, chunks) == _grid_reference(v, w)).all()
    # the one-read pass: the same |x| histogram as abs_histogram, both grids, the exact zeros
    gw = np.array([float(w), float(w) / 2])
    glo, ghi = np.array([-1.0, 0.0]), np.array([np.inf, 6.0])
    for chunks in (1, 2, 3):
        counts, grids, mn, mx, amax, bad, zeros = histogram_pass(x, 2.0 ** 6, 2048, True, gw, glo, ghi, 2048, chunks)
        want = _reference(x, 2.0 ** 6, 2048, True)
        np.testing.assert_array_equal(counts, want[0])
        assert (mn, mx, amax, bad) == want[1:]
        assert (grids[0] == _grid_reference(views[0][2], gw[0])).all()
        assert (grids[1] == _grid_reference(views[1][2], gw[1])).all()
        assert zeros == int((x == 0).sum())


def test_collector_keeps_tensorrt_grids_as_tensorrt_does():
    """TensorRT's grid of a tensor and of the Relu6 output counted from it, over batches that grow past the range,
    one batch of zeros and non-finite values: the range from the first batch, the width doubled while a batch holds
    a value past it, each batch counted on the grid it ends with."""
    from calib.stats.histogram import HistogramCollector

    rng = np.random.default_rng(11)
    batches = [(rng.standard_normal(70_000) * s).astype(np.float32) for s in (1.0, 3.0, 0.5, 9.0)]
    batches.insert(2, np.zeros(5000, np.float32))
    batches[3][:3] = (np.nan, np.inf, -np.inf)
    first = batches[0]
    col = HistogramCollector(signed=frozenset({"x"}))
    col.trt_first = {"x": float(np.abs(first).max()), "y": float(min(max(first.max(), 0), 6.0))}
    col.trt_derived = {"x": [("y", 6.0)]}
    for b in batches:
        col.update("x", b)
        col.first = False
    col.derive("y", "x", 6.0)

    def reference(view, start):
        w, counts = start / 2048, np.zeros(2048, np.int64)
        for b in batches:
            v = view(b[np.isfinite(b)])
            while v.size and v.max() > 2048 * w:
                counts = np.concatenate([counts.reshape(-1, 2).sum(axis=1), np.zeros(1024, np.int64)])
                w *= 2.0
            counts += _grid_reference(v, w)
        return w, counts

    for name, view in (("x", np.abs), ("y", lambda v: np.clip(v, np.float32(0), np.float32(6)))):
        w, counts = reference(view, col.trt_first[name])
        g = col.histogram(name).trt
        assert g.width == w and (g.counts == counts).all(), name
    assert col.histogram("x").zeros == sum(int((b == 0).sum()) for b in batches)


def test_update_with_the_range_given_counts_the_same():
    """The first batch's range, read once for TensorRT's grid ranges, is handed to the collector's first update
    of the tensor instead of being read again: the same statistics, with and without TensorRT's grids."""
    from calib.stats.kernels import range_stats

    rng = np.random.default_rng(11)
    batches = [rng.standard_normal(70_000).astype(np.float32) * s for s in (1.0, 3.0, 0.5)]
    for trt in (False, True):
        a = HistogramCollector(signed=frozenset({"t"}))
        b = HistogramCollector(signed=frozenset({"t"}))
        if trt:
            a.trt_first = b.trt_first = {"t": float(np.abs(batches[0]).max())}
        for i, x in enumerate(batches):
            a.update("t", x)
            b.update("t", x, range_stats(x, 1) if i == 0 else None)
        ha, hb = a.histogram("t"), b.histogram("t")
        assert np.array_equal(ha.counts, hb.counts) and np.array_equal(ha.neg, hb.neg)
        assert (ha.width, ha.min, ha.max, ha.absmax, ha.count, ha.zeros) == (hb.width, hb.min, hb.max, hb.absmax,
                                                                             hb.count, hb.zeros)
        assert (ha.trt is None) == (not trt) and (not trt or np.array_equal(ha.trt.counts, hb.trt.counts))
