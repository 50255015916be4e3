"""`calib recover`: from "not close" to an INT8 configuration that meets a target, recovering in INT8 first.

One calibration pass (every algorithm), then, each step judged on the held-out evaluation samples against FP32
and kept only where it raises the target figure: the algorithm, cross-layer equalization, bias correction, the
per-tensor choice among the algorithms' scales, and last the fewest layers in float (the fallback search of
calib.search.fallback, on the deployed configuration: implicit from the cache, or the Q/DQ model). It stops as soon
as the target is met, and when the time budget runs out it publishes the best configuration measured so far.
Everything is written into a staging folder and published as a whole (calib.io.publish).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from calib.calibrate import collect, compute_all, needs_tensorrt_grid
from calib.errors import CalibError
from calib.evaluate.confidence import primary_metric
from calib.io.memory import Budget
from calib.io.publish import publish
from calib.quantize.model import ModelInfo, initializers_not_inputs, load_model
from calib.quantize.opset import at_qdq_opset
from calib.quantize.qdq import quantizable_layers
from calib.quantize.shapes import fixed_batch
from calib.search import target as tg
from calib.search.fallback import OutOfTime, Scorer, best_of, layer_inputs, prune, rank, rank_by_noise, search
from calib.search.macs import int8_share, layer_macs
from calib.search.measure import Measure, oriented
from calib.search.recover_out import write_outputs
from calib.search.recover_state import Clock, Evaluation, RecoverSpec, State
from calib.search.recover_steps import in_int8

log = logging.getLogger(__name__)
NOISE_SAMPLES = 4  # held-out samples a ranking by output noise is measured on (of the --rank-samples)
__all__ = ["Evaluation", "RecoverSpec", "Recovery", "recover"]


class Recovery:
    def __init__(self, model_path, info: ModelInfo, calib_source, eval_source, spec: RecoverSpec,
                 evaluation: Evaluation, memory: Budget | None = None, micro: int = 8, option_names=None,
                 pool=None):
        self.model_path, self.info, self.spec, self.ev = Path(model_path), info, spec, evaluation
        self.pool = pool  # a calib.scale pool: the statistics pass and the variants' measures on its workers
        self.calib_source, self.eval_source, self.memory = calib_source, eval_source, memory
        self.micro, self.option_names = micro, option_names
        self.steps: list[dict] = []
        self.curve: list[dict] = []  # the fallback's measured points: layers in float -> figure, INT8 share
        self.ranked_on = None  # held-out samples the ranking was measured on
        self.order: list[str] = []  # the fallback's ranking: the curve's k-th point has its first k in float
        self.clock = Clock(spec.time_budget)

    # -- measuring -----------------------------------------------------------------------------------------
    def _measure(self, state: State, amax: dict | None = None, model=None, float_layers=()) -> dict:
        return self._row(*self.measure.figures(state.scales() if amax is None else amax, float_layers,
                                               state.weights_for(float_layers) if model is None else model))

    def _row(self, pts: dict, figs: dict) -> dict:
        fig = figs.get(self.key) or {}
        return {"value": pts.get(self.key), "ci95": fig.get("ci95"), "n": fig.get("n"),
                "score": oriented(pts.get(self.key), self.sign),
                "sqnr": oriented(pts.get("min_output_sqnr_db"), 1.0), "points": pts}

    def _step(self, name: str, got: dict, before: State, kept: bool, note: str, **extra) -> None:
        self.steps.append({"step": name, "value": got["value"], "ci95": got["ci95"], "n": got["n"],
                           "before": self.sign * before.value if before.value > float("-inf") else None,
                           "kept": kept, "note": note, "seconds": round(self.clock.elapsed(), 1), **extra})
        log.info("%s: %s %s (%s)", name, self.key, got["value"], "kept" if kept else "not kept")

    def skip(self, name: str, state: State, note: str) -> None:
        """A step with nothing to do here (or no time left), listed as such."""
        self.steps.append({"step": name, "value": None, "ci95": None, "n": None, "before": self.sign * state.value,
                           "kept": False, "note": note, "seconds": round(self.clock.elapsed(), 1)})

    def met(self, state: State) -> bool:
        return state.value >= self.goal

    # -- the flow ------------------------------------------------------------------------------------------
    def run(self) -> dict:
        spec = self.spec
        algos = list(dict.fromkeys(spec.algorithms))
        self.fixed = fixed_batch(self.info)
        info2, stats, samples, fp = collect(self.model_path, self.calib_source, label="calibration data",
                                            info=self.info, tensorrt_grid=needs_tensorrt_grid(algos),
                                            budget=self.memory, option_names=self.option_names, pool=self.pool)
        self.params = {"percentile": {"percentile": spec.percentile}}
        self.amaxes, _, _ = compute_all(stats, info2.activations, algos, self.params, model=self.model_path)
        self.samples, self.fingerprint, self.activations = samples, fp, info2.activations
        have = set(stats.names())
        self.ranges = {t: float(stats.absmax(t)) for t in info2.activations if t in have}  # FP16 or FP32
        del stats
        from calib.pipeline import deployed_precision

        fp16 = spec.deploy == "fp16"  # the FP16+INT8 model: calib's Q/DQ placement, float layers in FP16
        pm = deployed_precision(self.model_path, "qdq" if fp16 else spec.deploy, spec.engine_layers, "--engine-layers")
        # below opset 13 converted once (names kept): every variant's weights are this model's
        proto = at_qdq_opset(initializers_not_inputs(load_model(self.model_path)), str(self.model_path))
        t = time.monotonic()
        self.measure = Measure(proto, self.info, self.eval_source, self.ev.task, self.ev.detection, self.ev.hook,
                               self.ev.user, self.micro, pm, hint=(self.option_names or {}).get(
                                   "evaluation_data.limit", "evaluation_data.limit"),
                               fp16=self.ranges if fp16 else None, fp32_fallback=spec.precision == "fp32")
        state = State(proto, algos[0], self.amaxes[algos[0]])
        pts, figs = self.measure.figures(state.scales(), (), proto)
        one = time.monotonic() - t
        if spec.time_budget is not None and self.clock.elapsed() > spec.time_budget:
            raise CalibError(f"--time-budget: {spec.time_budget:g} s is too small: the calibration pass and one "
                             f"evaluation took {self.clock.elapsed():.0f} s (one evaluation {one:.1f} s)")
        self.clock.keep(2 * one + 5)  # the last measurement and the writing, within the budget
        self.key = tg.resolve(spec.target, pts, primary_metric(self.measure.task, self.measure.outputs))
        self.sign = tg.sign(self.key)
        thr = tg.threshold(spec.target, self.key, pts, self.measure.samples, pts.get("fp32_boxes"))
        self.threshold, self.goal = thr, self.sign * thr
        self.fp32_value = pts.get(f"fp32:{self.key}", 1.0 if not self.key.endswith("_db") else float("inf"))
        first = self._row(pts, figs)
        state = self._algorithm(state, algos, first)
        self.macs = layer_macs(proto, self.info, quantizable_layers(proto))
        already = self.met(state)
        ranking, found = [], None
        if not already:
            state = in_int8(self, state)
        if not already and not self.met(state):
            ranking, found, state = self._fallback(state, pm)
        return self._result(state, already, ranking, found, samples)

    def _algorithm(self, state: State, algos, first: dict) -> State:
        """All INT8 with each algorithm's scales: the best is the base (ties: the higher output SQNR)."""
        rows = {algos[0]: first}
        if self.pool is not None and self.pool.size > 1 and len(algos) > 2 and not self.clock.out():
            from calib.search.measure import figures_of

            got = self.pool.map(figures_of, self.pool.share(self.measure.portable()),
                                [(self.amaxes[a], (), state.model) for a in algos[1:]])
            self.measure.count(len(got))
            rows.update({a: self._row(*g) for a, g in zip(algos[1:], got)})
        for a in algos[1:]:
            if a in rows:
                continue
            if self.clock.out():
                break
            rows[a] = self._measure(state, self.amaxes[a])
        best = max(rows, key=lambda a: (rows[a]["score"], rows[a]["sqnr"]))
        new = State(state.model, best, self.amaxes[best], value=rows[best]["score"], sqnr=rows[best]["sqnr"])
        self.all_int8 = {a: {"value": r["value"], "ci95": r["ci95"]} for a, r in rows.items()}
        self._step("all INT8: calibration algorithm", rows[best], State(state.model, best, {}), True,
                   f"{best} of {', '.join(rows)} (each all INT8: "
                   + ", ".join(f"{a} {r['value']:.4g}" if r["value"] is not None else f"{a} -"
                               for a, r in rows.items()) + ")", algorithm=best)
        return new

    def judge(self, name: str, state: State, cand: State, note: str, **extra) -> State:
        """`cand` measured on the held-out samples: kept where it raises the target figure, else `state`."""
        got = self._measure(cand)
        cand.value, cand.sqnr = got["score"], got["sqnr"]
        keep = (cand.value, cand.sqnr) > (state.value, state.sqnr) and cand.value >= state.value
        self._step(name, got, state, keep, note, **extra)
        return cand if keep else state

    def _scorer(self, state: State, measure: Measure | None = None) -> Scorer:
        return Scorer(state.model, state.amax, [], self.key, measure=measure or self.measure, sign=self.sign,
                      fp32_value=oriented(self.fp32_value, self.sign), weights=state.weights_for,
                      deadline=self.clock.deadline, pool=self.pool)

    def _fallback(self, state: State, pm) -> tuple[list, dict, State]:
        from calib.deploy.precision import INT8

        scorer = self._scorer(state)
        layers = [n for n in quantizable_layers(state.model)
                  if pm is None or pm.mode != "implicit" or pm.nodes.get(n, INT8) == INT8]
        overrides = {t: v for t, (_, v) in state.overrides.items()} or None
        sub = self.measure.head(self.spec.rank_samples) if self.spec.rank_samples else self.measure
        whole = sub.samples >= self.measure.samples
        ranker = scorer if whole else self._scorer(state, sub)  # a subset ranks; the whole set decides
        if self.clock.out():
            ranking = [{"layer": n, "ranked": False} for n in layers]
        elif self.spec.rank_by == "noise":  # a continuous figure: a few samples tell each layer's noise
            few = self.measure.head(min(NOISE_SAMPLES, sub.samples))
            ranking = rank_by_noise(self._scorer(state, few), layers, stop_by=self.clock.share(0.5))
            if ranker is not scorer:  # the per-tensor choice on the subset: leaves the search its time
                ranker.deadline = self.clock.share(0.25)
            self.ranked_on = few.samples
        else:
            ranking = rank(ranker, layers, both=False, stop_at=self.goal if whole else None,
                           by_sqnr=self.spec.rank_by == "sqnr")
        self.ranked_on = self.ranked_on or sub.samples
        if "per_tensor" in self.spec.steps and len(self.amaxes) > 1 and not self.clock.out():
            state, overrides = self._per_tensor(state, ranker, ranking)  # chosen on the subset, judged on all
        if self.met(state):
            return ranking, None, state
        found = search(scorer, ranking, self.goal, overrides, chart=False)
        pruned = 0
        if found["met"] and len(found["float_layers"]) > 1:  # the layers the target does not need back in INT8
            p = prune(scorer, found["float_layers"], self.goal, overrides)
            found.update(float_layers=p["float_layers"], out_of_time=found["out_of_time"] or p["out_of_time"])
            pruned = p["pruned"]
        order = self.order = [r["layer"] for r in ranking]
        self.curve = [{"float_layers": k, "value": self.sign * v if v > float("-inf") else None,
                       "int8_macs_share": int8_share(self.macs, order[:k])} for k, v in found["curve"]]
        got = self._measure(state, float_layers=found["float_layers"])
        new = dataclasses.replace(state, float_layers=tuple(found["float_layers"]), value=got["score"],
                                  sqnr=got["sqnr"])
        k = len(found["float_layers"])
        self._step(f"fallback: {k} layer{'s' if k != 1 else ''} in float", got, state, True,
                   "the fewest layers of the ranking in float that meet the target"
                   + (f", then {pruned} of them given back to INT8 (the target met without them)" if pruned else "")
                   if found["met"] else
                   "the target is not met" + (" (time budget spent: the best so far)" if found["out_of_time"]
                                              else " even with every ranked layer in float"),
                   float_layers=len(found["float_layers"]), pruned=pruned, variants=scorer.runs)
        return ranking, found, new

    def _per_tensor(self, state: State, scorer: Scorer, ranking) -> tuple[State, dict | None]:
        top = [r["layer"] for r in ranking if r.get("ranked", True)][:self.spec.per_tensor_layers]
        tensors = layer_inputs(state.model, top)
        cands = {a: am for a, am in self.amaxes.items() if a != state.algorithm}
        try:
            res = best_of(scorer, cands, tensors)
        except OutOfTime:
            self.skip("per-tensor algorithm", state, "not tried: the time budget is spent")
            return state, None
        if not res["choices"]:
            self.skip("per-tensor algorithm", state, f"no gain from another algorithm's scale on the {len(tensors)} "
                      f"inputs of the {len(top)} most sensitive layers (ranking samples)")
            return state, None
        cand = dataclasses.replace(state, overrides=dict(res["choices"]))
        new = self.judge("per-tensor algorithm", state, cand,
                         f"{len(res['choices'])} of {len(tensors)} tensors (inputs of the {len(top)} most sensitive "
                         "layers) take another algorithm's scale", tensors=len(res["choices"]))
        overrides = {t: v for t, (_, v) in new.overrides.items()} or None
        return new, overrides

    def _result(self, state: State, already: bool, ranking, found, samples) -> dict:
        gain = {r["layer"]: r for r in ranking}
        return {"model": str(self.model_path), "target": self.spec.target.describe(self.key, self.threshold),
                "metric": self.key, "threshold": self.threshold, "fp32_value": self.fp32_value,
                "value": self.sign * state.value if state.value > float("-inf") else None,
                "met": self.met(state), "already_met": already,
                "algorithm": state.algorithm, "weights_changed": state.weights,
                "per_tensor": {t: a for t, (a, _) in state.overrides.items()},
                "float_layers": [{"layer": n, "precision": self.spec.precision,
                                  "alone_in_float": self.sign * gain[n]["all_but_this"]
                                  if "all_but_this" in gain.get(n, {}) else None} for n in state.float_layers],
                "int8_macs_share": int8_share(self.macs, state.float_layers),
                "steps": self.steps, "all_int8": self.all_int8, "fallback_curve": self.curve, "simulated": self.spec.deploy,
                "evaluation_samples": self.measure.samples, "calibration_samples": samples,
                "ranking_samples": self.ranked_on,
                "variants_measured": self.measure.runs, "seconds": round(self.clock.elapsed(), 1),
                "out_of_time": bool(found and found.get("out_of_time")),
                "ranking": [r for r in ranking if r.get("ranked", True)][:50],
                "_state": state}


def recover(model_path, info: ModelInfo, calib_source, eval_source, spec: RecoverSpec, evaluation: Evaluation,
            out, memory: Budget | None = None, micro: int = 8, option_names=None, inputs=(),
            command: str | None = None, pool=None) -> dict:
    """Run the recovery and publish its files into `out` as a whole; returns the result (recover.json's).
    pool: a calib.scale pool whose workers run the statistics passes and measure the variants (the same
    result as without)."""
    box: dict = {}

    def work(stage: Path) -> None:
        r = Recovery(model_path, info, calib_source, eval_source, spec, evaluation, memory, micro, option_names,
                     pool)
        res = r.run()
        state = res["_state"]
        box.update(write_outputs(stage, Path(out), res, r, command))
        if spec.backend == "tensorrt":  # the chosen configuration on real engines, into the same report
            from calib.search.recover_engines import verify
            from calib.search.recover_out import rewrite_report

            box["engines"] = verify(stage, box, r, state)
            rewrite_report(stage, box)

    publish(out, work, "recover", inputs=[model_path, *inputs])
    return box
