"""The CPU half of benchmarks/trt_table.py: calib's caches for MobileNetV2 on the 256 golden photos and the CPU
simulation's predictions for each engine the GPU table builds, from the same scales.

    python benchmarks/mbv2_prepare.py --photos photos_224.npy [--fallback NAME=layer_precisions.txt ...]
        [--engine-layers layers.json]

Writes benchmarks/mbv2/<algo>.cache (+ .json sidecar) and benchmarks/mbv2/simulation.json: top-1 agreement with
ONNX Runtime FP32 and logits SQNR for each algorithm, each fallback list (layers kept in float), and, given the
GPU run's layers.json, each INT8 engine's own precision choices (the nodes TensorRT left in float).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RECIPE = ROOT / "benchmarks" / "mbv2_golden.yaml"
OUT = ROOT / "benchmarks" / "mbv2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", required=True)
    ap.add_argument("--fallback", action="append", default=[])
    ap.add_argument("--engine-layers")
    ap.add_argument("--reuse-caches", action="store_true", help="Read benchmarks/mbv2/*.cache instead of calibrating.")
    ap.add_argument("--equalize", action="store_true",
                    help="calib's cross-layer equalization first; everything goes to benchmarks/mbv2eq/")
    args = ap.parse_args()
    global OUT
    if args.equalize:
        OUT = ROOT / "benchmarks" / "mbv2eq"
    import onnx

    from calib.calibrate import collect, compute_all
    from calib.data.sources import make_source
    from calib.evaluate.api import evaluate
    from calib.quantize import cache as cachefmt
    from calib.quantize.qdq import quantizable_layers
    from calib.quantize.qdq import Exclusions
    from calib.recipe import load_recipe
    from calib.runners.tensorrt.builder import read_layer_precisions
    from calib.runners.tensorrt.inspect import node_precisions

    photos = str(Path(args.photos).resolve())
    r = load_recipe(RECIPE, [f"calibration_data.path={photos}", f"evaluation_data.path={photos}"])
    model = Path(r.model)
    if args.equalize:
        import hashlib
        import tempfile

        from calib.equalize import equalize_file

        src = make_source(r.calibration_data, r.preprocess, "input", r.calibration.batch_size)
        eq = Path(tempfile.mkdtemp()) / "mobilenet_v2.equalized.onnx"  # 14 MB: rebuilt where needed, not kept
        info = equalize_file(model, src, eq)
        OUT.mkdir(exist_ok=True)
        (OUT / "equalization.json").write_text(json.dumps(
            {**info, "sha256": hashlib.sha256(eq.read_bytes()).hexdigest()}, indent=1) + "\n")
        model = eq
    if args.reuse_caches:
        amax = {a: cachefmt.read_cache(OUT / f"{a}.cache").amaxes() for a in r.calibration.algorithms}
    else:
        src = make_source(r.calibration_data, r.preprocess, "input", r.calibration.batch_size)
        info, stats, samples, fp = collect(model, src)
        amax, used, _ = compute_all(stats, info.activations, r.calibration.algorithms,
                                    {"percentile": {"percentile": r.calibration.percentile}})
        OUT.mkdir(exist_ok=True)
        for a in r.calibration.algorithms:
            p = cachefmt.write_cache(OUT / f"{a}.cache", amax[a])
            cachefmt.write_sidecar(p, cachefmt.Sidecar(a, used[a], amax[a], info.sha256, fp, "calib", "8600",
                                                       "EntropyCalibration2", samples))
    for p in sorted(OUT.glob("*.cache")):  # e.g. pt.cache: the sensitivity search's per-tensor mix
        if p.stem not in amax:
            amax[p.stem] = cachefmt.read_cache(p).amaxes()
    configs, exclude = dict(amax), {}
    for item in args.fallback:
        name, _, path = item.partition("=")
        algo = name.partition("+")[0]
        kept = [ln.rpartition("=")[0] for ln in read_layer_precisions(path)]
        configs[name], exclude[name] = amax[algo], Exclusions(names=tuple(kept))
    if args.engine_layers:
        nodes = quantizable_layers(onnx.load(str(model), load_external_data=False))
        for engine, layers in json.loads(Path(args.engine_layers).read_text()).items():
            algo = engine[len("int8-"):].partition("+")[0]
            if algo not in amax:
                continue
            prec = node_precisions(layers, nodes)
            configs[f"{engine}@engine"] = amax[algo]
            exclude[f"{engine}@engine"] = Exclusions(names=tuple(n for n in nodes if prec.get(n, "int8") != "int8"))
    esrc = make_source(r.evaluation_data, r.preprocess, "input", r.evaluation.batch_size)
    res = evaluate(model, configs, esrc, "classification", exclude=exclude, layerwise=False)
    sim = {n: {"agree_vs_ort_fp32": e["task"]["agreement_top1"], "sqnr_db": e["outputs"]["logits"]["sqnr_db"],
               "kept_in_float": len(exclude[n].names) if n in exclude else 0} for n, e in res["configs"].items()}
    (OUT / "simulation.json").write_text(json.dumps(sim, indent=1, sort_keys=True) + "\n")
    for n, s in sim.items():
        print(f"{n:40s} agreement {s['agree_vs_ort_fp32']:.3f}  SQNR {s['sqnr_db']:.2f} dB  float {s['kept_in_float']}")


if __name__ == "__main__":
    main()
