"""`calib recover --backend tensorrt`: the recovered configuration checked on real engines.

The search runs on the CPU simulation. Afterwards the FP16 engine, the all-INT8 engine and the engine of the chosen
configuration are built with TensorRT from the files recover wrote (the cache with the float layers as layer
precisions for the implicit build, the Q/DQ model, or the FP16+INT8 model where TensorRT types networks strongly),
each run on the held-out samples against the same FP32 reference and metric, and timed as CUDA graphs (enqueued
where the work cannot be captured). What the report then says of each: its figure on the engine beside the
simulation's, and its latency against the FP16 engine's.
"""
from __future__ import annotations

import dataclasses
import logging
import tempfile
from pathlib import Path

from calib.runners.tensorrt.inspect import counts_text

log = logging.getLogger(__name__)


def verify(stage: Path, res: dict, recovery, state, trt=None, cuda=None) -> dict:
    """Build, run and time the engines of `state` (the chosen configuration) with the files recover staged in
    `stage`, and, with spec.engine_curve, of every point of the fallback curve (the ranking's first k layers in
    float) while the time budget lasts; returns recover.json's "engines" entry."""
    from calib.runners.tensorrt import compat
    from calib.runners.tensorrt.builder import build
    from calib.runners.tensorrt.runner import TrtRunner, graph_latency
    from calib.search.macs import int8_share
    from calib.search.measure import _chunks

    trt = trt or compat.load()
    if cuda is None:
        from calib.runners.tensorrt.device import Cuda

        cuda = Cuda()
    m = recovery.measure
    first = next(_chunks(m.batches[0][0], m.step))  # timed as the model takes it (a short batch: the runner pads it)
    timing = first if m.info.layout is None or m.info.layout.identity else m.info.layout.to_model(first)
    floats = [f["layer"] for f in res["float_layers"]]
    simulated = {"all INT8": res["steps"][0]["value"], "recovered": res["value"]}
    jobs = Jobs(stage, res, recovery, state, trt)
    rows, note = [], jobs.note
    with tempfile.TemporaryDirectory(prefix="calib-curve-") as tmp:
        todo = jobs.main(Path(tmp)) + (jobs.curve(Path(tmp), floats) if recovery.spec.engine_curve else [])
        for i, (name, layers, path, bspec, calibrator) in enumerate(todo):
            if name.startswith("curve") and recovery.clock.out():
                note = (f"{len(todo) - i} point{'s' if len(todo) - i != 1 else ''} of the fallback curve not built: "
                        "the time budget is spent")
                break
            built = build(path, bspec, calibrator, trt, cuda)
            runner = TrtRunner(built.plan, trt, cuda, label=f"{name} engine")
            try:
                pts = m.points(m.outputs_of(runner))
                lat = graph_latency(runner, timing, f"{name} engine") or runner.latency(timing)
            finally:
                runner.close()
            rows.append({"engine": name, "value": pts.get(recovery.key), "median_ms": lat["median_ms"],
                         "cuda_graph": bool(lat.get("cuda_graph")), "layer_summary": built.info["layer_summary"],
                         "build_s": round(built.seconds, 1), "float_layers": None if layers is None else len(layers),
                         "int8_macs_share": None if layers is None else int8_share(recovery.macs, layers)})
            log.info("%s engine: %s %s, %.4f ms", name, recovery.key, pts.get(recovery.key), lat["median_ms"])
    curve = {c["float_layers"]: c["value"] for c in res.get("fallback_curve") or ()}
    fp16 = rows[0]["median_ms"]
    for r in rows:
        r.update(x_vs_fp16=round(fp16 / r["median_ms"], 3) if r["median_ms"] else None,
                 simulated=simulated.get(r["engine"], curve.get(r["float_layers"]) if r["engine"].startswith(
                     "curve") else None))
    return {"tensorrt": trt.__version__, "gpu": cuda.name(), "batch": m.step, "metric": recovery.key, "rows": rows,
            "note": note}


