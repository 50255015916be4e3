"""NNCF's `quantize_with_accuracy_control` on the model, data and metric of one `calib recover` run: the peer
baseline of benchmarks/bench_recover.py, run in NNCF's own Python (never a dependency of calib).

    NNCF_PYTHON benchmarks/nncf_control.py --work WORK --max-drop 0.05 --scorer 'CALIB_PYTHON recover_scorer.py ...'

The scorer (benchmarks/recover_scorer.py, in calib's Python) writes WORK/model.onnx, calibration.npz and
validation.npz and scores any outputs on the held-out items with calib's own metric function. Here: nncf.quantize
(the starting point), then quantize_with_accuracy_control(max_drop, absolute drop) with a validation function that
runs each model in ONNX Runtime (basic graph optimizations: Q/DQ pairs stay fake-quantized, as calib simulates
them) and asks the scorer. Every full-set validation is written to WORK/nncf_log.jsonl as it happens, so a run cut
off at its time cap still tells how far it got. The result goes to WORK/nncf.json.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")


class Scorer:
    def __init__(self, command: str):
        self.proc = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = json.loads(self.proc.stdout.readline())
        self.tmp = Path(tempfile.mkdtemp()) / "outputs.npz"

    def value(self, outs: dict) -> float:
        np.savez(self.tmp, **{f"{i}/{k}": v for i, o in outs.items() for k, v in o.items()})
        self.proc.stdin.write(f"{self.tmp}\n")
        self.proc.stdin.flush()
        v = json.loads(self.proc.stdout.readline())["value"]
        return 1.0 if v is None else v  # nothing to compare on these items (e.g. FP32 finds no box): no loss


def items(path: Path) -> list:
    a = np.load(path)
    out: dict = {}
    for k in a.files:
        i, name = k.split("/", 1)
        out.setdefault(int(i), {})[name] = a[k]
    return [(i, out[i]) for i in sorted(out)]


def session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def float_weighted(model) -> set:
    """Names of the Conv/ConvTranspose/Gemm/MatMul nodes whose inputs come through no DequantizeLinear."""
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    return {n.name for n in model.graph.node if n.op_type in WEIGHTED
            and not any(made.get(x) == "DequantizeLinear" for x in n.input[:2])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--scorer", required=True)
    ap.add_argument("--max-drop", type=float, required=True)
    ap.add_argument("--model-type", choices=["TRANSFORMER"], help="NNCF's model_type (its advice for transformers)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    import nncf
    import onnx

    scorer = Scorer(a.scorer)
    model = onnx.load(str(a.work / "model.onnx"))
    cal, val = items(a.work / "calibration.npz"), items(a.work / "validation.npz")
    log = (a.work / "nncf_log.jsonl").open("w")

    def validate(m, data) -> float:
        s = session(m)
        names = [o.name for o in s.get_outputs()]
        outs = {i: dict(zip(names, s.run(None, feeds))) for i, feeds in data}
        v = scorer.value(outs)
        if len(outs) == len(val):
            log.write(json.dumps({"s": round(time.perf_counter() - t0, 1), "value": v, "float": len(float_weighted(m)),
                                  "fp32": not any(n.op_type == "QuantizeLinear" for n in m.graph.node)}) + "\n")
            log.flush()
        return v

    calibration = nncf.Dataset(cal, lambda item: item[1])
    validation = nncf.Dataset(val, lambda item: item)
    t1 = time.perf_counter()
    # TensorRT's INT8 takes zero points of 0 only: the transformer type's default preset (MIXED) makes asymmetric
    # activations (21 of MiniLM's 36 quantizers), so the symmetric preset is asked for with it
    kind = ({"model_type": nncf.ModelType[a.model_type], "preset": nncf.QuantizationPreset.PERFORMANCE}
            if a.model_type else {})
    plain = nncf.quantize(model, calibration, subset_size=len(cal), **kind)
    plain_s = time.perf_counter() - t1
    plain_value = validate(plain, val)
    base = float_weighted(plain)
    t1 = time.perf_counter()
    res = nncf.quantize_with_accuracy_control(model, calibration, validation, validation_fn=validate,
                                              max_drop=a.max_drop, drop_type=nncf.DropType.ABSOLUTE,
                                              subset_size=len(cal), **kind)
    control_s = time.perf_counter() - t1
    value = validate(res, val)
    reverted = sorted(float_weighted(res) - base)
    out = {"nncf": nncf.__version__, "fp32": scorer.info["fp32"], "quantize": plain_value, "quantize_s": plain_s,
           "value": value, "seconds": control_s, "float_layers": len(reverted), "reverted": reverted,
           "weighted_layers": sum(n.op_type in WEIGHTED for n in model.graph.node),
           "calibration_items": len(cal), "validation_items": len(val)}
    tmp = a.work / "nncf.tmp.json"
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(a.work / "nncf.json")
    scorer.proc.stdin.close()


if __name__ == "__main__":
    main()
