"""How sure a figure is: bootstrap 95 % intervals over samples, paired comparisons, McNemar's exact test.

Numpy only and deterministic: every replicate set is drawn from the same seeded generator, so two
configurations evaluated on the same samples get the same resamples, and the difference of their replicates is
a paired bootstrap of their difference. A metric is a function of per-sample weights (how many times each
sample is drawn): a mean is `w @ x / w.sum()`, a ratio of sums `(w @ a) / (w @ b)`, mAP re-accumulates each
image's box matches `w` times.

Samples that are not independent (crops of the same photo) carry a group: the bootstrap then draws groups with
replacement (a cluster bootstrap) and every sample of a drawn group gets its group's count as weight, so the
interval reflects the number of independent photos rather than the number of crops. McNemar's test becomes the
clustered form of Durkalski et al. (2003), which reduces to the plain statistic when every group holds one sample.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

RESAMPLES = 1000
SEED = 0
LEVEL = 0.95
_CHUNK_VALUES = 1 << 21  # weights held at once: resamples per chunk x samples


def group_codes(groups) -> tuple[np.ndarray, int] | None:
    """Group labels per sample -> (code per sample in 0..G-1, in order of first appearance; G), or None when
    every sample is its own group (or no groups are given): the plain bootstrap applies."""
    if groups is None:
        return None
    codes, seen = [], {}
    for g in groups:
        codes.append(seen.setdefault(g, len(seen)))
    if len(seen) == len(codes):
        return None
    return np.asarray(codes, np.int64), len(seen)


def weight_chunks(n: int, resamples: int = RESAMPLES, seed: int = SEED, groups=None) -> Iterator[np.ndarray]:
    """Bootstrap weights [b, n], `resamples` rows in all, in chunks: multinomial counts summing to n, or with
    `groups` (one label per sample) each sample weighted by how many times its group is drawn among G draws."""
    rng = np.random.default_rng(seed)
    gc = group_codes(groups)
    if gc is not None and len(gc[0]) != n:
        raise ValueError(f"{len(gc[0])} group labels for {n} samples")
    m = n if gc is None else gc[1]
    step = max(1, _CHUNK_VALUES // max(m, n, 1))
    for lo in range(0, resamples, step):
        b = min(step, resamples - lo)
        idx = rng.integers(0, m, size=(b, m)) + (np.arange(b) * m)[:, None]
        w = np.bincount(idx.reshape(-1), minlength=b * m).reshape(b, m).astype(np.float64)
        yield w if gc is None else w[:, gc[0]]


def replicates(metric: Callable[[np.ndarray], np.ndarray], n: int, resamples: int = RESAMPLES,
               seed: int = SEED, groups=None) -> np.ndarray:
    """metric(weights [b, n]) -> [b] over all bootstrap resamples of n samples (of their groups, where given):
    an array [resamples]."""
    if n == 0:
        return np.zeros(0)
    return np.concatenate([np.asarray(metric(w), np.float64).reshape(-1)
                           for w in weight_chunks(n, resamples, seed, groups)])


def percentile_interval(reps: np.ndarray, level: float = LEVEL) -> tuple[float, float] | None:
    """The percentile interval of bootstrap replicates (NaN replicates left out; infinities kept in order)."""
    r = np.sort(np.asarray(reps, np.float64)[~np.isnan(reps)])
    if r.size == 0:
        return None
    a = (1.0 - level) / 2.0
    lo = r[int(math.floor(a * (r.size - 1)))]
    hi = r[int(math.ceil((1.0 - a) * (r.size - 1)))]
    return float(lo), float(hi)


def figure(value, reps: np.ndarray | None, n: int, **extra) -> dict:
    """A reported figure: point estimate, 95 % interval and the number of samples behind it."""
    ci = percentile_interval(reps) if reps is not None and len(reps) else None
    return {"value": None if value is None else float(value), "ci95": list(ci) if ci else None, "n": int(n), **extra}


# metrics as functions of bootstrap weights

def mean_metric(x: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    x = np.asarray(x, np.float64)
    return lambda w: (w @ x) / np.maximum(w.sum(1), 1e-300)


def sqnr_metric(signal: np.ndarray, noise: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """10 log10(sum ref^2 / sum (ref - test)^2) over the drawn samples."""
    s, d = np.asarray(signal, np.float64), np.asarray(noise, np.float64)

    def f(w):
        with np.errstate(divide="ignore", invalid="ignore"):  # a NaN sample makes the figure NaN, said elsewhere
            ss, dd = w @ s, w @ d
            return np.where(dd == 0, np.inf, 10.0 * np.log10(ss / dd))
    return f


def cosine_metric(dot: np.ndarray, ref_sq: np.ndarray, test_sq: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    rt, rr, tt = (np.asarray(v, np.float64) for v in (dot, ref_sq, test_sq))

    def f(w):
        with np.errstate(divide="ignore", invalid="ignore"):
            num, den = w @ rt, np.sqrt((w @ rr) * (w @ tt))
            return np.where(den == 0, 1.0, num / den)
    return f


def mean_interval(x, resamples: int = RESAMPLES, seed: int = SEED, groups=None) -> dict:
    x = np.asarray(x, np.float64)
    reps = replicates(mean_metric(x), x.size, resamples, seed, groups)
    gc = group_codes(groups)
    return figure(x.mean() if x.size else None, reps, x.size, **({"groups": gc[1]} if gc else {}))


# paired comparisons

def binom_two_sided(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n fair coin flips (twice the smaller tail, at most 1)."""
    if n == 0:
        return 1.0
    k = min(k, n - k)
    ks = np.arange(k + 1)
    logs = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in ks]) - n * math.log(2)
    return float(min(1.0, 2.0 * np.exp(logs).sum()))


