"""Does the CPU report choose the algorithm the real INT8 engines rank first?

    python benchmarks/engine_order.py                 # runs the shipped recipes on the CPU (minutes each)
    python benchmarks/engine_order.py --reports DIR   # or reads DIR/<recipe>/report.json of earlier runs

For each zoo model with engine numbers measured on an H200 (TensorRT 8.6.0, implicit INT8 from calib's caches):
MobileNetV2 (top-1 agreement with FP32, 256 photos: trt86-h200/mbv2-table.json and mbv2-table2.json) and
YOLOv3-tiny (mAP50:95 against FP32's boxes: trt86-h200/yolo/report.json), the recipe as shipped is run on the CPU
and its decision is held against the engines' order: a best algorithm named beyond noise must be the engines'
best, a tie must include it, and no comparison the report calls significant may contradict the engines' order.
Writes benchmarks/engine-order/<model>.json (the decision, the primary metric with its interval per algorithm,
the paired comparisons), which tests/test_engine_order.py checks against the same engine numbers.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRT = HERE / "trt86-h200"
OUT = HERE / "engine-order"
ALGOS = ("minmax", "entropy", "percentile", "mse")
GOLDEN_MBV2 = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"


def engine_scores() -> dict:
    """model -> {"metric", "scores": {algorithm: engine score}, "source"} from the recorded engine runs."""
    mb = {}
    for f in ("mbv2-table.json", "mbv2-table2.json"):
        for name, e in json.loads((TRT / f).read_text())["engines"].items():
            algo = name[len("int8-"):] if name.startswith("int8-") else None
            if algo in ALGOS:
                mb[algo] = e["agree_vs_ort_fp32"]
    out = {"mobilenet_v2": {"metric": "agreement_top1", "scores": mb,
                            "source": "trt86-h200/mbv2-table*.json (256 photos)"},
           "yolov3-tiny": {"metric": "map50_95_vs_fp32", "scores": _report_scores(TRT / "yolo" / "report.json"),
                           "source": "trt86-h200/yolo/report.json (32 crops, 13 FP32 boxes)"}}
    # `bash benchmarks/run_gpu.sh yolov8n`, where it has been run (on an H200, else an H100)
    for v8 in (TRT / "yolov8n" / "report.json", HERE / "trt86-h100" / "yolov8n" / "report.json"):
        if v8.is_file():
            out["yolov8n-320"] = {"metric": "map50_95_vs_fp32", "scores": _report_scores(v8),
                                  "source": str(v8.relative_to(HERE))}
            break
    for table in sorted(TRT.glob("qdq*/table.json")) + sorted(TRT.glob("qdq*/qdq-*/table.json")):
        got = _rank_scores(table)  # qdq_table.py's rank-<algo> engines: where nothing better is recorded
        if got and got[0] not in out:
            out[got[0]] = {"metric": got[1], "scores": got[2], "source": str(table.relative_to(HERE))}
    return out


def _rank_scores(path: Path):
    """(zoo model, CPU metric, {algorithm: score}) of qdq_table.py's rank-<algo> rows, or None."""
    t = json.loads(path.read_text())
    model = {"mbv2": "mobilenet_v2", "yolov3-tiny": "yolov3-tiny", "yolov8n": "yolov8n-320"}.get(t.get("model"))
    rows = {n[len("rank-"):]: r for n, r in t.get("engines", {}).items() if n.startswith("rank-") and "error" not in r}
    if not model or not rows:
        return None
    key, metric = (("top1_agreement", "agreement_top1") if model == "mobilenet_v2" else
                   ("map50_vs_fp32", "map50_vs_fp32"))
    return model, metric, {a: r[key] for a, r in rows.items() if a in ALGOS and r.get(key) is not None}


def _report_scores(path: Path) -> dict:
    """algorithm -> the INT8 engine's mAP50:95 against FP32's boxes, from a `calib run` report with engines."""
    rep = json.loads(path.read_text())
    out = {}
    for name, e in rep["evaluation"]["configs"].items():
        algo = name[len("trt-int8-"):] if name.startswith("trt-int8-") else None
        if algo in ALGOS:
            out[algo] = e["task"]["vs_fp32"]["map50_95"]
    return out


