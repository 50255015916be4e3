"""Streaming, mergeable, bounded-memory statistics of every calibrated tensor.

Each tensor keeps its exact min/max/absmax and a histogram of |x| with a fixed number of bins whose width is
a power of two. When a larger value arrives the width doubles and neighbouring bins are summed, which is exact:
the final histogram is the same whatever the batch size or order, and two collectors merge exactly. Told each
tensor's absmax over the first calibration batch (`trt_first`), a collector also keeps TensorRT's own 2048-bin
histogram of it (TrtGrid), which depends on that first batch as EntropyCalibration2's does.
Memory per tensor is `nbins` int64 counts, independent of the number of samples.

A tensor read by a Relu or Clip(0, hi) can also keep the counts of its negative values; the activation's
histogram then follows from it (`derive_relu`) without a pass over the activation's own values: negative values
go to the bin of 0 and values past hi to the bin of hi, so the derived counts are those a direct pass would give
at the input's bin width (which is the same or coarser than the output's own).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

DEFAULT_BINS = 1 << 14


def _exponent_for(absmax: float, nbins: int) -> int:
    """Smallest e with nbins * 2**e > absmax (so absmax falls inside the last bins, not past them)."""
    if absmax <= 0.0 or not math.isfinite(absmax):
        return -149
    m, e = math.frexp(absmax / nbins)  # absmax/nbins = m * 2**e, 0.5 <= m < 1
    return e


TRT_BINS = 2048


@dataclass
class TrtGrid:
    """TensorRT's own histogram of a tensor (EntropyCalibration2, 8.6): `nbins` bins of `width`, the width set to
    the first calibration batch's absmax / nbins and doubled (neighbouring bins summed) while a later batch holds a
    value past the range; a value at the top edge lands in the last bin. lo < 0: the bins count |x|; else they
    count x clipped to [lo, hi] (a Relu/Clip output counted while its input is read)."""

    width: float | None  # None until a batch with a non-zero value arrives
    counts: np.ndarray
    lo: float = -1.0
    hi: float = math.inf

    def fit(self, top: float, first: float, size: int) -> bool:
        """Set the range for a batch whose largest value (of this view) is `top`, `first` the first batch's absmax
        of the view (the range TensorRT starts from). False while there is no range yet: the batch's `size` values
        are all zero, and counted in bin 0 here."""
        if self.width is None:
            start = first if first > 0.0 else top
            if start <= 0.0:  # all zeros so far: bin 0, whatever the width will be
                self.counts[0] += size
                return False
            self.width = start / self.counts.size
        while top > self.counts.size * self.width:
            self.counts = _halve(self.counts)
            self.width *= 2.0
        return True

    def fits(self, top: float) -> bool:
        return self.width is not None and top <= self.counts.size * self.width

    def add(self, flat: np.ndarray, top: float, first: float) -> None:
        """Count `flat` (float32, 1-D); `top` is the largest value this view of it holds, `first` the first
        batch's absmax of the view."""
        from calib.stats.kernels import grid_histogram

        if self.fit(top, first, flat.size):
            chunks = chunks_for(flat.size)
            self.counts += grid_histogram(flat, self.width, self.lo, self.hi, self.counts.size, chunks)


@dataclass
class Histogram:
    """Histogram of |x|: counts[i] holds values in [i*width, (i+1)*width)."""

    counts: np.ndarray
    width: float
    absmax: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    count: int = 0
    nonfinite: int = 0
    neg: np.ndarray | None = None  # counts of the negative values alone (same bins), when kept
    zeros: int = 0  # exact zeros among the counted values (bin 0 holds them and the small values alike)
    first_absmax: float | None = None  # absmax and max of the first batch alone: TensorRT sets its histogram's
    first_max: float | None = None  # range from its first calibration batch (calib.algorithms.entropy)
    trt: TrtGrid | None = None  # TensorRT's own 2048-bin histogram, when the collector was told the first batch

    @property
    def nbins(self) -> int:
        return int(self.counts.size)

    @property
    def edges(self) -> np.ndarray:
        return np.arange(self.nbins + 1, dtype=np.float64) * self.width

    def resample(self, nbins: int, top: float) -> np.ndarray:
        """Counts re-binned into `nbins` equal bins over [0, top], splitting fine bins linearly.

        Values above `top` are added to the last bin."""
        cum = np.concatenate([[0.0], np.cumsum(self.counts, dtype=np.float64)])
        targets = np.linspace(0.0, top, nbins + 1)
        at = np.interp(targets, self.edges, cum)
        at[-1] = cum[-1]
        return np.diff(at)

    def coarsen_to(self, width: float) -> None:
        """Double the bin width until it equals `width` (a power-of-two multiple of the current one)."""
        while self.width < width:
            self.counts = _halve(self.counts)
            if self.neg is not None:
                self.neg = _halve(self.neg)
            self.width *= 2.0

    def derive_relu(self, hi: float) -> "Histogram":
        """The histogram of min(max(x, 0), hi) for the x this histogram counted (needs `neg`)."""
        if self.neg is None:
            raise ValueError("derive_relu needs the counts of the negative values")
        y = self.counts - self.neg
        y[0] += int(self.neg.sum())
        if hi < self.nbins * self.width:
            k = int(hi / self.width)
            y[k] += int(y[k + 1:].sum())
            y[k + 1:] = 0
        mn, mx = min(max(self.min, 0.0), hi), min(max(self.max, 0.0), hi)
        absmax = mx if self.min <= self.max else 0.0
        first = None if self.first_max is None else min(max(self.first_max, 0.0), hi)
        zeros = self.zeros + int(self.neg.sum())  # Relu makes every negative value an exact zero
        return Histogram(y, self.width, absmax, mn, mx, self.count, self.nonfinite, zeros=zeros,
                         first_absmax=first, first_max=first)


    def merge(self, other: "Histogram") -> "Histogram":
        if other.nbins != self.nbins:
            raise ValueError("cannot merge histograms with different bin counts")
        keep = self.neg is not None and other.neg is not None
        a = Histogram(self.counts.copy(), self.width, self.absmax, self.min, self.max, self.count, self.nonfinite,
                      self.neg.copy() if keep else None)
        b = Histogram(other.counts.copy(), other.width, other.absmax, other.min, other.max, other.count,
                      other.nonfinite, other.neg.copy() if keep else None)
        w = max(a.width, b.width)
        a.coarsen_to(w)
        b.coarsen_to(w)
        a.counts += b.counts
        if keep:
            a.neg += b.neg
        a.absmax = max(a.absmax, b.absmax)
        a.min = min(a.min, b.min)
        a.max = max(a.max, b.max)
        a.count += b.count
        a.nonfinite += b.nonfinite
        a.zeros = self.zeros + other.zeros
        a.trt = _merge_grids(self.trt, other.trt)
        first = self if self.first_absmax is not None else other  # the collector that saw the first batch
        a.first_absmax, a.first_max = first.first_absmax, first.first_max
        return a


