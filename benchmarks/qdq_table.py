"""Issue 22's table, one model per call, on a GPU with TensorRT (8.6): FP16, implicit INT8 from calib's best cache,
calib's Q/DQ model from the same cache, and ModelOpt's Q/DQ model from the same cache; latency, accuracy
against ONNX Runtime FP32, engine layers per precision, and per-layer profiles where calib has them.

    python benchmarks/qdq_table.py --model mbv2|yolov3-tiny|yolov8n|pplcnet [--data DIR] [--out DIR] [--opt-level 3]
        [--only fp16,implicit,calib-qdq,modelopt-qdq] [--batch N] [--eval-limit N] [--deadline-s 500]
        [--timing-cache FILE] [--redo]

DIR (--data, default /opt/extra/qdq22) is what benchmarks/qdq_prepare.py wrote: manifest.json and, per model,
model.onnx, eval_u8.npz, <algo>.cache, modelopt_qdq.onnx. calib's Q/DQ model is made here from the best cache with
`calib cache convert --to qdq` (the tree's current placement). Results go to --out (default /tmp/qdq22/<model>)
after every engine: table.json, table.md, layers.json (engine inspector layers), profile.json (per-layer times
from calib.runners.tensorrt.profile.profile_layers on one batch, where that module exists). Engines already in
table.json are kept (a later call does the rest; --redo rebuilds them); a build is not started when it could end
after --deadline-s, so a call cut by a time limit keeps what finished.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from qdq_models import MODELS, BenchModel, sqnr_db, to_input  # noqa: E402

JOBS = ("fp16", "implicit", "calib-qdq", "calib-qdq-stem", "calib-qdq-float-stem", "calib-qdq-like", "modelopt-qdq",
        "calib-qdq-int8w", "calib-qdq-fp16", "calib-qdq-stem-fp16", "calib-qdq-resconv", "calib-qdq-resact",
        "calib-qdq-resfloat")
QDQ_JOBS = ("calib-qdq", "calib-qdq-int8w", "calib-qdq-like", "calib-qdq-stem", "calib-qdq-float-stem",
            "calib-qdq-fp16", "calib-qdq-stem-fp16", "calib-qdq-resconv", "calib-qdq-resact", "calib-qdq-resfloat")
# --residual-branch (calib-qdq: the tree's default, conv since the H100 timings of 2026-12-06)
RESIDUAL = {"calib-qdq-resconv": "conv", "calib-qdq-resact": "act", "calib-qdq-resfloat": "float"}
RANK = ("rank-minmax", "rank-entropy", "rank-percentile", "rank-mse")  # implicit engines of every cache, accuracy only
BUILD_ESTIMATE_S = {"mbv2": 150, "yolov3-tiny": 220, "yolov8n": 200, "pplcnet": 150}  # level 3, H200, with margin
PROFILED = ("implicit", "modelopt-qdq") + QDQ_JOBS
log = logging.getLogger("qdq_table")


def batches(x: np.ndarray, b: int):
    for i in range(0, len(x), b):
        yield i, x[i:i + b]


def run_all(runner, name: str, x: np.ndarray, b: int) -> dict:
    parts: dict = {}
    for _, xb in batches(x, b):
        for k, v in runner.run({name: xb}).items():
            parts.setdefault(k, []).append(np.asarray(v, np.float32))
    return {k: np.concatenate(v) for k, v in parts.items()}


def reference(model: Path, m: BenchModel, x: np.ndarray, b: int, work: Path) -> dict:
    """ONNX Runtime FP32 outputs on the evaluation images (kept in `work` for later calls)."""
    f = work / f"ort_fp32_{len(x)}.npz"
    if f.is_file():
        return dict(np.load(f))
    from calib.runners.onnxruntime import OrtRunner

    ref = run_all(OrtRunner(model), m.input, x, b)
    np.savez(f, **ref)
    return ref


def align(outs: dict, ref: dict) -> dict:
    """The engine's outputs under the ONNX model's output names (by position where a Q/DQ tool renamed them)."""
    if set(outs) == set(ref):
        return outs
    if len(outs) != len(ref):
        raise RuntimeError(f"engine outputs {sorted(outs)} do not match the model's {sorted(ref)}")
    return dict(zip(ref, outs.values()))


def accuracy(outs: dict, ref: dict, m: BenchModel, b: int) -> dict:
    acc = {"output_sqnr_db": {k: round(sqnr_db(ref[k], outs[k]), 2) for k in ref}}
    if m.task == "classification":
        (k,) = list(ref)[:1]
        acc["top1_agreement"] = float((outs[k].argmax(1) == ref[k].argmax(1)).mean())
        acc["logits_sqnr_db"] = acc["output_sqnr_db"][k]
        return acc
    from calib.evaluate.detect import DetectionTally, split_outputs
    from calib.recipe import DetectionSpec

    spec = DetectionSpec(format=m.detection_format)
    tally = DetectionTally(spec, ["engine"], list(ref), score_reference=False)
    n = len(next(iter(ref.values())))
    for i in range(0, n, b):
        rb = {k: v[i:i + b] for k, v in ref.items()}
        tb = {k: v[i:i + b] for k, v in outs.items()}
        k = len(next(iter(rb.values())))
        tally.update(rb, {"engine": tb}, [None] * k, [None] * k, i)
    mp = tally.map_vs_fp32("engine")
    rbox, rsc = split_outputs(ref, spec)
    tbox, tsc = split_outputs(outs, spec)
    acc.update({"map50_vs_fp32": mp["map50"], "map50_95_vs_fp32": mp["map50_95"], "fp32_boxes": len(tally.pseudo),
                "box_sqnr_db": round(sqnr_db(rbox, tbox), 2), "score_sqnr_db": round(sqnr_db(rsc, tsc), 2)})
    return acc


def calib_qdq(cache: Path, model: Path, out: Path, int8_weights: bool = False, like: Path | None = None,
              stem: bool | None = None, float_type: str = "fp32", residual: str | None = None) -> dict:
    """calib's Q/DQ model from the cache, through the CLI (whatever placement the tree has now); `like`: an
    engine sidecar whose float layers get no Q/DQ (--like-engine); `float_type` fp16: the FP16+INT8 model made for
    TensorRT 11's strongly typed networks (--float-type fp16), here built with the INT8 and FP16 flags (TensorRT
    8.6's parser refuses its FP16 scales: the row records that)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    cmd = [sys.executable, "-m", "calib", "cache", "convert", str(cache), "--model", str(model), "--to", "qdq",
           "-o", str(out)] + (["--int8-weights"] if int8_weights else []) + (["--like-engine", str(like)] if like else []) \
        + {True: ["--quantize-stem-output"], False: ["--keep-stem-output-float"], None: []}[stem] \
        + (["--float-type", float_type] if float_type != "fp32" else []) \
        + (["--residual-branch", residual] if residual else [])
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"calib cache convert failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return {"convert": r.stdout.strip(), "convert_s": round(time.time() - t0, 1)}


