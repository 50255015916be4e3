"""calib's FP16+INT8 model beside ModelOpt's (its default high_precision_dtype='fp16'), from the same cache, on the
same images, on the CPU: both run through calib.deploy.emulate (FP16 rounding where each model is FP16) and are
compared with FP32 (ONNX Runtime). ModelOpt runs from its own environment (benchmarks/qdq_modelopt.py).

    python benchmarks/fp16_modelopt.py --stage STAGE --modelopt-python PYTHON [--models yolov3-tiny,mbv2]

STAGE is benchmarks/qdq_prepare.py's output folder (qdq22/manifest.json, qdq22/<model>/{model.onnx,<algo>.cache,
eval_u8.npz} and calib-data/<model>/calib_f32.npy). Prints a table per model: output SQNR against FP32 (and
top-1 agreement for MobileNetV2), the layers each model leaves in FP32, its casts and Q/DQ nodes; the difference
calib - ModelOpt in dB.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from qdq_models import MODELS, to_input  # noqa: E402

from calib.deploy.emulate import Fp16Runner  # noqa: E402
from calib.quantize.model import elem_types  # noqa: E402
from calib.runners.onnxruntime import OrtRunner  # noqa: E402

MBV2 = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"


def sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    ref, err = ref.astype(np.float64), got.astype(np.float64) - ref
    return float(10 * np.log10((ref ** 2).sum() / max((err ** 2).sum(), 1e-30)))


def shape_facts(model: onnx.ModelProto) -> dict:
    """Layers computing in FP32 (float outputs FP32, Q/DQ and Casts aside), casts, Q/DQ nodes, the scales' types."""
    types = elem_types(model)
    inits = {t.name: t.data_type for t in model.graph.initializer}
    skip = ("QuantizeLinear", "DequantizeLinear", "Cast")
    fp32 = sum(1 for n in model.graph.node if n.op_type not in skip
               and any(types.get(o) == onnx.TensorProto.FLOAT for o in n.output))
    scales = {onnx.TensorProto.DataType.Name(inits[n.input[1]]) for n in model.graph.node
              if n.op_type in skip[:2] and n.input[1] in inits}
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return {"fp32_layers": fp32, "casts": sum(n.op_type == "Cast" for n in model.graph.node),
            "qdq_nodes": sum(n.op_type in skip[:2] for n in model.graph.node), "scale_types": sorted(scales),
            "opset": opset}


def one(key: str, stage: Path, py: str, work: Path) -> dict:
    m = MODELS[key]
    d = stage / "qdq22" / key
    model = MBV2 if key == "mbv2" else d / "model.onnx"
    best = json.loads((stage / "qdq22" / "manifest.json").read_text())["models"][key]["best"]  # qdq_prepare's pick
    cache = d / f"{best}.cache"
    ours, theirs = work / f"{key}.calib.fp16.onnx", work / f"{key}.modelopt.fp16.onnx"
    subprocess.run([sys.executable, "-m", "calib", "--quiet", "cache", "convert", str(cache), "--model", str(model),
                    "--to", "qdq", "--float-type", "fp16", "-o", str(ours)], check=True, cwd=ROOT,
                   capture_output=True)
    mo = subprocess.run([py, str(ROOT / "benchmarks" / "qdq_modelopt.py"), str(model), str(cache),
                         str(stage / "calib-data" / key / "calib_f32.npy"), str(theirs), "fp16"],
                        check=True, capture_output=True, text=True)
    x = to_input(np.load(d / "eval_u8.npz")["images"], m)
    outs = [o.name for o in onnx.load(str(model), load_external_data=False).graph.output]

    def outputs(runner) -> dict:
        parts = [runner.run({m.input: x[i:i + 16]}) for i in range(0, len(x), 16)]
        return {o: np.concatenate([p[o] for p in parts]) for o in outs}

    ref = outputs(OrtRunner(model))
    rows = {}
    for who, path in (("calib", ours), ("ModelOpt", theirs)):
        q = onnx.load(str(path))
        got = outputs(Fp16Runner(q))
        row = {f"{o} SQNR dB": round(sqnr(ref[o], got[o]), 2) for o in outs}
        if m.task == "classification":
            row["top-1 agreement"] = round(float((got[outs[0]].argmax(1) == ref[outs[0]].argmax(1)).mean()), 4)
        rows[who] = {**row, **shape_facts(q)}
    return {"model": key, "cache": f"{best}.cache", "images": int(len(x)), "rows": rows,
            "modelopt": json.loads(mo.stdout.strip().splitlines()[-1])["version"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", required=True, type=Path)
    ap.add_argument("--modelopt-python", required=True)
    ap.add_argument("--models", default="yolov3-tiny,mbv2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models.split(","):
            res = one(key, args.stage, args.modelopt_python, Path(tmp))
            c, o = res["rows"]["calib"], res["rows"]["ModelOpt"]
            print(f"\n{key}: {res['cache']}, {res['images']} images, against FP32 (ONNX Runtime), ModelOpt "
                  f"{res['modelopt']}, FP16 emulated on the CPU")
            keys = list(c)
            print("| model | " + " | ".join(keys) + " |")
            print("|---" * (len(keys) + 1) + "|")
            for who, row in res["rows"].items():
                print(f"| {who} | " + " | ".join(str(row[k]) for k in keys) + " |")
            print("calib - ModelOpt: " + ", ".join(f"{k} {c[k] - o[k]:+.2f}" for k in keys if k.endswith("dB")))


if __name__ == "__main__":
    main()
