"""Per-layer sensitivity on the CPU INT8 simulation, and the search for the fewest layers to keep in higher
precision so that the accuracy drop stays within a budget.

Every configuration is "the Q/DQ model with these layers left in float"; its score against FP32 is computed on
a fixed evaluation subset whose FP32 outputs are computed once, and every score is cached by the set of layers,
so the greedy pass and the bisection reuse what the ranking already measured.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import onnx

from calib.evaluate.detect import DetectionTally
from calib.evaluate.heads import image_hw
from calib.evaluate.metrics import Classification, TensorStats
from calib.io.progress import bar
from calib.quantize.qdq import Exclusions, insert_qdq, quantized_inputs
from calib.recipe import DetectionSpec
from calib.runners.onnxruntime import OrtRunner
from calib.search.measure import oriented

log = logging.getLogger(__name__)
METRICS = ("top1_agreement", "map50", "output_sqnr")


class OutOfTime(Exception):
    """A variant not measured yet, past the scorer's deadline (the search answers with what it has)."""


def output_sqnr(ref: list[dict], outs: list[dict], names) -> dict:
    """Each output's SQNR in dB against the FP32 reference, over all batches."""
    got = {}
    for o in names:
        s = TensorStats()
        for r, t in zip(ref, outs):
            s.update(r[o], t[o])
        got[o] = float(s.result()["sqnr_db"])
    return got


