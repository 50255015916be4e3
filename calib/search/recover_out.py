"""What `calib recover` publishes: the cache and its sidecar, the adjusted FP32 model where a step changed the
weights (the cache is for it), the Q/DQ model of the chosen configuration, the layer-precision file, and the
report (recover.json, recover.md) with the deploy commands per TensorRT version."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from calib.deploy.precision import float_input_writers
from calib.evaluate.deploy_doc import deploy_commands
from calib.io.files import atomic_write_bytes, atomic_write_json, atomic_write_text
from calib.quantize.cache import Sidecar, write_cache, write_sidecar
from calib.quantize.qdq import Exclusions, insert_qdq
from calib.version import __version__

log = logging.getLogger(__name__)
CACHE = "recovered.cache"
SIMULATED = {"implicit": "the implicit INT8 engine built from the cache (--deploy implicit)",
             "qdq": "the engine built from the Q/DQ model (--deploy qdq)",
             "fp16": "the FP16+INT8 model (--deploy fp16: TensorRT 10/11 strongly typed, float layers in FP16)"}


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def _ci(ci) -> str:
    return f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci and ci[0] is not None else ""


def write_outputs(stage: Path, out: Path, res: dict, recovery, command: str | None) -> dict:
    state = res.pop("_state")
    spec = recovery.spec
    stem = Path(res["model"]).stem
    files = [CACHE, CACHE.replace(".cache", ".json"), "layer_precisions.txt", "exclude.txt", "recover.json",
             "recover.md"]
    model_file, sha = Path(res["model"]), recovery.info.sha256
    weights = state.deployed()
    if state.weights:  # the cache's scales are for these weights: written beside it, named as such
        data = weights.SerializeToString()
        name = f"{stem}.recovered.onnx"
        atomic_write_bytes(stage / name, data)
        model_file, sha = out / name, hashlib.sha256(data).hexdigest()
        files.append(name)
    amax = state.scales()
    p = write_cache(stage / CACHE, amax, spec.trt_version, spec.carrier)
    write_sidecar(p, Sidecar(f"recover:{state.algorithm}", {"per_tensor": res["per_tensor"],
                                                           "steps": state.weights}, amax, sha,
                             recovery.fingerprint, __version__, spec.trt_version, spec.carrier, recovery.samples))
    floats = [f["layer"] for f in res["float_layers"]]
    qdq = f"{stem}.recovered.qdq.onnx"
    atomic_write_bytes(stage / qdq, insert_qdq(weights, amax, Exclusions(tuple(floats))).SerializeToString())
    files.append(qdq)
    fp16, fp32_nodes = _fp16_model(stage, stem, weights, amax, floats, recovery.ranges)
    files += [fp16] if fp16 else []
    for f in res["float_layers"]:  # FP16 cannot hold what the calibration pass saw there: FP32
        if f["precision"] == "fp16" and f["layer"] in fp32_nodes:
            f.update(precision="fp32", why_fp32=fp32_nodes[f["layer"]])
    atomic_write_text(stage / "layer_precisions.txt", "".join(f"{f['layer']}={f['precision']}\n"
                                                              for f in res["float_layers"]))
    atomic_write_text(stage / "exclude.txt", "".join(f"{n}\n" for n in floats))
    res.update(files=sorted(files), cache=CACHE, model_file=str(model_file), qdq_model=qdq, fp16_model=fp16,
               command=command)
    doc = {"out_dir": str(out), "model_file": str(model_file), "caches": {"recovered": str(out / CACHE)},
           "exclude": floats, "float_layers": floats, "float_writers": float_input_writers(weights, floats),
           "qdq_model": qdq, "fp16_model": fp16}
    res["deploy"] = deploy_commands(doc, "recovered")
    rewrite_report(stage, res)
    return res


def rewrite_report(stage: Path, res: dict) -> None:
    """recover.json and recover.md from `res` (again, once the engines are measured)."""
    atomic_write_json(stage / "recover.json", res)
    atomic_write_text(stage / "recover.md", markdown(res))


def _fp16_model(stage: Path, stem: str, weights, amax: dict, floats, ranges: dict) -> tuple[str | None, dict]:
    """The FP16+INT8 model (strongly typed TensorRT 10.x, 11.x), and its nodes FP16 cannot hold (node -> why, from
    the calibration pass's ranges); (None, {}) where this model cannot be made one."""
    from calib.errors import CalibError
    from calib.quantize.fp16_model import make_fp16_model

    name = f"{stem}.recovered.fp16.qdq.onnx"
    try:
        f = make_fp16_model(weights, amax, ranges, "the calibration pass", exclude=Exclusions(tuple(floats)),
                            label=stem)
    except CalibError as exc:
        log.warning("no FP16+INT8 model: %s", exc)
        return None, {}
    atomic_write_bytes(stage / name, f.model.SerializeToString())
    return name, {r["node"]: f"{r['rule']}: {r['reason']}" for r in f.fp32_table()}


def summary_line(res: dict) -> str:
    """The result in one line, for the terminal."""
    if res["already_met"]:
        return (f"already meets the target: all INT8 ({res['algorithm']}) {res['metric']} {_fmt(res['value'])} "
                f"({res['target']}); nothing to recover")
    share = res.get("int8_macs_share")
    speed = f", {100 * share:.0f} % of the multiply-adds in INT8" if share is not None else ""
    head = "meets the target" if res["met"] else "does NOT meet the target"
    if res["met"] and share is not None and share < 0.5:
        head = (f"meets the target only with {'no' if share == 0 else 'a minority of'} multiply-adds left in INT8 "
                "(not faster than FP16: the report's curve shows what each share of INT8 costs)")
    late = " (time budget spent: best so far)" if res.get("out_of_time") else ""
    return (f"{head}{late}: {res['metric']} {_fmt(res['value'])} ({res['target']}) with "
            f"{len(res['float_layers'])} layer{'s' if len(res['float_layers']) != 1 else ''} in float{speed}; steps kept: "
            + (", ".join(s["step"] for s in res["steps"][1:] if s["kept"]) or "none"))


def markdown(res: dict) -> str:
    lines = [f"# Recovery: {Path(res['model']).name}", "",
             f"Target: **{res['target']}** on {res['evaluation_samples']} held-out samples "
             f"({res['calibration_samples']} calibration samples); FP32: {_fmt(res['fp32_value'])}. Every figure "
             f"is of {SIMULATED.get(res.get('simulated'), 'the deployed build')}, simulated on the CPU.", "",
             f"**{summary_line(res)}**", ""]
    lines += ["## Steps", "", "Each step is measured on the held-out samples (95 % bootstrap interval) and kept "
              "only where it raises the target figure.", "",
              "| step | before | after [95 % interval] | kept | what |", "|---|---|---|---|---|"]
    for s in res["steps"]:
        lines.append(f"| {s['step']} | {_fmt(s['before'])} | {_fmt(s['value'])}{_ci(s['ci95'])} | "
                     f"{'yes' if s['kept'] else 'no'} | {s['note']} |")
    share = res.get("int8_macs_share")
    lines += ["", "## Layers kept in float", ""]
    if res["float_layers"]:
        lines += [f"| layer | precision | target figure with only it in float (on the {res['ranking_samples']} "
                  "samples the ranking used) |", "|---|---|---|"]
        lines += [f"| `{f['layer']}` | {f['precision']}{' (' + f['why_fp32'] + ')' if f.get('why_fp32') else ''} | "
                  f"{_fmt(f['alone_in_float'])} |" for f in res["float_layers"]]
        lines.append("")
        lines.append("They are the first layers of the ranking (each layer alone in float, the target figure "
                     "measured) whose fallback meets the target: the fewest found by bisection.")
    else:
        lines.append("None: every quantizable layer stays in INT8.")
    if res.get("fallback_curve"):
        lines += ["", "Measured on the way (the ranking's first k layers in float):", "",
                  "| layers in float | figure | multiply-adds in INT8 |", "|---|---|---|"]
        lines += [f"| {c['float_layers']} | {_fmt(c['value'])} | "
                  + (f"{100 * c['int8_macs_share']:.1f} % |" if c["int8_macs_share"] is not None else "- |")
                  for c in res["fallback_curve"]]
    lines += ["", "## Predicted speed", "",
              (f"{100 * share:.1f} % of the model's multiply-adds (Conv, MatMul, Gemm) stay in INT8; the rest run "
               "in FP16. A configuration pays against FP16 only where most of them do; measure the engine "
               "(`calib bench`) to be sure." if share is not None else "No multiply-add count (shape inference "
                                                                       "failed)."), ""]
    if res.get("engines"):
        from calib.search.recover_engines import markdown as engine_lines

        lines += engine_lines(res["engines"])
    lines += ["## Deploy", "", "```", res["deploy"], "```", ""]
    if res.get("command"):
        lines += ["## Command", "", f"    {res['command']}", ""]
    lines.append(f"{res['variants_measured']} configurations measured in {res['seconds']:.0f} s.")
    return "\n".join(lines) + "\n"