def profile(runner, engine: Path, batch: dict):
    """calib's per-layer profile of an engine (calib.runners.tensorrt.profile.profile_layers takes the open
    runner; an engine path where its first parameter is not `runner`)."""
    try:
        from calib.runners.tensorrt.profile import profile_layers
    except ImportError:
        return "calib.runners.tensorrt.profile.profile_layers not in this tree"
    import inspect

    first = next(iter(inspect.signature(profile_layers).parameters), "")
    try:
        return profile_layers(runner if first == "runner" else str(engine), batch)
    except Exception as exc:  # a profile is extra: never lose the row for it
        log.exception("profile of %s failed", engine)
        return f"error: {type(exc).__name__}: {exc}"


def load_json(p: Path, default):
    return json.loads(p.read_text()) if p.is_file() else default


def write_json(p: Path, obj) -> None:
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--data", default="/opt/extra/qdq22")
    ap.add_argument("--out")
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--rank-level", type=int, default=1,
                    help="builder level of the rank-<algo> engines (accuracy only: which cache the engines rank first)")
    ap.add_argument("--only", default=",".join(JOBS))
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--eval-limit", type=int, default=0)
    ap.add_argument("--deadline-s", type=float, default=500.0, help="start no build that could end after this")
    ap.add_argument("--estimate-scale", type=float, default=1.25,
                    help="a build may take this times the longest build so far (with the implicit engine first, the "
                         "slowest, below 1 lets more of the table start before the deadline)")
    ap.add_argument("--timing-cache", default=None,
                    help="default: /tmp/qdq22/<model>.timing, one per model (a cache shared across models made "
                         "TensorRT 8.6 report a Myelin error and then build the detectors for over 9 minutes)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--redo", action="store_true")
    args = ap.parse_args()
    t_start = time.time()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    only = [j.strip() for j in args.only.split(",") if j.strip()]
    bad = [j for j in only if j not in JOBS + RANK]
    if bad:
        ap.error(f"--only: '{bad[0]}' is not one of {', '.join(JOBS + RANK)}")
    import tensorrt as trt

    import calib
    from calib.quantize.cache import read_cache
    from calib.runners.tensorrt.builder import BuildSpec, build, write_engine
    from calib.runners.tensorrt.calibrators import cache_calibrator
    from calib.runners.tensorrt.device import Cuda
    from calib.runners.tensorrt.runner import TrtRunner

    m = MODELS[args.model]
    data = Path(args.data)
    man = json.loads((data / "manifest.json").read_text())["models"][args.model]
    d = data / args.model
    out = Path(args.out or f"/tmp/qdq22/{args.model}")
    work = out / "work"  # engines, calib's Q/DQ model, the FP32 reference: not for $OUT
    work.mkdir(parents=True, exist_ok=True)
    args.timing_cache = args.timing_cache or f"/tmp/qdq22/{args.model}.timing"
    Path(args.timing_cache).parent.mkdir(parents=True, exist_ok=True)
    b = args.batch or m.batch
    u8 = np.load(d / man["eval"]["file"])
    if not isinstance(u8, np.ndarray):  # .npz
        u8 = u8[man["eval"].get("key", "images")]
    if args.eval_limit:
        u8 = u8[:args.eval_limit]
    x = to_input(u8, m)
    model = d / man["model"]
    best = man["best"]
    cache = d / man["caches"][best]
    cuda = Cuda()
    ref = reference(model, m, x, b, work)
    table = load_json(out / "table.json", {"engines": {}})
    table.update({"model": args.model, "notes": man["notes"], "tensorrt": trt.__version__, "gpu": cuda.name(),
                  "batch": b, "samples": len(x), "opt_level": args.opt_level, "best_cache": best,
                  "best_why": man.get("best_why"), "calib_version": calib.__version__,
                  "modelopt": {k: v for k, v in (man.get("modelopt") or {}).items() if k != "file"},
                  "tactic_sources": os.environ.get("CALIB_TRT_TACTIC_SOURCES", "default"),
                  "date": time.strftime("%Y-%m-%d")})
    layers = load_json(out / "layers.json", {})
    profiles = load_json(out / "profile.json", {})
    seen_build, not_started = [], []
    lat_batch = {m.input: np.resize(x, (b, *x.shape[1:]))}
    for name in only:
        if name in table["engines"] and "error" not in table["engines"][name] and not args.redo:
            log.info("%s: already in %s, kept", name, out / "table.json")
            continue
        ranked = name in RANK
        # build + measuring
        est = (args.estimate_scale * max(seen_build) if seen_build else BUILD_ESTIMATE_S[args.model]) + 20
        if ranked:
            est = 60 + 10 * (m.task != "classification")  # level 0-1 builds take 10-40 s
        if time.time() - t_start + est > args.deadline_s:
            log.warning("%s: not started (%.0f s used, a build may take %.0f s, deadline %.0f s): run again",
                        name, time.time() - t_start, est, args.deadline_s)
            not_started.append(name)
            continue
        row: dict = {}
        try:
            src, cal, prec = model, None, ("fp32", "fp16", "int8")
            if name == "fp16":
                prec = ("fp32", "fp16")
            elif ranked:
                algo = name.split("-", 1)[1]
                cal = cache_calibrator(read_cache(d / man["caches"][algo]), trt)
                row["cache"] = f"{algo}.cache"
            elif name == "implicit":
                cal = cache_calibrator(read_cache(cache), trt)
                row["cache"] = f"{best}.cache"
            elif name in QDQ_JOBS:
                src = work / f"{name.replace('-', '_')}.onnx"
                like = None
                if name == "calib-qdq-like":  # the implicit engine's float layers, from this or an earlier call
                    if "implicit" not in layers:
                        raise RuntimeError("calib-qdq-like needs the implicit engine's layers: build 'implicit' first")
                    like = work / "implicit.engine.json"
                    write_json(like, {"layers": layers["implicit"]})
                row.update(calib_qdq(cache, model, src, int8_weights=name.endswith("int8w"), like=like,
                                     stem=True if "qdq-stem" in name else False if "float-stem" in name else None,
                                     float_type="fp16" if "fp16" in name else "fp32",
                                     residual=RESIDUAL.get(name)))
                row["cache"] = f"{best}.cache"
                row["qdq_bytes"] = src.stat().st_size
            else:
                if "file" not in (man.get("modelopt") or {}):
                    raise RuntimeError("no ModelOpt Q/DQ model was prepared")
                src = d / man["modelopt"]["file"]
                row["cache"] = man["modelopt"].get("cache")
            spec = BuildSpec(precisions=prec, batch_size=b,
                             optimization_level=args.rank_level if ranked else args.opt_level,
                             timing_cache=None if ranked else args.timing_cache)
            built = build(src, spec, cal, trt, cuda)
            if not ranked:
                seen_build.append(built.seconds)
            engine = write_engine(work / f"{name}.engine", built, {"benchmark": "qdq_table", "job": name})
            r = TrtRunner(built.plan, trt, cuda, label=name)
            try:
                outs = align(run_all(r, m.input, x, b), ref)
                lat = (r.latency(lat_batch, warmup=50, iters=args.iters, repeats=args.repeats) if not ranked else
                       {"median_ms": None, "min_ms": None, "max_ms": None})
                if not ranked:  # the same runs as one CUDA graph launch each: no host launch cost in the figure
                    try:
                        g = r.latency(lat_batch, warmup=50, iters=args.iters, repeats=args.repeats, cuda_graph=True)
                        row.update({f"graph_{k}": g[k] for k in ("median_ms", "min_ms", "max_ms")})
                        if "graph_nodes" in g:  # what one run launches
                            row["graph_nodes"] = g["graph_nodes"]
                    except Exception as exc:  # a plugin that cannot be captured: the plain figure stands
                        row["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
                if name in PROFILED:
                    profiles[name] = profile(r, engine, {m.input: lat_batch[m.input]})
            finally:
                r.close()
            row.update({"precisions": list(built.info["precisions"]), "explicit_qdq": built.info["explicit_qdq"],
                        "layer_summary": built.info["layer_summary"], "build_s": round(built.seconds, 1),
                        "opt_level": spec.optimization_level,
                        "median_ms": lat["median_ms"], "min_ms": lat["min_ms"], "max_ms": lat["max_ms"],
                        "engine_bytes": len(built.plan), "calibrator": built.info["calibrator"],
                        **accuracy(outs, ref, m, b)})
            if not ranked:
                layers[name] = built.layers
        except Exception as exc:  # keep measuring the others
            log.exception("%s failed", name)
            row["error"] = f"{type(exc).__name__}: {exc}"[:600]
        table["engines"][name] = row
        log.info("%s: %s", name, {k: v for k, v in row.items() if k != "calibrator"})
        write_json(out / "table.json", table)
        write_json(out / "layers.json", layers)
        write_json(out / "profile.json", profiles)
        (out / "table.md").write_text(markdown(table))
    (out / "table.md").write_text(markdown(table))
    print(markdown(table))
    missing = [j for j in only if j in not_started or j not in table["engines"] or "error" in table["engines"][j]]
    log.info("done in %.0f s; %s", time.time() - t_start, f"missing: {','.join(missing)}" if missing else "all done")


def markdown(table: dict) -> str:
    e = table["engines"]
    fp16 = (e.get("fp16") or {}).get("median_ms")
    imp = (e.get("implicit") or {}).get("median_ms")
    cls = MODELS[table["model"]].task == "classification"
    lines = [f"{table['model']}: TensorRT {table['tensorrt']} on {table['gpu']}, {table['date']}, "
             f"batch {table['batch']}, {table['samples']} evaluation images, builder optimization level "
             f"{table['opt_level']}, calib {table['best_cache']} cache (calib {table['calib_version']})", ""]
    acc = "| top-1 agreement vs FP32 | logits SQNR dB |" if cls else "| mAP50 vs FP32 | box SQNR dB |"
    gimp = (e.get("implicit") or {}).get("graph_median_ms")
    lines += ["| engine | median ms | x FP16 | x implicit | CUDA graph ms | x implicit (graph) " + acc +
              " engine layers | build s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in JOBS:
        if name not in e:
            continue
        r = e[name]
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:120]} | | | | | | | | |")
            continue
        ms = r["median_ms"]
        a = (f"{r['top1_agreement']:.3f} | {r['logits_sqnr_db']:.2f}" if cls else
             f"{r['map50_vs_fp32']:.3f} | {r['box_sqnr_db']:.2f}")
        gms = r.get("graph_median_ms")
        graph = f"{gms:.4f} | {(gimp / gms) if gimp else float('nan'):.2f}" if gms else "n/a | n/a"
        lines.append(f"| {name} | {ms:.4f} | {(fp16 / ms) if fp16 else float('nan'):.2f} | "
                     f"{(imp / ms) if imp else float('nan'):.2f} | {graph} | {a} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(r['layer_summary'].items()))} | {r['build_s']} |")
    ranked = [(n, e[n]) for n in RANK if n in e]
    if ranked:
        lvl = next((r.get("opt_level") for _, r in ranked if "opt_level" in r), "?")
        lines += ["", f"Implicit INT8 engines of every calib cache (builder level {lvl}, accuracy only):", "",
                  "| cache | " + acc.strip("| ").replace(" | ", " | ") + " | engine layers |", "|---|---|---|---|"]
        for n, r in ranked:
            if "error" in r:
                lines.append(f"| {n[5:]} | error: {r['error'][:120]} | | |")
                continue
            a = (f"{r['top1_agreement']:.3f} | {r['logits_sqnr_db']:.2f}" if cls else
                 f"{r['map50_vs_fp32']:.3f} | {r['box_sqnr_db']:.2f}")
            lines.append(f"| {n[5:]} | {a} | {', '.join(f'{k} {v}' for k, v in sorted(r['layer_summary'].items()))} |")
    if not cls:
        boxes = next((r.get("fp32_boxes") for r in e.values() if "fp32_boxes" in r), None)
        lines += ["", f"FP32 (ONNX Runtime) boxes at the decoding threshold: {boxes}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
