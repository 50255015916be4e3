"""The CPU side of qdq_table.py: each of calib's Q/DQ placements (and ModelOpt's model) of one qdq22 model run as
ONNX Runtime fake-quant on the same evaluation images, accuracy against ONNX Runtime FP32 with qdq_table's own
scoring. Tells a placement's accuracy before a GPU lease builds its engine.

    python benchmarks/qdq_simulate.py --data benchmarks/gpu-stage/qdq22 --model yolov8n [--batch 4]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from qdq_models import MODELS, to_input  # noqa: E402
from qdq_table import RESIDUAL, accuracy, align, calib_qdq, run_all  # noqa: E402

FIELDS = ("map50_vs_fp32", "map50_95_vs_fp32", "box_sqnr_db", "score_sqnr_db", "top1_agreement", "logits_sqnr_db")


def main(argv=None) -> int:
    from calib.runners.onnxruntime import OrtRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="qdq_prepare.py's folder (manifest.json, one folder per model)")
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args(argv)
    root = Path(args.data)
    man = json.loads((root / "manifest.json").read_text())["models"][args.model]
    d, m = root / args.model, MODELS[args.model]
    u8 = np.load(d / man["eval"]["file"])
    u8 = u8 if isinstance(u8, np.ndarray) else u8[man["eval"].get("key", "images")]
    x = to_input(u8, m)
    model, cache = d / man["model"], d / man["caches"][man["best"]]
    ref = run_all(OrtRunner(model), m.input, x, args.batch)
    variants = {"calib-qdq": None, **RESIDUAL}  # None: the default placement
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, residual in variants.items():
            q = Path(tmp) / f"{name}.onnx"
            calib_qdq(cache, model, q, residual=residual)
            rows[name] = accuracy(align(run_all(OrtRunner(q), m.input, x, args.batch), ref), ref, m, args.batch)
    if (man.get("modelopt") or {}).get("file"):
        q = d / man["modelopt"]["file"]
        rows["modelopt-qdq"] = accuracy(align(run_all(OrtRunner(q), m.input, x, args.batch), ref), ref, m,
                                        args.batch)
    keys = [k for k in FIELDS if any(k in r for r in rows.values())]
    print(f"{args.model}: {len(x)} evaluation images, {man['best']} cache, ONNX Runtime fake-quant against FP32")
    print("| placement | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.4g}" if isinstance(r.get(k), float) else str(r.get(k, "-"))
                                         for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
