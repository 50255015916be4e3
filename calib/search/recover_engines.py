"""`calib recover --backend tensorrt`: the recovered configuration checked on real engines.

The search runs on the CPU simulation. Afterwards the FP16 engine, the all-INT8 engine and the engine of the chosen
configuration are built with TensorRT from the files recover wrote (the cache with the float layers as layer
precisions for the implicit build, the Q/DQ model, or the FP16+INT8 model where TensorRT types networks strongly),
each run on the held-out samples against the same FP32 reference and metric, and timed as CUDA graphs (enqueued
where the work cannot be captured). What the report then says of each: its figure on the engine beside the
simulation's, and its latency against the FP16 engine's.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def verify(stage: Path, res: dict, recovery, state, trt=None, cuda=None) -> dict:
    """Build, run and time the engines of `state` (the chosen configuration) with the files recover staged in
    `stage`; returns recover.json's "engines" entry."""
    from calib.quantize.qdq import Exclusions, insert_qdq
    from calib.runners.tensorrt import compat
    from calib.runners.tensorrt.builder import BuildSpec, build
    from calib.runners.tensorrt.calibrators import cache_calibrator
    from calib.runners.tensorrt.runner import TrtRunner, graph_latency
    from calib.search.engines import pin_rules
    from calib.search.measure import _chunks

    trt = trt or compat.load()
    if cuda is None:
        from calib.runners.tensorrt.device import Cuda

        cuda = Cuda()
    spec, m = recovery.spec, recovery.measure
    b = m.step
    first = next(_chunks(m.batches[0][0], b))  # timed as the model takes it (a short batch: the runner pads it)
    timing = first if m.info.layout is None or m.info.layout.identity else m.info.layout.to_model(first)
    written = Path(res["model_file"]).name  # the adjusted FP32 model, where a step changed the weights
    model_file = stage / written if written in res["files"] else Path(recovery.model_path)
    floats = [f["layer"] for f in res["float_layers"]]
    amax = state.scales()
    simulated = {"all INT8": res["steps"][0]["value"], "recovered": res["value"]}
    carrier = spec.carrier
    jobs: list[tuple[str, object, BuildSpec, object]] = [
        ("fp16", str(recovery.model_path), BuildSpec(precisions=("fp32", "fp16"), batch_size=b), None)]
    note = None
    if spec.deploy == "implicit":
        rules = pin_rules(state.model, floats) + tuple(f"{f['layer']}={f['precision']}" for f in res["float_layers"])
        jobs.append(("all INT8", str(model_file), BuildSpec(precisions=("int8", "fp16"), batch_size=b),
                     cache_calibrator(amax, trt, carrier)))
        if floats:
            jobs.append(("recovered", str(model_file), BuildSpec(precisions=("int8", "fp16"), batch_size=b,
                                                                 layer_precisions=rules),
                         cache_calibrator(amax, trt, carrier)))
    elif spec.deploy == "qdq":
        whole = stage / "all-int8.qdq.onnx"
        whole.write_bytes(insert_qdq(state.deployed(), amax, Exclusions()).SerializeToString())
        jobs.append(("all INT8", str(whole), BuildSpec(precisions=("int8", "fp16"), batch_size=b), None))
        if floats:
            jobs.append(("recovered", str(stage / res["qdq_model"]), BuildSpec(precisions=("int8", "fp16"),
                                                                             batch_size=b), None))
    else:  # the FP16+INT8 model: strongly typed, TensorRT 10 and later
        major = compat.version(trt)[0]
        if major < 10 or not res.get("fp16_model"):
            note = (f"the FP16+INT8 model is not built: TensorRT {trt.__version__} does not type networks strongly "
                    "(10 and later do)" if major < 10 else "no FP16+INT8 model was written")
        else:
            jobs.append(("recovered", str(stage / res["fp16_model"]),
                         BuildSpec(precisions=("fp16", "int8"), batch_size=b, strongly_typed=True), None))
    rows = []
    for name, path, bspec, calibrator in jobs:
        built = build(path, bspec, calibrator, trt, cuda)
        runner = TrtRunner(built.plan, trt, cuda, label=f"{name} engine")
        try:
            pts = m.points(m.outputs_of(runner))
            lat = graph_latency(runner, timing, f"{name} engine") or runner.latency(timing)
        finally:
            runner.close()
        rows.append({"engine": name, "value": pts.get(recovery.key), "median_ms": lat["median_ms"],
                     "cuda_graph": bool(lat.get("cuda_graph")), "layer_summary": built.info["layer_summary"],
                     "build_s": round(built.seconds, 1)})
        log.info("%s engine: %s %s, %.4f ms", name, recovery.key, pts.get(recovery.key), lat["median_ms"])
    fp16 = rows[0]["median_ms"]
    for r in rows:
        r.update(x_vs_fp16=round(fp16 / r["median_ms"], 3) if r["median_ms"] else None,
                 simulated=simulated.get(r["engine"]))
    return {"tensorrt": trt.__version__, "gpu": cuda.name(), "batch": b, "metric": recovery.key, "rows": rows,
            "note": note}


def markdown(e: dict) -> list[str]:
    """recover.md's section for the engines."""
    if not e:
        return []
    lines = ["## On TensorRT engines", "",
             f"TensorRT {e['tensorrt']}, {e['gpu']}, batch {e['batch']}; {e['metric']} on the held-out samples "
             "against the same FP32 reference; latency as CUDA graphs (the GPU's time) where the engine's work "
             "could be captured.", "",
             f"| engine | {e['metric']} on the engine | simulated | median ms | x FP16 | layers per precision |",
             "|---|---|---|---|---|---|"]
    fmt = (lambda v: "-" if v is None else f"{v:.4g}")
    for r in e["rows"]:
        layers = ", ".join(f"{k} {v}" for k, v in sorted(r["layer_summary"].items()))
        lines.append(f"| {r['engine']} | {fmt(r['value'])} | {fmt(r['simulated'])} | {r['median_ms']:.4f}"
                     f"{'' if r['cuda_graph'] else ' (enqueued)'} | {fmt(r['x_vs_fp16'])} | {layers} |")
    if e.get("note"):
        lines += ["", e["note"] + "."]
    return lines + [""]