def mcnemar(a_right, b_right, exact_below: int = 1000) -> dict:
    """McNemar's test on paired 0/1 outcomes of two configurations on the same samples.

    Discordant pairs: b = a right and b wrong, c = a wrong and b right. Exact binomial (b ~ Bin(b + c, 1/2)) when
    b + c < `exact_below`, else the chi-square statistic with continuity correction (1 degree of freedom)."""
    a, b = np.asarray(a_right, bool), np.asarray(b_right, bool)
    if a.shape != b.shape:
        raise ValueError(f"McNemar needs paired samples, got {a.size} and {b.size}")
    n01, n10 = int((a & ~b).sum()), int((~a & b).sum())
    m = n01 + n10
    if m < exact_below:
        p, method = binom_two_sided(n01, m), "McNemar exact binomial"
    else:
        chi2 = (abs(n01 - n10) - 1.0) ** 2 / m
        p, method = math.erfc(math.sqrt(chi2 / 2.0)), "McNemar chi-square (continuity corrected)"
    return {"a_only": n01, "b_only": n10, "p_value": p, "method": method}


def mcnemar_clustered(a_right, b_right, groups) -> dict:
    """McNemar's test for paired 0/1 outcomes in groups of dependent samples (Durkalski et al. 2003):
    X = (sum_k (b_k - c_k))^2 / sum_k (b_k - c_k)^2 over groups k, b_k / c_k the group's discordant pairs each way,
    chi-square with 1 degree of freedom. With one sample per group it is the plain McNemar statistic (without
    continuity correction); mcnemar() is used then."""
    gc = group_codes(groups)
    if gc is None:
        return mcnemar(a_right, b_right)
    a, b = np.asarray(a_right, bool), np.asarray(b_right, bool)
    if a.shape != b.shape or a.size != gc[0].size:
        raise ValueError(f"clustered McNemar needs paired samples and a group each, got {a.size}, {b.size} and "
                         f"{gc[0].size}")
    d = np.bincount(gc[0], weights=(a & ~b).astype(np.float64) - (~a & b), minlength=gc[1])
    den = float((d ** 2).sum())
    if den == 0:
        p = 1.0
    else:
        chi2 = float(d.sum()) ** 2 / den
        p = math.erfc(math.sqrt(chi2 / 2.0))
    return {"a_only": int((a & ~b).sum()), "b_only": int((~a & b).sum()), "p_value": min(1.0, p),
            "method": f"clustered McNemar (Durkalski, {gc[1]} groups)"}


def paired_difference(reps_a: np.ndarray, reps_b: np.ndarray, value_a, value_b, n: int) -> dict:
    """Paired bootstrap of metric(a) - metric(b) from replicates drawn with the same weights."""
    with np.errstate(invalid="ignore"):
        d = np.asarray(reps_a, np.float64) - np.asarray(reps_b, np.float64)
    d = d[~np.isnan(d)]
    diff = None if value_a is None or value_b is None else float(value_a) - float(value_b)
    ci = percentile_interval(d) if d.size else None
    if d.size:
        p = min(1.0, 2.0 * min(float((d <= 0).mean()), float((d >= 0).mean())))
    else:
        p = 1.0
    return {"diff": diff, "ci95": list(ci) if ci else None, "n": int(n), "p_value": p, "method": "paired bootstrap",
            "significant": bool(ci is not None and (ci[0] > 0 or ci[1] < 0))}
