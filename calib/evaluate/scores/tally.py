"""Per-sample scores of each configuration against FP32, batch by batch, and their figures with intervals:
strings (exact_match_vs_fp32, cer_vs_fp32), vectors (mean_cosine, min_cosine) and the user's metric (named after
its function)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calib.evaluate import uncertainty as u
from calib.evaluate.scores.text import compare


def cosines(ref, test) -> np.ndarray:
    r = np.asarray(ref, np.float64).reshape(len(ref), -1)
    t = np.asarray(test, np.float64).reshape(len(test), -1)
    if r.shape != t.shape:
        from calib.errors import DataError

        raise DataError(f"vectors of FP32 {list(r.shape)} and of INT8 {list(t.shape)} differ in shape")
    dot, rr, tt = (r * t).sum(1), (r * r).sum(1), (t * t).sum(1)
    den = np.sqrt(rr * tt)
    return np.where(den > 0, dot / np.where(den > 0, den, 1.0), np.where(rr == tt, 1.0, 0.0))


@dataclass
class ScoreTally:
    """kind: 'text' (the hook gives strings), 'vectors' (it gives [N, D] compared by cosine) or None; metric: a
    calib.evaluate.scores.user.Metric or None."""

    kind: str | None = None
    metric: object = None
    parts: dict = field(default_factory=dict)  # name -> {figure part: [arrays per batch]}

    def _keep(self, name: str, **arrays) -> None:
        d = self.parts.setdefault(name, {})
        for k, v in arrays.items():
            d.setdefault(k, []).append(np.asarray(v))

    def update(self, name: str, ref_post, test_post, ref_in, test_in, n: int) -> None:
        """One configuration's batch: the hook's results (ref_post, test_post) where it gives strings or vectors,
        and the outputs the user's metric takes (ref_in, test_in)."""
        if self.kind == "text":
            exact, edits, lens = compare(list(ref_post), list(test_post))
            self._keep(name, exact=exact, edits=edits, lens=lens)
        elif self.kind == "vectors":
            self._keep(name, cos=cosines(ref_post, test_post))
        if self.metric is not None:
            self._keep(name, user=self.metric(ref_in, test_in, n))

    def _all(self, name: str, key: str) -> np.ndarray:
        got = self.parts.get(name, {}).get(key)
        return np.concatenate(got) if got else np.zeros(0)

    def entry(self, name: str) -> dict:
        """The configuration's task figures (point values) for report.json."""
        out: dict = {}
        if self.kind == "text":
            exact, edits, lens = (self._all(name, k) for k in ("exact", "edits", "lens"))
            out.update(exact_match_vs_fp32=float(exact.mean()) if exact.size else None,
                       cer_vs_fp32=float(edits.sum() / max(lens.sum(), 1)) if exact.size else None,
                       samples=int(exact.size))
        elif self.kind == "vectors":
            c = self._all(name, "cos")
            out.update(mean_cosine=float(c.mean()) if c.size else None, min_cosine=float(c.min()) if c.size else None,
                       samples=int(c.size))
        if self.metric is not None:
            x = self._all(name, "user")
            out[self.metric.key] = float(x.mean()) if x.size else None
            out.setdefault("samples", int(x.size))
        return out

    def figures(self, name: str, groups=None) -> tuple[dict, dict]:
        figs, reps = {}, {}

        def g(n):
            return groups if groups is not None and len(groups) == n else None

        def extra(n):
            gc = u.group_codes(g(n))
            return {"groups": gc[1]} if gc else {}

        def mean(key, x):
            x = np.asarray(x, np.float64)
            if x.size:
                reps[key] = u.replicates(u.mean_metric(x), x.size, groups=g(x.size))
                figs[key] = u.figure(x.mean(), reps[key], x.size, **extra(x.size))

        if self.kind == "text":
            exact, edits, lens = (self._all(name, k) for k in ("exact", "edits", "lens"))
            mean("exact_match_vs_fp32", exact)
            if exact.size:
                e, n = edits.astype(np.float64), lens.astype(np.float64)
                reps["cer_vs_fp32"] = u.replicates(lambda w: (w @ e) / np.maximum(w @ n, 1.0), e.size,
                                                   groups=g(e.size))
                figs["cer_vs_fp32"] = u.figure(e.sum() / max(n.sum(), 1.0), reps["cer_vs_fp32"], e.size,
                                               **extra(e.size))
        elif self.kind == "vectors":
            mean("mean_cosine", self._all(name, "cos"))
        if self.metric is not None:
            mean(self.metric.key, self._all(name, "user"))
        return figs, reps

    def primary(self) -> str | None:
        if self.metric is not None:
            return self.metric.key
        return {"text": "exact_match_vs_fp32", "vectors": "mean_cosine"}.get(self.kind)