def _merge_grids(a: TrtGrid | None, b: TrtGrid | None) -> TrtGrid | None:
    """Two TensorRT grids summed when one width is a power-of-two multiple of the other (else None: the grids
    do not align, as when two workers saw different first batches)."""
    if a is None or b is None:
        return a if b is None else b
    if a.width is None or b.width is None:  # one saw only zeros so far: its counts are all in bin 0
        some, zeros = (b, a) if a.width is None else (a, b)
        out = TrtGrid(some.width, some.counts.copy(), some.lo, some.hi)
        out.counts[0] += zeros.counts[0]
        return out
    small, big = (a, b) if a.width <= b.width else (b, a)
    ratio = big.width / small.width
    if ratio != 2.0 ** round(math.log2(ratio)) or small.counts.size != big.counts.size:
        return None
    out = TrtGrid(small.width, small.counts.copy(), small.lo, small.hi)
    while out.width < big.width:
        out.counts = _halve(out.counts)
        out.width *= 2.0
    out.counts = out.counts + big.counts
    return out


def _top(hi: float | None, rng) -> float:
    """The largest value a view holds, from (min, max, absmax) of the batch: |x| (hi None) or x clipped to
    [0, hi]."""
    return float(rng[2]) if hi is None else min(max(float(rng[1]), 0.0), hi)


