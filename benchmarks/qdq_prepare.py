"""The CPU half of benchmarks/qdq_table.py (issue 22): for MobileNetV2, YOLOv3-tiny, YOLOv8n-320 and PP-LCNet, the FP32
model, the calibration and evaluation images, calib's caches for every algorithm (+ sidecars), the CPU
simulation that picks the best cache, and ModelOpt's Q/DQ model made from that cache (the same scales).

    python benchmarks/qdq_prepare.py [--out benchmarks/qdq-stage] [--models mbv2,yolov3-tiny,yolov8n,pplcnet]
        [--photos224 photos_224.npy] [--modelopt-python PYTHON] [--eval-limit N]

Writes, under OUT (git-ignored):
  qdq22/                      what the GPU machine needs (stage it as an extra: it lands at /opt/extra/qdq22)
    manifest.json             what each file is, the best cache per model and why, ModelOpt's version and command
    <model>/model.onnx        FP32 ONNX (YOLOv8n: input fixed to 320x320)
    <model>/eval_u8.npz       evaluation images (key images), uint8 NHWC after resize/letterbox (qdq_models.to_input
                              does the rest), compressed
    <model>/<algo>.cache/.json calib's caches and sidecars (minmax, entropy, percentile, mse)
    <model>/simulation.json   calib's CPU simulation of each cache on the evaluation images
    <model>/modelopt_qdq.onnx ModelOpt's Q/DQ model from the best cache
  calib-data/<model>/calib_u8.npy, calib_f32.npy   the calibration images (uint8, and the float32 model input)
  calib-data/<model>/modelopt.log                  ModelOpt's output

calib's own Q/DQ models are not made here: qdq_table.py makes them on the GPU machine from the same cache with
`calib cache convert`, so the placement measured is the tree's current one. ModelOpt is a baseline only: it runs
from its own environment (--modelopt-python; skipped when not given).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from qdq_models import MODELS, BenchModel, to_input  # noqa: E402

MBV2 = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"
ALGOS = ("minmax", "entropy", "percentile", "mse")
EVAL_CROPS = 128  # detectors: crops 64..191 of datasets/make_photos.py's sequence (the repo ships 0..63)
log = logging.getLogger("qdq_prepare")


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def photos_224(path: str | None) -> np.ndarray:
    """The 256 golden photos (tests/golden/trt86-h200/make_calib_data.py), rebuilt when no path is given."""
    if path:
        return np.load(path)
    import os
    import tempfile

    cache = Path(os.environ.get("CALIB_HOME", Path.home() / ".cache" / "calib")) / "golden" / "photos_224.npy"
    if not cache.is_file():
        tmp = Path(tempfile.mkdtemp())
        subprocess.run([sys.executable, str(ROOT / "tests" / "golden" / "trt86-h200" / "make_calib_data.py"),
                        str(tmp), "256", "1"], check=True, capture_output=True)
        cache = tmp / "photos_224.npy"
    return np.load(cache)


def letterboxed(images, m: BenchModel) -> np.ndarray:
    """PIL images -> uint8 [N,S,S,3] through calib's own letterbox (no scaling)."""
    from calib.data.transforms import Preprocessor
    from calib.recipe import PreprocessSpec

    pre = Preprocessor(PreprocessSpec(resize=(m.size, m.size), mode="letterbox", pad_value=m.pad_value,
                                      dtype="uint8", layout="NHWC"))
    return np.stack([pre(img)[0] for img in images])