class Jobs:
    """The engines to build: (name, the layers in float (None: the FP16 engine), model file, BuildSpec,
    calibrator) each."""

    def __init__(self, stage: Path, res: dict, recovery, state, trt):
        from calib.runners.tensorrt import compat

        self.stage, self.res, self.recovery, self.state, self.trt = stage, res, recovery, state, trt
        self.b, self.deploy = recovery.measure.step, recovery.spec.deploy
        self.amax = state.scales()
        self.note = None
        if self.deploy == "fp16":
            major = compat.version(trt)[0]
            if major < 10 or not res.get("fp16_model"):
                self.note = (f"the FP16+INT8 model is not built: TensorRT {trt.__version__} does not type networks "
                             "strongly (10 and later do)" if major < 10 else "no FP16+INT8 model was written")

    def _spec(self, layers=(), precisions: dict | None = None):
        """The build of `layers` in float, each in its `precisions` entry (default: the spec's precision)."""
        from calib.runners.tensorrt.builder import BuildSpec

        if self.deploy == "fp16":
            return BuildSpec(precisions=("fp16", "int8"), batch_size=self.b, strongly_typed=True)
        if self.deploy == "qdq":
            return BuildSpec(precisions=("int8", "fp16"), batch_size=self.b)
        from calib.quantize.qdq import quantizable_layers
        from calib.search.engines import pin_rules

        # every quantizable layer asked in INT8 (TensorRT would otherwise keep some in float where that is faster,
        # and the engine would not be the configuration simulated), then the float layers
        precisions = precisions or {}
        rules = pin_rules(self.state.model, quantizable_layers(self.state.model)) + tuple(
            f"{n}={precisions.get(n, self.recovery.spec.precision)}" for n in layers)
        return BuildSpec(precisions=("int8", "fp16"), batch_size=self.b, layer_precisions=rules)

    def _calibrator(self):
        from calib.runners.tensorrt.calibrators import cache_calibrator

        return cache_calibrator(self.amax, self.trt, self.recovery.spec.carrier) if self.deploy == "implicit" else None

    def main(self, tmp: Path) -> list:
        from calib.runners.tensorrt.builder import BuildSpec

        res, stage = self.res, self.stage
        written = Path(res["model_file"]).name  # the adjusted FP32 model, where a step changed the weights
        model_file = stage / written if written in res["files"] else Path(self.recovery.model_path)
        floats = [f["layer"] for f in res["float_layers"]]
        jobs = [("fp16", None, str(self.recovery.model_path), BuildSpec(precisions=("fp32", "fp16"),
                                                                       batch_size=self.b), None)]
        if self.note is not None:
            return jobs
        jobs.append(("all INT8", (), self._model(tmp, ())[0], self._spec(), self._calibrator()))
        if not floats:
            return jobs
        if self.deploy == "implicit":  # precisions as in layer_precisions.txt (fp32 where FP16 cannot hold)
            spec = self._spec(floats, {f["layer"]: f["precision"] for f in res["float_layers"]})
            jobs.append(("recovered", floats, str(model_file), spec, self._calibrator()))
        else:
            model = res["qdq_model"] if self.deploy == "qdq" else res["fp16_model"]
            jobs.append(("recovered", floats, str(stage / model), self._spec(), None))
        return jobs

    def curve(self, tmp: Path, floats: list) -> list:
        """The fallback curve's points other than all INT8 and the chosen configuration, fewest layers first."""
        if self.note is not None:
            return []
        order, built = self.recovery.order, {frozenset(floats), frozenset()}
        jobs = []
        for c in sorted(self.res.get("fallback_curve") or (), key=lambda c: c["float_layers"]):
            layers = tuple(order[:c["float_layers"]])
            if frozenset(layers) in built:
                continue
            built.add(frozenset(layers))
            path, int8 = self._model(tmp, layers)
            spec = self._spec(layers)
            if not int8:  # every quantizable layer in float: no Q/DQ left to build
                spec = dataclasses.replace(spec, precisions=("fp32", "fp16"))
            jobs.append((f"curve: {len(layers)} in float", list(layers), path, spec, self._calibrator()))
        return jobs

    def _model(self, folder: Path, layers: tuple) -> tuple[str, bool]:
        """The model file that builds `layers` in float: the original (the weights unchanged), the weights for
        them (implicit), their Q/DQ model or their FP16+INT8 model; and whether a Q/DQ model holds any pair (True
        for the others)."""
        from calib.quantize.qdq import Exclusions, insert_qdq

        weights = self.state.weights_for(layers)
        name = f"float{len(layers)}"
        if self.deploy == "implicit":
            if not self.state.weights:
                return str(self.recovery.model_path), True
            data, name = weights.SerializeToString(), name + ".onnx"
        elif self.deploy == "qdq":
            q = insert_qdq(weights, self.amax, Exclusions(tuple(layers)))
            (folder / f"{name}.qdq.onnx").write_bytes(q.SerializeToString())
            return str(folder / f"{name}.qdq.onnx"), any(n.op_type == "QuantizeLinear" for n in q.graph.node)
        else:
            from calib.quantize.fp16_model import make_fp16_model

            data = make_fp16_model(weights, self.amax, self.recovery.ranges, "the calibration pass",
                                   exclude=Exclusions(tuple(layers)), label=name).model.SerializeToString()
            name += ".fp16.qdq.onnx"
        (folder / name).write_bytes(data)
        return str(folder / name), True


def markdown(e: dict) -> list[str]:
    """recover.md's section for the engines."""
    if not e:
        return []
    lines = ["## On TensorRT engines", "",
             f"TensorRT {e['tensorrt']}, {e['gpu']}, batch {e['batch']}; {e['metric']} on the held-out samples "
             "against the same FP32 reference; latency as CUDA graphs (the GPU's time) where the engine's work "
             "could be captured. The curve's rows are the fallback's other measured points (the ranking's first k "
             "layers in float), each built and timed as well.", "",
             f"| engine | layers in float | multiply-adds in INT8 | {e['metric']} on the engine | simulated | "
             "median ms | x FP16 | layers per precision |", "|---|---|---|---|---|---|---|---|"]
    fmt = (lambda v: "-" if v is None else f"{v:.4g}")
    for r in e["rows"]:
        layers = counts_text(r["layer_summary"])
        k, share = r.get("float_layers"), r.get("int8_macs_share")
        lines.append(f"| {r['engine']} | {'-' if k is None else k} | "
                     f"{'-' if share is None else f'{100 * share:.1f} %'} | {fmt(r['value'])} | "
                     f"{fmt(r['simulated'])} | {r['median_ms']:.4f}"
                     f"{'' if r['cuda_graph'] else ' (enqueued)'} | {fmt(r['x_vs_fp16'])} | {layers} |")
    if e.get("note"):
        lines += ["", e["note"] + "."]
    return lines + [""]

