"""MobileNetV2 on the 256 golden photos with real TensorRT, batch 32: FP32, FP16, INT8 from TensorRT's own
EntropyCalibrator2, INT8 from each calib algorithm's cache, and INT8 with layers kept in FP16 (the fallback
search's lists). Top-1 agreement with the FP32 engine and with ONNX Runtime's FP32, logits SQNR, median latency.

    python benchmarks/trt_table.py --photos photos_224.npy --out DIR [--opt-level 3] [--only fp32,fp16,...]
        [--fallback NAME=FILE ...]

Runs on a GPU machine with TensorRT (see benchmarks/RESULTS_TRT.md for a measured table). The calib caches it
feeds are benchmarks/mbv2/<algo>.cache, made by benchmarks/mbv2_prepare.py from the same photos, so the CPU
simulation's predictions (benchmarks/mbv2/simulation.json) use the very same scales. Results are written after
every engine: DIR/table.json, DIR/table.md; DIR/tensorrt-entropy2.cache; DIR/layers.json (per-layer precision).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"
GOLDEN = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2"
CACHES = ROOT / "benchmarks" / "mbv2"
CACHES_EQ = ROOT / "benchmarks" / "mbv2eq"
ALGOS = ("minmax", "entropy", "percentile", "mse")


def preprocess(u8: np.ndarray) -> np.ndarray:
    """As the golden was made: u8 / 255, ImageNet mean/std, NHWC -> NCHW, float32."""
    x = u8.astype(np.float32) / 255.0
    x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def sqnr_db(ref, x) -> float:
    ref, x = ref.astype(np.float64), x.astype(np.float64)
    return float(10 * np.log10((ref ** 2).sum() / max(((ref - x) ** 2).sum(), 1e-30)))


def run_all(runner, x, batch):
    return np.concatenate([runner.run({"input": x[i:i + batch]})["logits"] for i in range(0, len(x), batch)])


def cache_agreement(ours, gold) -> dict:
    from calib.quantize.cache import read_cache

    a, b = read_cache(ours), read_cache(gold)
    rel = sorted(abs(a.scales[n] / b.scales[n] - 1) for n in b.scales if n in a.scales and b.scales[n] > 0)
    return {"tensors": len(rel), "identical": a.scales == b.scales, "median_rel": rel[len(rel) // 2] if rel else None,
            "max_rel": rel[-1] if rel else None}


PIN_INT8 = ("op:Conv=int8", "op:Add=int8")  # every quantizable layer asked in INT8 before the fallback rules


def jobs(args):
    out = [("fp32", ("fp32",), None, ()), ("fp16", ("fp32", "fp16"), None, ()),
           ("int8-tensorrt-entropy2", ("int8",), "trt", ())]
    out += [(f"int8-{a}", ("int8",), a, ()) for a in ALGOS + ("pt",)]
    out += [("int8+fp16-tensorrt-entropy2", ("int8", "fp16"), "trt-reuse", ())]
    for item in args.fallback:
        name, _, path = item.partition("=")
        algo, _, _ = name.partition("+")
        from calib.runners.tensorrt.builder import read_layer_precisions

        rules = tuple(read_layer_precisions(path))
        out.append((f"int8-{name}", ("int8", "fp16"), algo, rules))
        out.append((f"int8-{name}-pin", ("int8", "fp16"), algo, PIN_INT8 + rules))
    if args.only:
        keep = set(args.only.split(","))
        out = [j for j in out if j[0] in keep]
    return out


def equalized(photos, out: Path):
    """calib's cross-layer equalization of the golden model on the photos, as benchmarks/mbv2_prepare.py
    --equalize made it on the CPU (its caches and fallback lists are in benchmarks/mbv2eq/); the model's sha256
    is checked against the one recorded there."""
    import hashlib

    from calib.data.sources import make_source
    from calib.equalize import equalize_file
    from calib.recipe import load_recipe

    photos = str(Path(photos).resolve())
    r = load_recipe(ROOT / "benchmarks" / "mbv2_golden.yaml", [f"calibration_data.path={photos}",
                                                              f"evaluation_data.path={photos}"])
    path = out / "mobilenet_v2.equalized.onnx"
    info = equalize_file(MODEL, make_source(r.calibration_data, r.preprocess, "input", r.calibration.batch_size), path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    want = json.loads((CACHES_EQ / "equalization.json").read_text())["sha256"]
    logging.info("equalized model %s (%s the CPU's)", sha[:12], "same as" if sha == want else "DIFFERS from")
    (out / "equalization.json").write_text(json.dumps({**{k: v for k, v in info.items() if k != "layers"},
                                                       "sha256": sha, "same_as_cpu": sha == want}))
    return path, CACHES_EQ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", default="")
    ap.add_argument("--equalize", action="store_true", help="build from calib's equalized model and its caches")
    ap.add_argument("--fallback", action="append", default=[], help="NAME=layer_precisions.txt (NAME: algo+tag)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import tensorrt as trt

    from calib.data.arrays import ArraySource
    from calib.quantize.cache import read_cache
    from calib.runners.onnxruntime import OrtRunner
    from calib.runners.tensorrt.builder import BuildSpec, build
    from calib.runners.tensorrt.calibrators import cache_calibrator, make_calibrator
    from calib.runners.tensorrt.device import Cuda
    from calib.runners.tensorrt.runner import TrtRunner

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = Cuda()
    x = preprocess(np.load(args.photos))
    model, caches = MODEL, CACHES
    if args.equalize:  # the equalized model and its caches, made here from the same photos
        model, caches = equalized(args.photos, out)
    b = args.batch
    t0 = time.time()
    ort = OrtRunner(MODEL).run({"input": x})["logits"]  # the original model's FP32: the reference for both
    table = {"tensorrt": trt.__version__, "gpu": cuda.name(), "batch": b, "samples": len(x),
             "opt_level": args.opt_level, "equalized": args.equalize, "date": time.strftime("%Y-%m-%d"), "ort_fp32_seconds": time.time() - t0,
             "engines": {}}
    timing = "/tmp/calib-mbv2.timing"  # shared by the builds: later builds reuse the tactic timings
    ref_file = Path("/tmp/calib-mbv2-fp32-logits.npy")  # the FP32 engine's outputs, for runs split over calls
    ref = np.load(ref_file) if ref_file.is_file() else None
    layers = {}
    trt_cache = out / "tensorrt-entropy2.cache"
    for name, precisions, source, rules in jobs(args):
        spec = BuildSpec(precisions=precisions, batch_size=b, optimization_level=args.opt_level, timing_cache=timing,
                         layer_precisions=rules)
        if source == "trt":
            cal = make_calibrator("entropy2", ArraySource(x, "input", b), {"input": (x.shape[1:], np.float32)}, b,
                                  cuda, trt_cache, "", trt)
        elif source == "trt-reuse":
            cal = cache_calibrator(read_cache(trt_cache), trt)
        elif source:
            cal = cache_calibrator(read_cache(caches / f"{source}.cache"), trt)
        else:
            cal = None
        try:
            built = build(model, spec, cal, trt, cuda)
            r = TrtRunner(built.plan, trt, cuda, label=name)
            y = run_all(r, x, b)
            lat = r.latency({"input": x[:b]}, warmup=50, iters=50, repeats=20)
            r.close()
        except Exception as exc:  # keep measuring the others
            logging.exception("%s failed", name)
            table["engines"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        if name == "fp32":
            ref = y
            np.save(ref_file, y)
        row = {"precisions": list(built.info["precisions"]), "layer_summary": built.info["layer_summary"],
               "build_s": round(built.seconds, 1), "median_ms": lat["median_ms"], "min_ms": lat["min_ms"],
               "max_ms": lat["max_ms"], "layers_kept": len([r for r in rules if r not in PIN_INT8]),
               "agree_vs_ort_fp32": float((y.argmax(1) == ort.argmax(1)).mean()),
               "sqnr_vs_ort_fp32_db": round(sqnr_db(ort, y), 2),
               "calibrator_batches": (built.info["calibrator"] or {}).get("batches")}
        if ref is not None:
            row["agree_vs_trt_fp32"] = float((y.argmax(1) == ref.argmax(1)).mean())
            row["sqnr_vs_trt_fp32_db"] = round(sqnr_db(ref, y), 2)
        if name.startswith("int8"):
            layers[name] = built.layers
        if source == "trt" and trt_cache.is_file():
            row["cache_vs_golden_entropy2"] = cache_agreement(trt_cache, GOLDEN / "entropy2.cache")
        table["engines"][name] = row
        logging.info("%s: %s", name, row)
        (out / "table.json").write_text(json.dumps(table, indent=1))
        (out / "layers.json").write_text(json.dumps(layers))
    (out / "table.json").write_text(json.dumps(table, indent=1))
    print(markdown(table))
    (out / "table.md").write_text(markdown(table))


def markdown(table: dict) -> str:
    e = table["engines"]
    fp16 = (e.get("fp16") or {}).get("median_ms")
    fp32 = (e.get("fp32") or {}).get("median_ms")
    lines = [f"TensorRT {table['tensorrt']} on {table['gpu']}, {table['date']}, batch {table['batch']}, "
             f"{table['samples']} photos, builder optimization level {table['opt_level']}", "",
             "| engine | top-1 agree vs FP32 engine | vs ORT FP32 | logits SQNR dB | median ms | x vs FP16 | x vs FP32 | "
             "layers kept in FP16 | engine layers |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in e.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:80]} | | | | | | | |")
            continue
        ms = r["median_ms"]
        lines.append(f"| {name} | {r.get('agree_vs_trt_fp32', float('nan')):.3f} | {r['agree_vs_ort_fp32']:.3f} | "
                     f"{r.get('sqnr_vs_trt_fp32_db', float('nan')):.2f} | {ms:.4f} | "
                     f"{(fp16 / ms) if fp16 else float('nan'):.2f} | {(fp32 / ms) if fp32 else float('nan'):.2f} | "
                     f"{r['layers_kept']} | {', '.join(f'{k} {v}' for k, v in sorted(r['layer_summary'].items()))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