def detector_images(m: BenchModel, eval_count: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Calibration: the 64 crops in datasets/photos_crops; evaluation: the next `eval_count` crops of the same
    seeded sequence (datasets/make_photos.py), so the two sets do not overlap."""
    from PIL import Image

    sys.path.insert(0, str(ROOT / "datasets"))
    import make_photos

    files = sorted((ROOT / "datasets" / "photos_crops").glob("*.jpg"))
    cal = letterboxed([Image.open(f).convert("RGB") for f in files], m)
    crops = list(make_photos.crops(make_photos.originals(), len(files) + eval_count))
    ev = letterboxed([c.convert("RGB") for _, c in crops[len(files):]], m)
    return cal, ev, {"calibration": f"datasets/photos_crops/*.jpg ({len(files)} crops)",
                     "evaluation": f"crops {len(files)}..{len(files) + eval_count - 1} of datasets/make_photos.py "
                                   f"crops() (seed 2026), not in the calibration set",
                     "eval_names": [n for n, _ in crops[len(files):]]}


def fp32_model(key: str, dst: Path) -> Path:
    import onnx

    from calib.zoo import fetch

    zoo_name = MODELS[key].zoo
    src = fetch(zoo_name) if zoo_name else MBV2
    model = onnx.load(str(src))
    if key == "yolov8n":  # dynamic H/W: fixed to 320 so that TensorRT, calib and ModelOpt see one shape
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_value, dims[3].dim_value = 320, 320
        out = model.graph.output[0].type.tensor_type.shape.dim
        out[2].dim_value = 2100
        del model.graph.value_info[:]
        model = onnx.shape_inference.infer_shapes(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return dst


def simulate(model: Path, caches: dict, x: np.ndarray, m: BenchModel) -> dict:
    """calib's CPU simulation of each cache (fake-quantized INT8 against FP32) on the evaluation images."""
    from calib.data.arrays import ArraySource
    from calib.evaluate.api import evaluate
    from calib.evaluate.report import task_metrics
    from calib.recipe import DetectionSpec

    det = DetectionSpec(format=m.detection_format) if m.detection_format else DetectionSpec()
    from calib.io.memory import Budget

    res = evaluate(model, caches, ArraySource(x, m.input, 16), m.task, detection=det, layerwise=False,
                   memory_budget=Budget(8 << 30, "memory_budget"))  # the images are in memory as one array
    return {n: {k: v for k, v in task_metrics(e, m.task).items() if v is not None} for n, e in res["configs"].items()}


def pick(sim: dict, m: BenchModel) -> tuple[str, str]:
    """The best algorithm by the task metric (top-1 agreement; mAP50 vs FP32), ties by the worst output SQNR."""
    key = "agreement_top1" if m.task == "classification" else "map50_vs_fp32"

    def score(a):
        s = sim[a]
        sq = [v for k, v in s.items() if k.endswith("_sqnr_db")]
        return (round(s.get(key) or 0.0, 4), min(sq) if sq else 0.0)

    best = max(sim, key=score)
    why = f"highest {key} in calib's CPU simulation ({sim[best].get(key)}), ties broken by output SQNR"
    return best, why


def modelopt(py: str, model: Path, cache: Path, calib_f32: Path, out: Path, logfile: Path) -> dict:
    """ModelOpt's INT8 Q/DQ model from calib's cache and calib's calibration data (benchmarks/qdq_modelopt.py,
    run by ModelOpt's own python)."""
    cmd = [py, str(ROOT / "benchmarks" / "qdq_modelopt.py"), str(model), str(cache), str(calib_f32), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    logfile.write_text(" ".join(cmd) + "\n\n" + r.stdout + "\n" + r.stderr)
    if r.returncode != 0 or not out.is_file():
        raise RuntimeError(f"ModelOpt failed ({r.returncode}); see {logfile}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def prepare(key: str, args, stage: Path, local: Path) -> dict:
    from calib.calibrate import calibrate
    from calib.io.memory import Budget
    from calib.evaluate.report import task_metrics  # noqa: F401  (import check before the long pass)

    m = MODELS[key]
    d, ld = stage / key, local / key
    d.mkdir(parents=True, exist_ok=True)
    ld.mkdir(parents=True, exist_ok=True)
    model = fp32_model(key, d / "model.onnx")
    if m.task == "classification":  # MobileNetV2, PP-LCNet: both take a 224 crop of a 256 side, ImageNet mean/std
        cal = ev = photos_224(args.photos224)
        data = {"calibration": "the 256 golden photos (tests/golden/trt86-h200/make_calib_data.py)",
                "evaluation": "the same 256 photos (as benchmarks/trt_table.py)"}
    else:
        cal, ev, data = detector_images(m, args.eval_limit or EVAL_CROPS)
    if args.eval_limit:
        ev = ev[:args.eval_limit]
    np.savez_compressed(d / "eval_u8.npz", images=ev)  # about half the bytes: less to carry
    np.save(ld / "calib_u8.npy", cal)
    xcal = to_input(cal, m)
    np.save(ld / "calib_f32.npy", xcal)
    t0 = time.time()
    # the whole calibration set is in memory as one array: a budget above the default 2 GB
    res = calibrate(model, xcal, ALGOS, batch_size=8, out=d, memory_budget=Budget(8 << 30, "memory_budget"))
    log.info("%s: calibrated %d samples in %.1f s", key, res.samples, time.time() - t0)
    caches = {a: d / f"{a}.cache" for a in ALGOS}
    sim = simulate(model, caches, to_input(ev, m), m)
    (d / "simulation.json").write_text(json.dumps(sim, indent=1) + "\n")
    best, why = pick(sim, m)
    asked = args.cache.get(key)
    if asked and asked != best:  # a table to compare with one built from that cache earlier
        why = f"asked (--cache {key}={asked}); the simulation's pick: {best}, {why}"
        best = asked
    log.info("%s: best cache %s (%s)", key, best, why)
    entry = {"model": "model.onnx", "model_sha256": sha256(model), "notes": m.notes, "input": m.input,
             "batch": m.batch, "task": m.task, "detection_format": m.detection_format, "data": data,
             "eval": {"file": "eval_u8.npz", "key": "images", "shape": list(ev.shape), "dtype": "uint8",
                      "to_input": "qdq_models.to_input: /255" + (" then ImageNet mean/std" if m.normalize else "")
                                  + ", NHWC -> NCHW float32"},
             "calibration_samples": int(res.samples), "caches": {a: f"{a}.cache" for a in ALGOS},
             "best": best, "best_why": why, "simulation": "simulation.json"}
    if args.modelopt_python:
        try:
            entry["modelopt"] = {"file": "modelopt_qdq.onnx", "cache": f"{best}.cache",
                                 **modelopt(args.modelopt_python, model, caches[best], ld / "calib_f32.npy",
                                            d / "modelopt_qdq.onnx", ld / "modelopt.log")}
        except RuntimeError as exc:
            log.error("%s: %s", key, exc)
            entry["modelopt"] = {"error": str(exc).split(";")[0]}
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "qdq-stage"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--photos224", help="the golden photos_224.npy (rebuilt with scikit-image when not given)")
    ap.add_argument("--modelopt-python", help="python of an environment with nvidia-modelopt[onnx]")
    ap.add_argument("--eval-limit", type=int, default=0, help="fewer evaluation images (smoke tests)")
    ap.add_argument("--cache", action="append", default=[], metavar="MODEL=ALGO",
                    help="build MODEL's INT8 engines from ALGO's cache, not the simulation's pick (tables to set "
                         "beside ones built from that cache earlier); repeatable")
    ap.add_argument("--modelopt-only", action="store_true",
                    help="with --modelopt-python: add ModelOpt's Q/DQ model to models already staged, from their "
                         "staged best cache (no new calibration: engines built from those caches stay comparable)")
    args = ap.parse_args()
    for a in args.cache:
        model, _, algo = a.partition("=")
        if model not in MODELS or algo not in ALGOS:
            ap.error(f"--cache {a}: expected MODEL=ALGO with MODEL one of {', '.join(MODELS)} and ALGO one of "
                     f"{', '.join(ALGOS)}")
    args.cache = dict(a.partition("=")[::2] for a in args.cache)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    stage, local = out / "qdq22", out / "calib-data"
    man_path = stage / "manifest.json"
    manifest = json.loads(man_path.read_text()) if man_path.is_file() else {"models": {}}
    import calib

    manifest.update({"calib_version": calib.__version__, "date": time.strftime("%Y-%m-%d"),
                     "files": {"model.onnx": "FP32 ONNX model",
                               "eval_u8.npz": "evaluation images, uint8 NHWC (key images)",
                               "<algo>.cache": "calib cache (EntropyCalibration2 header; the sidecar .json names the "
                                               "true algorithm, model sha256, data fingerprint)",
                               "simulation.json": "calib CPU simulation per cache (task metric, output SQNR)",
                               "modelopt_qdq.onnx": "ModelOpt INT8 Q/DQ model from the best cache's scales"}})
    for key in args.models.split(","):
        if args.modelopt_only:
            e = manifest["models"][key]
            d = stage / key
            e["modelopt"] = {"file": "modelopt_qdq.onnx", "cache": f"{e['best']}.cache",
                             **modelopt(args.modelopt_python, d / e["model"], d / e["caches"][e["best"]],
                                        local / key / "calib_f32.npy", d / "modelopt_qdq.onnx",
                                        local / key / "modelopt.log")}
        else:
            manifest["models"][key] = prepare(key, args, stage, local)
        man_path.write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({k: {"best": v["best"], "modelopt": v.get("modelopt")} for k, v in manifest["models"].items()},
                     indent=1))


if __name__ == "__main__":
    main()