@dataclass
class Scorer:
    """Scores Q/DQ variants of one model against FP32 on fixed batches; results cached per set of float layers."""

    model: onnx.ModelProto
    amax: dict
    batches: list  # [(feed dict, letterboxes)]
    metric: str
    detection: DetectionSpec = DetectionSpec()
    postprocess: object = None  # a calib.evaluate.postprocess.Hook: the user's decoding of the outputs
    cache: dict = field(default_factory=dict)
    runs: int = 0
    measure: object = None  # a calib.search.measure.Measure: the deployed simulation, `metric` any report figure
    sign: float = 1.0  # with `measure`: -1 where the figure is better lower (an error rate)
    fp32_value: float | None = None  # with `measure`: FP32's own value of the figure (oriented)
    weights: object = None  # with `measure`: the ModelProto whose weights the variants carry (default: `model`),
    # or a function of the float layers giving it (a layer's INT8-only adjustments undone where it is in float)
    deadline: float | None = None  # time.monotonic() past which a new variant raises OutOfTime
    pool: object = None  # a calib.scale pool: variants measured ahead (prefetch) run on its workers

    def __post_init__(self):
        self.sqnr_cache: dict = {}
        self.ready: dict = {}  # key -> (value, sqnr, points) measured ahead by the pool, not yet asked for
        self._shipped = None  # this scorer as the pool's workers see it (shared once)
        self.threads = 0  # ONNX Runtime's threads per run (1 on a pool's worker)
        self.points: dict = {}  # with `measure`: every figure of each variant measured
        if self.measure is not None:
            self.outputs, self.ref = self.measure.outputs, self.measure.ref
            self.batches = [(b, m) for b, _, m in self.measure.batches]
            self.fp32_score = self.fp32_value
            return
        if self.metric not in METRICS:
            from calib.errors import CalibError

            raise CalibError(f"unknown budget metric '{self.metric}' (choose from {', '.join(METRICS)})")
        ref = OrtRunner(self.model)
        self.outputs = ref.output_names()
        self.ref = [ref.run(feed) for feed, _ in self.batches]
        self.fp32_score = self._score(self.ref, self.metric)

    def _score(self, outs: list[dict], metric: str) -> float:
        if metric == "top1_agreement":
            c = Classification()
            for r, t in zip(self.ref, outs):
                c.update(self._class_scores(r), self._class_scores(t))
            return c.result()["agreement_top1"]
        if metric == "output_sqnr":
            return min(output_sqnr(self.ref, outs, self.outputs).values(), default=math.inf)
        tally = DetectionTally(self.detection, ["test"], self.outputs, score_reference=False,
                               decoder=self.postprocess)
        first = 0
        for (feed, boxes), r, t in zip(self.batches, self.ref, outs):
            n = len(next(iter(r.values())))
            tally.update(r, {"test": t}, [None] * n, boxes or [None] * n, first, image_hw(feed))
            first += n
        return tally.map_vs_fp32("test")["map50"] if tally.pseudo else 1.0

    def _class_scores(self, outputs: dict):
        if self.postprocess is None:
            return outputs[self.outputs[0]]
        kind, got = self.postprocess({o: outputs[o] for o in self.outputs})
        if kind != "classification":
            from calib.errors import CalibError

            raise CalibError(f"{self.postprocess.label} returned detections: sensitivity.metric top1_agreement "
                             "needs class scores (use map50)")
        return got

    def _outputs(self, q: onnx.ModelProto, optimize: bool = True) -> list[dict]:
        run = OrtRunner(q, threads=self.threads, optimize=optimize)
        return [run.run(feed) for feed, _ in self.batches]

    @staticmethod
    def _key(float_layers, overrides) -> tuple:
        return frozenset(float_layers), tuple(sorted((overrides or {}).items()))

    def _measured(self, key, overrides: dict | None) -> tuple[float, float, dict | None]:
        """(metric, output SQNR, every figure or None) of one variant, measured here."""
        amax = {**self.amax, **overrides} if overrides else self.amax
        if self.measure is not None:
            weights = self.weights(key[0]) if callable(self.weights) else self.weights
            pts = self.measure.score(amax, key[0], weights)
            return oriented(pts.get(self.metric), self.sign), oriented(pts.get("min_output_sqnr_db"), 1.0), pts
        outs = self._outputs(insert_qdq(self.model, amax, Exclusions(tuple(sorted(key[0])))))
        value = self._score(outs, self.metric)
        return value, self._score(outs, "output_sqnr") if self.metric != "output_sqnr" else value, None

    def score(self, float_layers, overrides: dict | None = None) -> float:
        """The metric with `float_layers` kept in float and, per tensor, `overrides` replacing the base amax."""
        key = self._key(float_layers, overrides)
        if key not in self.cache and self.deadline is not None and time.monotonic() > self.deadline:
            raise OutOfTime()
        if key not in self.cache:
            if key in self.ready:  # measured ahead on the pool: counted now, as if measured now
                value, sq, pts = self.ready.pop(key)
                if self.measure is not None:
                    self.measure.count()
            else:
                value, sq, pts = self._measured(key, overrides)
            if pts is not None:
                self.points[key] = pts
            self.cache[key], self.sqnr_cache[key] = value, sq
            self.runs += 1
        return self.cache[key]

    @property
    def width(self) -> int:
        """Variants worth measuring at once: the pool's workers (1: one at a time, as asked)."""
        return self.pool.size if self.pool is not None else 1

    def prefetch(self, variants) -> None:
        """Measure `variants` ((float layers, overrides) pairs) at once on the pool's workers, for score() to
        take in whatever order it is asked; nothing without a pool of two or more, or past the deadline. What
        is measured ahead and never asked for is neither kept nor counted: the results, the counts included,
        are those of the one-at-a-time search."""
        if self.width < 2 or (self.deadline is not None and time.monotonic() > self.deadline):
            return
        todo, seen = [], set()
        for float_layers, overrides in variants:
            key = self._key(float_layers, overrides)
            if key not in self.cache and key not in self.ready and key not in seen:
                seen.add(key)
                todo.append((key, overrides))
        if len(todo) < 2:
            return
        if self._shipped is None:
            self._shipped = self.pool.share(self._portable())
        for (key, _), got in zip(todo, self.pool.map(_measure_one, self._shipped, todo)):
            self.ready[key] = got

    def _portable(self) -> "Scorer":
        """This scorer without its caches, pool and deadline: what a worker measures a variant with."""
        import copy

        out = copy.copy(self)
        out.cache, out.sqnr_cache, out.points, out.ready = {}, {}, {}, {}
        out.pool, out._shipped, out.deadline, out.threads = None, None, None, 1
        if self.measure is not None:
            out.measure = self.measure.portable()
        return out

    def split(self) -> dict:
        """The metric and output SQNR with only the weights, then only the activations in INT8: which of the
        two the INT8 loss comes from (a weight loss can be fixed on the weights; an activation loss needs
        other scales or layers in float). All three, INT8 included, run as plain fake quantization (no ONNX
        Runtime fusions, which would treat the three differently), so they compare with each other."""
        out = {}
        for kind, kw in (("int8", {}), ("weights_only", {"activations": False}),
                         ("activations_only", {"weights": False})):
            outs = self._outputs(insert_qdq(self.model, self.amax, **kw), optimize=False)
            out[kind] = {"score": self._score(outs, self.metric), "sqnr_db": self._score(outs, "output_sqnr")}
            self.runs += 1
        return out

    def sqnr(self, float_layers, overrides: dict | None = None) -> float:
        """Output SQNR of a variant already scored: a continuous tie-breaker for coarse task metrics."""
        self.score(float_layers, overrides)
        return self.sqnr_cache[self._key(float_layers, overrides)]


