"""The fallback search run on real engines: `calib sensitivity` with `backend: tensorrt`.

In implicit INT8 TensorRT does not run the layers the simulation assumed: asked to keep 16 MobileNetV2 layers
in FP16 it kept 38, asked for 35 it dropped INT8 altogether (benchmarks/RESULTS_TRT.md). So the CPU ranking is
kept, and the bisection over its prefixes is repeated with each variant built and measured as an engine: the
same metric against the same FP32 reference as the simulation, plus the engine's latency and the precision
TensorRT chose per layer, beside three CPU figures: the simulation of the implicit engine predicted
(calib.deploy.simulate, with the layers asked in float and those that only fed them in float), the simulation
of the engine as built (its inspector: which layers ran INT8 and which tensors it stored in INT8, TensorRT's
choice per build), and the Q/DQ placement's score the search ranked with. The answer is the fewest layers that
meet the budget on the engine; with `sensitivity.min_speedup`, the variants measured are also held against the
FP16 engine's latency.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from calib.deploy.precision import from_inspector, implicit_rules
from calib.deploy.simulate import simulated_model
from calib.errors import CalibError
from calib.quantize.model import inspect_model
from calib.quantize.qdq import Exclusions
from calib.runners.tensorrt import compat
from calib.runners.tensorrt.builder import BuildSpec, build, recipe_shapes
from calib.runners.tensorrt.calibrators import cache_calibrator
from calib.runners.tensorrt.runner import TrtRunner
from calib.search.fallback import Scorer, output_sqnr, search

log = logging.getLogger(__name__)


def pin_rules(model, layers) -> tuple[str, ...]:
    """'op:<type>=int8' for each op type among the quantizable `layers`: asked in INT8 before the fallback rules
    (the last matching rule wins), so TensorRT does not widen the fallback on its own."""
    names = set(layers)
    ops = []
    for n in model.graph.node:
        if (n.name or n.output[0]) in names and n.op_type not in ops:
            ops.append(n.op_type)
    return tuple(f"op:{op}=int8" for op in ops)


def precisions(layers: list[dict]) -> dict:
    """Engine layer name -> the precision TensorRT ran it in (reformats apart): where an engine and the simulation
    part ways, the layers it ran in INT8 that the simulation kept in float, or the other way."""
    return {x["name"]: x["precision"] for x in layers if not x["name"].startswith("Reformatting")}


class EngineScorer:
    """Scores 'these layers in float' variants on TensorRT engines, with the CPU Scorer's batches, FP32
    reference and metric (so both columns of the report compare the same thing). Results cached per variant."""

    def __init__(self, cpu: Scorer, model_path, amax: dict, spec: BuildSpec, precision: str = "fp16",
                 pin: tuple[str, ...] = (), carrier: str | None = None, trt=None, cuda=None):
        self.trt = trt or compat.load()
        if cuda is None:
            from calib.runners.tensorrt.device import Cuda

            cuda = Cuda()
        self.cpu, self.model_path, self.amax, self.spec = cpu, model_path, amax, spec
        self.precision, self.pin, self.carrier, self.cuda = precision, pin, carrier, cuda
        self.fp32_score = cpu.fp32_score
        self.metric = cpu.metric
        self.cache: dict = {}
        self.rows: dict = {}  # variant key -> measured row
        self.runs = 0
        self.fp16_ms = self._reference_ms()

    def _run(self, built) -> tuple[list, float]:
        r = TrtRunner(built.plan, self.trt, self.cuda, label="fallback variant")
        try:
            outs = [r.run(feed) for feed, _ in self.cpu.batches]
            ms = r.latency(self.cpu.batches[0][0])["median_ms"]
        finally:
            r.close()
        return outs, ms

    def _reference_ms(self) -> float:
        spec = replace(self.spec, precisions=("fp32", "fp16"), layer_precisions=())
        _, ms = self._run(build(self.model_path, spec, None, self.trt, self.cuda))
        log.info("FP16 engine: %.4f ms per batch of %d", ms, self.spec.batch_size)
        return ms

    def _amax(self, overrides: dict | None) -> dict:
        return {**self.amax, **overrides} if overrides else self.amax

    def _sim_score(self, pm, overrides: dict | None, exclude: Exclusions = Exclusions()) -> float:
        """The metric of the CPU simulation of the engine `pm` describes (calib.deploy.simulate)."""
        q = simulated_model(self.cpu.model, self._amax(overrides), pm, exclude)
        return self.cpu._score(self.cpu._outputs(q), self.metric)

    def _simulated(self, key, overrides: dict | None) -> float:
        """The variant's score in the CPU simulation of the implicit INT8 engine it is (calib.deploy.simulate: where
        TensorRT rounds, which the Q/DQ placement of the CPU search does not model everywhere)."""
        if self.cpu.measure is not None:
            return self.cpu.score(tuple(key[0]), overrides)
        return self._sim_score(implicit_rules(self.cpu.model), overrides, Exclusions(tuple(sorted(key[0]))))

    def _as_built(self, built, overrides: dict | None) -> float | None:
        """The variant's score in the CPU simulation of the engine TensorRT built: its inspector's precision per
        layer and the tensors it stored in INT8, which TensorRT chooses per build (None where the inspector says
        nothing, or the metric is a measure of its own)."""
        layers = built.info.get("layers") or []
        if self.cpu.measure is not None or not layers or any(la.get("precision") == "?" for la in layers):
            return None  # no inspector, or one that gives names only
        return self._sim_score(from_inspector(layers, self.cpu.model), overrides)

    def score(self, float_layers, overrides: dict | None = None) -> float:
        key = Scorer._key(float_layers, overrides)
        if key in self.cache:
            return self.cache[key]
        amax = self._amax(overrides)
        while True:
            rules = self.pin + tuple(f"{n}={self.precision}" for n in sorted(key[0]))
            spec = replace(self.spec, layer_precisions=rules)
            try:
                built = build(self.model_path, spec, cache_calibrator(amax, self.trt, self.carrier), self.trt,
                              self.cuda)
                break
            except CalibError as exc:  # an op type TensorRT renamed away: pin the others, say so once
                bad = next((r for r in self.pin if f"'{r.rpartition('=')[0]}' matches no layer" in str(exc)), None)
                if bad is None:
                    raise
                log.warning("pin %s matches no engine layer; pinning without it", bad)
                self.pin = tuple(r for r in self.pin if r != bad)
        outs, ms = self._run(built)
        self.cache[key] = self.cpu._score(outs, self.metric)
        self.runs += 1
        self.rows[key] = {"float_layers": len(key[0]), "engine_score": self.cache[key],
                          "sim_score": self._simulated(key, overrides),
                          "as_built_score": self._as_built(built, overrides),
                          "placement_score": self.cpu.score(tuple(key[0]), overrides), "median_ms": ms,
                          "speedup_vs_fp16": self.fp16_ms / ms if ms else None,
                          "engine_layers": built.info["layer_summary"],
                          "engine_output_sqnr_db": {o: round(v, 3) for o, v in output_sqnr(self.cpu.ref, outs,
                                                                                     self.cpu.outputs).items()},
                          "engine_precisions": precisions(built.info["layers"])}
        log.info("engine with %d layers in %s: %s %.4g (simulation %.4g), %.4f ms = %.2fx FP16", len(key[0]),
                 self.precision, self.metric, self.cache[key], self.rows[key]["sim_score"], ms,
                 self.rows[key]["speedup_vs_fp16"] or 0.0)
        return self.cache[key]


def engine_search(cpu: Scorer, ranking: list[dict], target: float, model_path, amax: dict, recipe,
                  overrides: dict | None = None, trt=None, cuda=None) -> dict:
    """The bisection of calib.search.fallback.search over the CPU ranking, each variant an engine. Returns the engine's
    answer, every variant measured (engine and simulation side by side) and the FP16 engine's latency."""
    b, s = recipe.backend, recipe.sensitivity
    layers = [r["layer"] for r in ranking]
    batch = max(len(next(iter(feed.values()))) for feed, _ in cpu.batches)
    dims = inspect_model(model_path).input_dims  # the file's own dims (inspected already)
    spec = BuildSpec(precisions=tuple(dict.fromkeys([*b.precision, s.precision])), batch_size=batch,
                     shapes=recipe_shapes(recipe.input_shapes, dims, batch), workspace_mb=b.workspace_mb,
                     optimization_level=b.optimization_level,
                     timing_cache=b.timing_cache, tactic_sources=tuple(b.tactic_sources) or None,
                     constraints=b.constraints)
    scorer = EngineScorer(cpu, model_path, amax, spec, s.precision,
                          pin_rules(cpu.model, layers) if s.pin_int8 else (), recipe.calibration.carrier, trt, cuda)
    found = search(scorer, ranking, target, overrides)
    rows = sorted(scorer.rows.values(), key=lambda r: r["float_layers"])
    best = scorer.rows[Scorer._key(found["float_layers"], overrides)]
    fast = [r for r in rows if r["engine_score"] >= target and (r["speedup_vs_fp16"] or 0) >= s.min_speedup]
    meets = [r for r in rows if r["engine_score"] >= target]
    quick = [r for r in rows if (r["speedup_vs_fp16"] or 0) >= s.min_speedup] if s.min_speedup else []
    frontier = {"fastest_meeting_budget": max(meets, key=lambda r: r["speedup_vs_fp16"] or 0, default=None),
                "best_meeting_speed": max(quick, key=lambda r: r["engine_score"], default=None)}
    return {"float_layers": found["float_layers"], "score": found["score"], "met": found["met"],
            "median_ms": best["median_ms"], "speedup_vs_fp16": best["speedup_vs_fp16"],
            "fp16_ms": scorer.fp16_ms, "batch": batch, "pin_int8": s.pin_int8,
            "min_speedup": s.min_speedup, "speed_met": bool(fast) if s.min_speedup else None,
            "variants": rows, "engines_built": scorer.runs + 1, **frontier}
