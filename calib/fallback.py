"""Per-layer sensitivity on the CPU INT8 simulation, and the search for the fewest layers to keep in higher
precision so that the accuracy drop stays within a budget.

Every configuration is "the Q/DQ model with these layers left in float"; its score against FP32 is computed on
a fixed evaluation subset whose FP32 outputs are computed once, and every score is cached by the set of layers,
so the greedy pass and the bisection reuse what the ranking already measured.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import onnx

from calib.evaluate.detect import DetectionTally
from calib.evaluate.metrics import Classification, TensorStats
from calib.progress import bar
from calib.qdq import Exclusions, insert_qdq, quantized_inputs
from calib.recipe import DetectionSpec
from calib.runners.onnxruntime import OrtRunner

log = logging.getLogger(__name__)
METRICS = ("top1_agreement", "map50", "output_sqnr")


def quantizable_layers(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes that get Q/DQ inputs, in graph order (an unnamed node goes by its first output)."""
    seen = []
    for ni, _, _ in quantized_inputs(model):
        node = model.graph.node[ni]
        name = node.name or node.output[0]
        if name not in seen:
            seen.append(name)
    return seen


@dataclass
class Scorer:
    """Scores Q/DQ variants of one model against FP32 on fixed batches; results cached per set of float layers."""

    model: onnx.ModelProto
    amax: dict
    batches: list  # [(feed dict, letterboxes)]
    metric: str
    detection: DetectionSpec = DetectionSpec()
    cache: dict = field(default_factory=dict)
    runs: int = 0

    def __post_init__(self):
        if self.metric not in METRICS:
            from calib.errors import CalibError

            raise CalibError(f"unknown budget metric '{self.metric}' (choose from {', '.join(METRICS)})")
        ref = OrtRunner(self.model)
        self.outputs = ref.output_names()
        self.ref = [ref.run(feed) for feed, _ in self.batches]
        self.fp32_score = self._score(self.ref, self.metric)
        self.sqnr_cache: dict = {}

    def _score(self, outs: list[dict], metric: str) -> float:
        if metric == "top1_agreement":
            c = Classification()
            for r, t in zip(self.ref, outs):
                c.update(r[self.outputs[0]], t[self.outputs[0]])
            return c.result()["agreement_top1"]
        if metric == "output_sqnr":
            worst = math.inf
            for o in self.outputs:
                s = TensorStats()
                for r, t in zip(self.ref, outs):
                    s.update(r[o], t[o])
                worst = min(worst, s.result()["sqnr_db"])
            return worst
        tally = DetectionTally(self.detection, ["test"], self.outputs, score_reference=False)
        first = 0
        for (_, boxes), r, t in zip(self.batches, self.ref, outs):
            n = len(next(iter(r.values())))
            tally.update(r, {"test": t}, [None] * n, boxes or [None] * n, first)
            first += n
        return tally.map_vs_fp32("test")["map50"] if tally.pseudo else 1.0

    def score(self, float_layers) -> float:
        key = frozenset(float_layers)
        if key not in self.cache:
            q = insert_qdq(self.model, self.amax, Exclusions(tuple(sorted(key))))
            run = OrtRunner(q)
            outs = [run.run(feed) for feed, _ in self.batches]
            self.cache[key] = self._score(outs, self.metric)
            self.sqnr_cache[key] = self._score(outs, "output_sqnr") if self.metric != "output_sqnr" else \
                self.cache[key]
            self.runs += 1
        return self.cache[key]

    def sqnr(self, float_layers) -> float:
        """Output SQNR of a variant already scored: a continuous tie-breaker for coarse task metrics."""
        self.score(float_layers)
        return self.sqnr_cache[frozenset(float_layers)]


def rank(scorer: Scorer, layers: list[str], both: bool = True) -> list[dict]:
    """Per layer: the score with only this layer in float ('all but this' quantized) and, with `both`, the
    score with only this layer quantized. Sorted by the gain of keeping the layer in float, largest first."""
    base = scorer.score(())
    base_sqnr = scorer.sqnr(())
    rows = []
    with bar("sensitivity", total=len(layers) * (2 if both else 1), unit="variant") as pbar:
        for name in layers:
            row = {"layer": name, "all_but_this": scorer.score((name,))}
            pbar.update(1)
            if both:
                row["only_this"] = scorer.score(tuple(n for n in layers if n != name))
                pbar.update(1)
            row["gain"] = row["all_but_this"] - base
            row["sqnr_gain_db"] = scorer.sqnr((name,)) - base_sqnr
            rows.append(row)
    rows.sort(key=lambda r: (-r["gain"], -r["sqnr_gain_db"]))
    return rows


def budget_target(metric: str, fp32_score: float, max_drop: float, min_sqnr_db: float) -> float:
    """The score to reach: FP32's minus the allowed drop, or for output SQNR (infinite for FP32) a floor in dB."""
    return min_sqnr_db if metric == "output_sqnr" else fp32_score - max_drop


def search(scorer: Scorer, ranking: list[dict], target: float) -> dict:
    """Fewest layers (a prefix of the ranking, found by bisection) whose float fallback reaches `target`.
    Returns the layers, the score and the curve measured on the way."""
    order = [r["layer"] for r in ranking]
    curve = {0: scorer.score(())}

    def at(k: int) -> float:
        if k not in curve:
            curve[k] = scorer.score(tuple(order[:k]))
        return curve[k]

    if at(0) >= target:
        k = 0
    elif at(len(order)) < target:
        k = len(order)
    else:
        lo, hi = 0, len(order)  # at(lo) misses, at(hi) meets
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid) >= target:
                hi = mid
            else:
                lo = mid
        k = hi
    for extra in (1, 2, 4, 8, 16, 32):  # a few more points for the chart
        if extra < len(order):
            at(extra)
    return {"float_layers": order[:k], "score": at(k), "met": at(k) >= target, "target": target,
            "fp32_score": scorer.fp32_score,
            "int8_score": at(0), "curve": sorted(curve.items()), "variants_run": scorer.runs}


def layer_precisions(layers: list[str], precision: str = "fp16") -> str:
    """The TensorRT builder form: one 'layer=precision' per line (calib build --layer-precision)."""
    return "".join(f"{n}={precision}\n" for n in layers)