def _measure_one(scorer: Scorer, item) -> tuple:
    """On a worker: one variant of `scorer` ((key, overrides) as Scorer.prefetch sends it)."""
    key, overrides = item
    return scorer._measured(key, overrides)


def _variants(layers: list[str], names, both: bool) -> list:
    """The variants rank() measures for `names`: each alone in float, and with `both` each alone in INT8."""
    out = []
    for name in names:
        out.append(((name,), None))
        if both:
            out.append((tuple(n for n in layers if n != name), None))
    return out


def rank_by_noise(scorer: Scorer, layers: list[str], stop_by: float | None = None) -> list[dict]:
    """Per layer: the model with only this layer in INT8 (every other in float), its output SQNR and target
    figure; sorted by the noise the layer adds alone, largest first (lowest SQNR, then lowest figure). Where the
    INT8 error is spread over many layers, the noises roughly add up, so the layers that add the most are the
    ones to give back first; a layer's gain with it alone in float measures it against everyone else's noise
    and is mostly noise itself (ppocr-cls: 73 layers of such a ranking in float to meet a target, 28 needed).
    Past the scorer's deadline, or `stop_by` (time.monotonic()), the ranking stops where it is; the layers not
    ranked follow, "ranked": False."""
    rows = []
    with bar("sensitivity (each layer alone in INT8)", total=len(layers), unit="variant") as pbar:
        for name in layers:
            if stop_by is not None and time.monotonic() > stop_by:
                log.warning("ranking stopped at half the time left, after %d of %d layers", len(rows), len(layers))
                break
            others = tuple(n for n in layers if n != name)
            try:
                row = {"layer": name, "only_this": scorer.score(others), "only_this_sqnr_db": scorer.sqnr(others)}
            except OutOfTime:
                log.warning("time budget spent after ranking %d of %d layers", len(rows), len(layers))
                break
            rows.append(row)
            pbar.update(1)
    rows.sort(key=lambda r: (r["only_this_sqnr_db"], r["only_this"]))
    done = {r["layer"] for r in rows}
    return rows + [{"layer": n, "ranked": False} for n in layers if n not in done]