def _halve(c: np.ndarray) -> np.ndarray:
    """Pairs of neighbouring bins summed into the lower half; the upper half is empty."""
    return np.concatenate([c.reshape(-1, 2).sum(axis=1), np.zeros(c.size // 2, np.int64)])


def chunks_for(size: int) -> int:
    """Parallel chunks for a compiled loop over `size` values: the cores numba uses, or one for a small array."""
    if size <= (1 << 16):
        return 1
    import numba

    return max(1, numba.get_num_threads())


@dataclass
class HistogramCollector:
    """Collects per-tensor statistics: update(name, array), merge(other), histogram(name).

    Tensors named in `signed` also keep the counts of their negative values (for `derive_relu`)."""

    nbins: int = DEFAULT_BINS
    hists: dict = field(default_factory=dict)
    signed: frozenset = frozenset()
    first: bool = True  # the updates belong to the first calibration batch (collect clears it after that batch)
    trt_first: dict = field(default_factory=dict)  # tensor -> first batch's absmax: keep TensorRT's grid for it
    trt_derived: dict = field(default_factory=dict)  # read tensor -> [(Relu/Clip output, hi)] counted from it
    trt_pending: dict = field(default_factory=dict)  # derived output -> its TrtGrid, until derive()

    def update(self, name: str, array: np.ndarray, ranged: tuple | None = None) -> None:
        """One read of the values in the common case (they fit the bins kept so far): the |x| histogram,
        TensorRT's grids of this tensor and of the Relu/Clip outputs counted from it, and the zero count; a
        second one when a value is past a range (the bins are widened, then the batch is counted again).
        ranged: calib.stats.kernels.range_stats of these very values, when the caller has it already."""
        from calib.stats.kernels import range_stats

        flat = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)  # TensorRT calibrates float32 values
        if flat.size == 0:
            return
        chunks = chunks_for(flat.size)
        h = self.hists.get(name)
        known = None
        if h is None:  # the first batch of this tensor: its range first, then the bins to fit it
            known = ranged if ranged is not None else range_stats(flat, chunks)
            h = Histogram(np.zeros(self.nbins, np.int64), 2.0 ** _exponent_for(known[2], self.nbins),
                          neg=np.zeros(self.nbins, np.int64) if name in self.signed else None)
            self.hists[name] = h
        views = self._views(name, known)
        if known is not None:
            views = [(g, first, hi) for g, first, hi in views if g.fit(_top(hi, known), first, flat.size)]
        later = [v for v in views if v[0].width is None]  # no range yet: counted on their own, after the pass
        views = [v for v in views if v[0].width is not None]
        out = self._pass(flat, h, views, chunks)
        rng = out[2:5]
        if rng[0] <= rng[1] and (rng[2] >= self.nbins * h.width
                                 or not all(g.fits(_top(hi, rng)) for g, _, hi in views)):
            h.coarsen_to(2.0 ** _exponent_for(max(float(rng[2]), h.absmax), self.nbins))
            for g, first, hi in views:
                g.fit(_top(hi, rng), first, flat.size)
            out = self._pass(flat, h, views, chunks)
        counts, grids, mn, mx, amax, bad, zeros = out
        if h.neg is not None:
            neg = counts[self.nbins:]
            counts = counts[:self.nbins] + neg
            h.neg += neg
        h.counts += counts
        if mn <= mx:
            for (g, _, _), row in zip(views, grids):
                g.counts += row
            for g, first, hi in later:
                g.add(flat, _top(hi, (mn, mx, amax)), first)
            h.absmax = max(h.absmax, float(amax))
            h.min = min(h.min, float(mn))
            h.max = max(h.max, float(mx))
            if self.first:
                h.first_absmax = max(h.first_absmax or 0.0, float(amax))
                h.first_max = float(mx) if h.first_max is None else max(h.first_max, float(mx))
        h.zeros += int(zeros)
        h.count += int(flat.size) - int(bad)
        h.nonfinite += int(bad)

    def _views(self, name: str, known) -> list:
        """(TensorRT grid, first batch's absmax, hi) for this tensor's own |x| grid (hi None) and for each Relu/Clip
        output counted from it (x clipped to [0, hi]); none for a first batch without a finite value."""
        if known is not None and not known[0] <= known[1]:
            return []
        views = []
        if name in self.trt_first:
            h = self.hists[name]
            if h.trt is None:
                h.trt = TrtGrid(None, np.zeros(TRT_BINS, np.int64))
            views.append((h.trt, self.trt_first[name], None))
        for y, hi in self.trt_derived.get(name, ()):
            g = self.trt_pending.get(y)
            if g is None:
                g = self.trt_pending[y] = TrtGrid(None, np.zeros(TRT_BINS, np.int64), 0.0, hi)
            views.append((g, self.trt_first.get(y, 0.0), hi))
        return views

    def _pass(self, flat: np.ndarray, h: Histogram, views: list, chunks: int):
        from calib.stats.kernels import histogram_pass

        gw = np.array([g.width for g, _, _ in views], np.float64)
        glo = np.array([g.lo for g, _, _ in views], np.float64)
        ghi = np.array([g.hi for g, _, _ in views], np.float64)
        return histogram_pass(flat, 1.0 / h.width, int(self.nbins), h.neg is not None, gw, glo, ghi, TRT_BINS, int(chunks))

    def derive(self, name: str, source: str, hi: float) -> None:
        """Set `name`'s histogram to that of min(max(source, 0), hi) (source must be in `signed`)."""
        self.hists[name] = self.hists[source].derive_relu(hi)
        self.hists[name].trt = self.trt_pending.get(name)

    def merge(self, other: "HistogramCollector") -> "HistogramCollector":
        """Both collectors' statistics, as one collector fed both's batches would hold them (`self` first: the
        first batch's ranges are taken from the one that saw it). TensorRT's grids, the Relu/Clip outputs' ones
        too, merge where they start from the same first batch (calib.calibrate.collect tells every shard)."""
        out = HistogramCollector(self.nbins, signed=self.signed | other.signed, first=self.first and other.first,
                                 trt_first={**other.trt_first, **self.trt_first},
                                 trt_derived={**other.trt_derived, **self.trt_derived})
        for name in set(self.trt_pending) | set(other.trt_pending):
            a, b = self.trt_pending.get(name), other.trt_pending.get(name)
            out.trt_pending[name] = _merge_grids(a, b)
        for name in set(self.hists) | set(other.hists):
            a, b = self.hists.get(name), other.hists.get(name)
            if a is not None and b is not None:
                out.hists[name] = a.merge(b)
            else:
                h = a or b
                empty = Histogram(np.zeros(self.nbins, np.int64), h.width,
                                  neg=None if h.neg is None else np.zeros(self.nbins, np.int64))
                out.hists[name] = h.merge(empty)
        return out

    def names(self) -> list[str]:
        return list(self.hists)

    def histogram(self, name: str) -> Histogram:
        return self.hists[name]

    def absmax(self, name: str) -> float:
        return self.hists[name].absmax