def check(record: dict, engine: dict) -> dict:
    """Hold a CPU decision (`record`, see extract) against the engines' scores: ok, and why."""
    scores = engine["scores"]
    best = max(scores, key=scores.get)
    d = record["decision"]
    problems = []
    if d["status"] == "best" and d["ship"] != best:
        problems.append(f"the report names {d['ship']} best beyond noise; the engines rank {best} first")
    if d["status"] in ("tie", "too_small") and best != d["ship"] and best not in d.get("tied", []):
        problems.append(f"the engines' best, {best}, is significantly worse than {d['ship']} in the report")
    for c in record["paired"]:
        if not c.get("significant") or c["a"] not in scores or c["b"] not in scores:
            continue
        hi, lo = (c["a"], c["b"]) if c["diff"] > 0 else (c["b"], c["a"])
        if scores[hi] < scores[lo]:
            problems.append(f"the report finds {hi} better than {lo} beyond noise; the engines have {lo} "
                            f"{scores[lo]:.3f} > {hi} {scores[hi]:.3f}")
    return {"ok": not problems, "engine_best": best, "problems": problems}


def extract(report: dict) -> dict:
    s = report["summary"]
    key = s["metric"]
    model = report["model"] if report["model"].startswith("zoo:") else Path(report["model"]).name
    return {"recipe": report["recipe_file"].split("/")[-1], "model": model,
            "samples": report["evaluation"]["samples"], "bootstrap": s.get("bootstrap"),
            "precision_model": (report.get("precision_model") or {}).get("text"),
            "decision": {k: s["decision"].get(k) for k in ("status", "ship", "best", "runner_up", "tied", "reason",
                                                            "warnings")},
            "metric": key, "figures": {a: s["intervals"][a][key] for a in ALGOS if a in s["intervals"]},
            "paired": [{k: c.get(k) for k in ("a", "b", "diff", "ci95", "p_value", "method", "significant")}
                       for c in s["paired"] if c["a"] in ALGOS and c["b"] in ALGOS]}


RUNS = {"yolov3-tiny": ("yolo.yaml", []),
        "mobilenet_v2": ("mobilenet_v2.yaml", ["--set", f"model={GOLDEN_MBV2}"]),  # the zoo's export needs torch
        "yolov8n-320": ("yolov8n.yaml", [])}


def run(model: str, out: Path) -> dict:
    recipe, extra = RUNS[model]
    cmd = [sys.executable, "-m", "calib", "--quiet", "run", str(ROOT / "recipes" / recipe), "--out", str(out), *extra]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return json.loads((out / "report.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", help="folder with <model>/report.json of earlier runs (else the recipes run)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "engine-order"))
    ap.add_argument("--models", default=",".join(RUNS))
    args = ap.parse_args()
    engines = engine_scores()
    OUT.mkdir(exist_ok=True)
    failed = False
    for model in args.models.split(","):
        p = Path(args.reports) / model / "report.json" if args.reports else None
        report = json.loads(p.read_text()) if p else run(model, Path(args.work) / model)
        rec = extract(report)
        eng = engines.get(model)
        rec["engines"] = eng
        rec["check"] = check(rec, eng) if eng else None
        (OUT / f"{model}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        e = eng["scores"] if eng else {}
        print(f"\n{model}: {rec['decision']['status']}, ship {rec['decision']['ship']} "
              f"({rec['samples']} samples; {rec['bootstrap'].get('groups', '-')} groups)")
        print(f"| algorithm | CPU {rec['metric']} (95 % CI) | engine | engine / CPU |")
        print("|---|---|---|---|")
        for a in ALGOS:
            f = rec["figures"].get(a)
            if not f:
                continue
            cpu = f"{f['value']:.3f} ({f['ci95'][0]:.3f} to {f['ci95'][1]:.3f})"
            ratio = f"{e[a] / f['value']:.2f}" if a in e and f["value"] else "-"
            print(f"| {a} | {cpu} | {e[a]:.3f} | {ratio} |" if a in e else f"| {a} | {cpu} | - | - |")
        if rec["check"] is None:
            print("check: no engine numbers recorded for this model yet")
        else:
            print("check:", "agrees with the engines" if rec["check"]["ok"] else "; ".join(rec["check"]["problems"]))
            failed |= not rec["check"]["ok"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