def rank(scorer: Scorer, layers: list[str], both: bool = True, stop_at: float | None = None,
         by_sqnr: bool = False) -> list[dict]:
    """Per layer: the score with only this layer in float ('all but this' quantized) and, with `both`, the
    score with only this layer quantized. Sorted, with `both`, by the damage the layer does alone (lowest
    'only this' score first, then the largest gain): on deep nets where errors add up over many layers, taking
    one layer out of INT8 gains little on its own and the 'all but this' scores tie (MobileNetV2: 16 layers in
    float reach 0.90 top-1 agreement in this order, 0.82 in the order of the gain); else by the gain.

    Bounded: with `stop_at`, the ranking stops at the first layer whose fallback alone reaches it (no answer
    has fewer layers in float), and past the scorer's deadline it stops where it is; the layers not ranked
    follow in the order given, marked "ranked": False. `by_sqnr`: sorted by the output SQNR's gain first, a
    continuous figure, where the metric's gains are small against its noise (a coarse metric on few samples)."""
    wave = 2 * scorer.width  # measured ahead on a pool, a few at a time (the ranking may stop early)
    scorer.prefetch([((), None)] + _variants(layers, layers[:wave], both))
    base = scorer.score(())
    base_sqnr = scorer.sqnr(())
    rows = []
    with bar("sensitivity", total=len(layers) * (2 if both else 1), unit="variant") as pbar:
        for i, name in enumerate(layers):
            if i % wave == 0 and i:
                scorer.prefetch(_variants(layers, layers[i:i + wave], both))
            try:
                row = {"layer": name, "all_but_this": scorer.score((name,))}
                pbar.update(1)
                if both:
                    row["only_this"] = scorer.score(tuple(n for n in layers if n != name))
                    pbar.update(1)
            except OutOfTime:
                log.warning("time budget spent after ranking %d of %d layers", len(rows), len(layers))
                break
            row["gain"] = row["all_but_this"] - base
            row["sqnr_gain_db"] = scorer.sqnr((name,)) - base_sqnr
            rows.append(row)
            if stop_at is not None and row["all_but_this"] >= stop_at:
                log.info("%s alone in float reaches %.4g: ranking stopped early", name, row["all_but_this"])
                break
    if both:
        rows.sort(key=lambda r: (r["only_this"], -r["gain"], -r["sqnr_gain_db"]))
    elif by_sqnr:
        rows.sort(key=lambda r: (-r["sqnr_gain_db"], -r["gain"]))
    else:
        rows.sort(key=lambda r: (-r["gain"], -r["sqnr_gain_db"]))
    if stop_at is not None and rows and rows[0]["all_but_this"] < stop_at:
        hit = [r for r in rows if r["all_but_this"] >= stop_at]
        rows = hit[:1] + [r for r in rows if r not in hit[:1]]
    done = {r["layer"] for r in rows}
    return rows + [{"layer": n, "ranked": False} for n in layers if n not in done]


def budget_target(metric: str, fp32_score: float, max_drop: float, min_sqnr_db: float) -> float:
    """The score to reach: FP32's minus the allowed drop, or for output SQNR (infinite for FP32) a floor in dB."""
    return min_sqnr_db if metric == "output_sqnr" else fp32_score - max_drop


def search(scorer: Scorer, ranking: list[dict], target: float, overrides: dict | None = None,
           chart: bool = True) -> dict:
    """Fewest layers (a prefix of the ranking, found by bisection) whose float fallback reaches `target`, with
    per-tensor amax `overrides` if given. Returns the layers, the score and the curve measured on the way. Past
    the scorer's deadline: the best measured so far (the fewest layers that reach the target, else the highest
    score), with "out_of_time". `chart`: a few more points of the curve (1, 2, 4, ... layers) for a chart."""
    order = [r["layer"] for r in ranking]
    try:
        curve = {0: scorer.score((), overrides)}
    except OutOfTime:  # not even the starting point measured with these overrides: nothing to answer with
        return {"float_layers": [], "score": -math.inf, "met": False, "target": target,
                "fp32_score": scorer.fp32_score, "out_of_time": True, "int8_score": -math.inf, "curve": [],
                "variants_run": scorer.runs}

    def at(k: int) -> float:
        if k not in curve:
            curve[k] = scorer.score(tuple(order[:k]), overrides)
        return curve[k]

    for j in range(1, len(order) + 1):  # prefixes measured already (the ranking's first layer alone): free
        key = Scorer._key(order[:j], overrides)
        if key in getattr(scorer, "cache", {}):
            curve[j] = scorer.cache[key]
    late = False
    try:
        if at(0) >= target:
            k = 0
        else:
            hi = min((j for j, v in curve.items() if v >= target), default=len(order))
            if at(hi) < target:
                k = len(order)
            else:
                lo = max(j for j, v in curve.items() if j < hi and v < target)  # at(lo) misses, at(hi) meets
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if at(mid) >= target:
                        hi = mid
                    else:
                        lo = mid
                k = hi
        extras = [e for e in (1, 2, 4, 8, 16, 32) if e < len(order)] if chart else []
        if getattr(scorer, "width", 1) > 1:  # an engine scorer measures one at a time
            scorer.prefetch([(tuple(order[:e]), overrides) for e in extras if e not in curve])
        for extra in extras:  # a few more points for the chart
            at(extra)
    except OutOfTime:
        late = True
        meets = [j for j, v in curve.items() if v >= target]
        k = min(meets) if meets else max(curve, key=lambda j: (curve[j], -j))
    return {"float_layers": order[:k], "score": at(k), "met": at(k) >= target, "target": target,
            "fp32_score": scorer.fp32_score, "out_of_time": late,
            "int8_score": at(0), "curve": sorted(curve.items()), "variants_run": scorer.runs}


