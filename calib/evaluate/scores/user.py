"""The user's own comparison, `--metric FILE.py:FUNCTION` (recipe `evaluation.metric`): FUNCTION(fp32, int8)
takes a batch of FP32's outputs and one configuration's ({name: array [N, ...]}, samples first) and returns one
score per sample, higher is better; the report names the figure after the function and ranks the configurations
on it."""
from __future__ import annotations

import numpy as np

from calib.errors import DataError, ModelError

RESERVED = ("agreement_top1", "agreement_top5", "top1", "top5", "map50_95_vs_fp32", "map50_vs_fp32",
            "map50_95_labels", "map50_labels", "recall_vs_fp32", "recall_labels", "mean_cosine", "min_cosine",
            "exact_match_vs_fp32", "cer_vs_fp32", "min_output_sqnr_db", "drop")


class Metric:
    def __init__(self, hook, flag: str = "--metric"):
        self.hook, self.label = hook, hook.label
        self.key = hook.func
        if self.key in RESERVED or self.key.endswith(("_sqnr_db", "_cosine")):
            raise ModelError(f"{flag} {hook.label}: '{self.key}' is a figure calib reports already; name the "
                             "function otherwise")

    def describe(self) -> str:
        return f"metric {self.hook.path.name}:{self.hook.func}"

    def __call__(self, ref, test, n: int) -> np.ndarray:
        try:
            got = self.hook.fn(ref, test)
        except Exception as exc:  # the user's code: one line naming it
            raise DataError(f"{self.label} raised {type(exc).__name__}: {exc}") from None
        try:
            x = np.asarray(got, np.float64).reshape(-1)
        except (TypeError, ValueError):
            x = None
        if x is None or x.size != n or np.ndim(got) > 1 and np.shape(got)[0] != n:
            shape = list(np.shape(got)) if x is not None else type(got).__name__
            raise DataError(f"{self.label} returned {shape}: expected {n} scores, one per sample of the batch")
        if not np.all(np.isfinite(x)):
            raise DataError(f"{self.label} returned NaN or Inf for sample(s) "
                            f"{np.flatnonzero(~np.isfinite(x))[:5].tolist()} of a batch")
        return x


def load_metric(text: str, flag: str = "--metric") -> Metric:
    from calib.evaluate.postprocess import load

    return Metric(load(text, flag), flag)