def prune(scorer: Scorer, float_layers: list[str], target: float, overrides: dict | None = None) -> dict:
    """`float_layers` (a set that reaches `target`) with every layer the target does not need given back to INT8:
    the layers tried last-ranked first, a block at a time (the whole block back in INT8 where the rest still reaches
    the target, else its halves), so that a prefix of a ranking the metric cannot order well (errors spread over
    many layers, a coarse figure) loses what it took in by position only. Every set kept was measured to reach the
    target; past the scorer's deadline it answers with the smallest so far ("out_of_time")."""
    keep = list(float_layers)
    late = False

    def meets(layers) -> bool:
        return scorer.score(tuple(layers), overrides) >= target

    def drop(block: list[str]) -> None:
        nonlocal keep
        rest = [n for n in keep if n not in block]
        if meets(rest):
            keep = rest
        elif len(block) > 1:
            half = len(block) // 2
            drop(block[:half])
            drop(block[half:])

    try:
        drop(keep[::-1])
    except OutOfTime:
        late = True
    return {"float_layers": keep, "score": scorer.score(tuple(keep), overrides), "out_of_time": late,
            "pruned": len(float_layers) - len(keep)}


def layer_inputs(model: onnx.ModelProto, layers) -> list[str]:
    """The quantized activation tensors feeding `layers` (node names or first outputs), in the order given."""
    want = list(layers)
    found: dict = {}
    for ni, ii, kind in quantized_inputs(model):
        node = model.graph.node[ni]
        name = node.name or node.output[0]
        if kind == "act" and name in want:
            found.setdefault(name, []).append(node.input[ii])
    out = []
    for name in want:
        out += [t for t in found.get(name, []) if t not in out]
    return out


def best_of(scorer: Scorer, candidates: dict, tensors, float_layers=()) -> dict:
    """Per tensor, greedily in the order given, the algorithm whose amax scores best with every choice made so
    far (ties broken by output SQNR). `candidates`: algorithm -> {tensor: amax}. Returns the chosen
    {tensor: (algorithm, amax)} that differ from the base, the score before and after."""
    chosen: dict = {}
    before = best = scorer.score(float_layers)
    best_sq = scorer.sqnr(float_layers)
    with bar("per-tensor algorithm", total=len(tensors), unit="tensor") as pbar:
        for t in tensors:
            pick = None
            base = {k: v for k, (_, v) in chosen.items()}
            scorer.prefetch([(float_layers, {**base, t: am[t]}) for am in candidates.values()
                             if t in am and am[t] != scorer.amax.get(t) and not (t in chosen and am[t] == chosen[t][1])])
            for algo, am in candidates.items():
                if t not in am or am[t] == scorer.amax.get(t) or (t in chosen and am[t] == chosen[t][1]):
                    continue
                trial = {**{k: v for k, (_, v) in chosen.items()}, t: am[t]}
                s, sq = scorer.score(float_layers, trial), scorer.sqnr(float_layers, trial)
                if (s, sq) > (best, best_sq):
                    best, best_sq, pick = s, sq, (algo, am[t])
            if pick:
                chosen[t] = pick
            pbar.update(1)
    return {"choices": chosen, "before": before, "after": best}


def layer_precisions(layers: list[str], precision: str = "fp16") -> str:
    """The TensorRT builder form: one 'layer=precision' per line (calib build --layer-precision)."""
    return "".join(f"{n}={precision}\n" for n in layers)
