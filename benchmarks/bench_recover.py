"""`calib recover` on ten real models, beside NNCF's `quantize_with_accuracy_control` on the same model, data,
metric function and target: writes benchmarks/RESULTS_RECOVER.md and benchmarks/recover_results.json.

    python benchmarks/bench_recover.py [--models a,b] [--nncf-python PYTHON] [--nncf-models a,b]
                                       [--time-budget 15m] [--nncf-cap 1200]

The five third-party models of tests/thirdparty (their packages' flags, tests/thirdparty/runs.py) and the zoo's
yolov3-tiny, yolov8n-320, mobilenet_v2, pplcnet-orientation and minilm-l6; targets 0.95 of FP32 on mAP50:95
against FP32's boxes for the detectors, 0.99 top-1 agreement for the classifiers, 0.99 mean cosine for MiniLM.
Each `calib recover` runs in its own process under /usr/bin/time -v (wall time, peak RSS) with --time-budget.
NNCF runs in its own Python (--nncf-python: an environment with nncf and onnxruntime; never calib's) through
benchmarks/nncf_control.py, its inputs and its metric served by benchmarks/recover_scorer.py from calib's own
data and scoring code; it is stopped at --nncf-cap seconds and then reported as far as it got. Results merge into
the JSON, so models can be run a few at a time; the table says which rows are missing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "thirdparty"))
import runs  # noqa: E402

JSON = ROOT / "benchmarks" / "recover_results.json"
MD = ROOT / "benchmarks" / "RESULTS_RECOVER.md"
TIME = Path("/usr/bin/time")
DET, CLS, EMB = ("map50_95_vs_fp32", 0.95), ("agreement_top1", 0.99), ("mean_cosine", 0.99)
THIRDPARTY = ("ppocr-cls", "mtcnn-pnet", "ddddocr-det", "ppocr-det", "layout-cdla")
ORDER = ("ppocr-cls", "pplcnet-orientation", "mobilenet_v2", "minilm-l6", "yolov8n-320", "yolov3-tiny",
         "mtcnn-pnet", "ddddocr-det", "ppocr-det", "layout-cdla")
NNCF_MODEL_TYPE = {"minilm-l6": "TRANSFORMER"}  # NNCF's advice for transformers (its preset for them)
PHOTOS = dict(limit=40, calib=16)  # third-party and PP-LCNet: 16 crops calibrate, 24 are held out


@dataclass(frozen=True)
class Bench:
    name: str
    args: tuple  # calib recover's MODEL and options, --target/--out/--time-budget aside
    metric: str
    threshold: float


def _mtcnn_photos(work: Path) -> Path:
    """datasets/photos_crops transposed (MTCNN is fed width first), once per run."""
    from PIL import Image

    folder = work / "photos_crops_transposed"
    if not folder.is_dir():
        tmp = Path(tempfile.mkdtemp(dir=work))
        for f in sorted((ROOT / "datasets" / "photos_crops").glob("*.jpg")):
            Image.open(f).transpose(Image.Transpose.TRANSPOSE).save(tmp / f.name, quality=95)
        tmp.rename(folder)
    return folder


def bench(name: str, work: Path) -> Bench:
    from calib.zoo import registry, thirdparty

    crops = ROOT / "datasets" / "photos_crops"
    split = ("--limit", PHOTOS["limit"], "--calib-samples", PHOTOS["calib"])
    if name in THIRDPARTY:
        case = runs.CASES[name]
        batch = [a for f in (case.calibrate_flags, case.evaluate_flags) for a in f]
        batch = batch[batch.index("--batch-size"):][:2] if "--batch-size" in batch else []
        data = _mtcnn_photos(work) if case.transpose else crops
        metric = DET if case.metric.startswith("map") else CLS
        return Bench(name, (thirdparty.fetch(name), "--data", data, *case.flags, *batch, *case.task,
                            "--deploy", "qdq", *split), *metric)
    if name == "pplcnet-orientation":
        return Bench(name, (registry.fetch(name), "--data", crops, "--resize", "256", "--crop", "224",
                            "--preprocess", "imagenet", "--task", "classification", *split), *CLS)
    recipes = {"yolov3-tiny": ("yolo.yaml", DET, ("--set", "evaluation_data.limit=48")),
               "yolov8n-320": ("yolov8n.yaml", DET, ("--set", "evaluation_data.limit=48")),
               "mobilenet_v2": ("mobilenet_v2.yaml", CLS, (  # the zoo's export needs torch: the same weights' ONNX
                   "--set", f"model={ROOT / 'tests/golden/trt86-h200/mobilenet_v2/mobilenet_v2_imagenet.onnx'}")),
               "minilm-l6": ("minilm.yaml", EMB, ())}
    recipe, metric, extra = recipes[name]
    return Bench(name, (ROOT / "recipes" / recipe, *extra), *metric)


def model_file(name: str) -> Path:
    from calib.zoo import registry, thirdparty

    if name in THIRDPARTY:
        return thirdparty.fetch(name)
    if name == "mobilenet_v2":
        return ROOT / "tests/golden/trt86-h200/mobilenet_v2/mobilenet_v2_imagenet.onnx"
    return registry.fetch(name)


def timed(cmd: list, cap: float | None = None, log: Path | None = None) -> dict:
    """`cmd` under /usr/bin/time -v: wall seconds, peak RSS, exit code; killed (its whole group) past `cap`."""
    cmd = [str(c) for c in cmd]
    full = [str(TIME), "-v", *cmd] if TIME.is_file() else cmd
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(full, stdout=log.open("w") if log else subprocess.DEVNULL, stderr=err, cwd=ROOT,
                             text=True, start_new_session=True)
        try:
            p.wait(timeout=cap)
            capped = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            capped = True
        err.seek(0)
        text = err.read()
    seconds = time.perf_counter() - t0
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    tail = [ln for ln in text.split("\tCommand being timed:")[0].strip().splitlines() if ln.strip()][-3:]
    return {"rc": p.returncode, "seconds": round(seconds, 1), "peak_rss_gb": round(int(peak.group(1)) / 2**20, 2)
            if peak else None, "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "capped": capped, "stderr_tail": tail}


def _short(v, work: Path) -> str:
    """`v` without this machine's folders: the repository's, the work folder's, calib's model store's."""
    from calib.io.files import calib_home

    for folder in (ROOT, work, calib_home() / "thirdparty", calib_home() / "zoo"):
        v = str(v).replace(str(folder) + "/", "")
    return v


def run_calib(b: Bench, work: Path, budget: str) -> dict:
    out = work / b.name / "recovered"
    shutil.rmtree(out, ignore_errors=True)
    target = f"{b.metric.removesuffix('_vs_fp32')}>={b.threshold}"
    cmd = [sys.executable, "-m", "calib", "recover", *b.args, "--target", target, "--time-budget", budget,
           "-o", out]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    r = timed(cmd, log=work / b.name / "calib.log")
    r["commit"] = head.stdout.strip() or None
    r["command"] = _short(shlex.join(["calib", *[str(c) for c in cmd[3:-2]], "-o", "recovered"]), work)
    if r["rc"] != 0 or not (out / "recover.json").is_file():
        return r
    rep = json.loads((out / "recover.json").read_text())
    r.update(value=rep["value"], met=rep["met"], already_met=rep["already_met"], fp32=rep["fp32_value"],
             all_int8=rep["all_int8"], algorithm=rep["algorithm"], float_layers=len(rep["float_layers"]),
             int8_macs_share=rep["int8_macs_share"], out_of_time=rep["out_of_time"],
             variants=rep["variants_measured"], evaluation_samples=rep["evaluation_samples"],
             calibration_samples=rep["calibration_samples"], float_names=[f["layer"] for f in rep["float_layers"]],
             steps=[{k: s.get(k) for k in ("step", "value", "kept", "note", "seconds")} for s in rep["steps"]])
    r["float_weighted"] = weighted(rep["model"], r["float_names"])
    return r


def weighted(model: str, names: list) -> int:
    """How many of the layers `names` are Conv/ConvTranspose/Gemm/MatMul (calib names an unnamed node OP@k)."""
    import onnx

    ops = {n.name: n.op_type for n in onnx.load(model, load_external_data=False).graph.node if n.name}
    return sum((ops.get(n) or n.split("@")[0]) in ("Conv", "ConvTranspose", "Gemm", "MatMul") for n in names)


def run_nncf(b: Bench, work: Path, python: str, cap: float) -> dict:
    w = work / b.name / "nncf"
    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)
    scorer = shlex.join([sys.executable, str(ROOT / "benchmarks" / "recover_scorer.py"), str(w), b.metric, "--",
                         *[str(a) for a in b.args]])
    cmd = [python, ROOT / "benchmarks" / "nncf_control.py", "--work", w, "--max-drop", f"{1 - b.threshold:.4g}",
           "--scorer", scorer, *(["--model-type", NNCF_MODEL_TYPE[b.name]] if b.name in NNCF_MODEL_TYPE else [])]
    r = timed(cmd, cap=cap, log=w / "nncf.out")
    r["cap_s"] = cap
    text = (w / "nncf.out").read_text() if (w / "nncf.out").is_file() else ""
    total = re.findall(r"(\d+) out of (\d+) were reverted", text)
    r["ops_reverted"] = f"{total[-1][0]} of {total[-1][1]}" if total else None
    if (w / "nncf.json").is_file():
        r.update(json.loads((w / "nncf.json").read_text()))
        r["met"] = r["value"] >= b.threshold
    else:  # cut off: how far it got
        points = [json.loads(ln) for ln in (w / "nncf_log.jsonl").read_text().splitlines()] \
            if (w / "nncf_log.jsonl").is_file() else []
        reverted = sum(int(n) for n in re.findall(r"Reverted (\d+) operations", text))
        r.update(points=points, quantize=points[0]["value"] if points else None,
                 value=max((p["value"] for p in points[1:] if not p.get("fp32")), default=None),
                 reverted_ops_logged=reverted,
                 met=False)
    return r


def _f(v, nd=3) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _steps(c: dict) -> str:
    parts = []
    for s in c.get("steps", [])[1:]:
        if s["value"] is None:
            continue
        parts.append(f"{s['step'].split(':')[0]} {_f(s['value'])}{'' if s['kept'] else ' (not kept)'}")
    return "; ".join(parts) or "-"


def table(results: dict, budget: str, cap: float) -> str:
    lines = ["# `calib recover` on ten real models, beside NNCF's accuracy control", "",
             f"`python benchmarks/bench_recover.py --nncf-python PYTHON`, {date.today()}, {platform.machine()} "
             f"({os.cpu_count()} cores, shared with other work: the load average is given beside each time), "
             f"Python {platform.python_version()}. `calib recover` with `--time-budget {budget}`, the default memory "
             "budget (2GB) and default steps; NNCF "
             f"`quantize_with_accuracy_control` (absolute max_drop = 1 - target) on the same ONNX model (at opset 13 "
             "or above, as calib measures it), the same calibration and held-out samples and calib's own metric "
             "function (benchmarks/recover_scorer.py), ONNX Runtime fake-quant (basic graph optimizations), stopped "
             f"at {cap / 60:.0f} min and then reported as far as it got. Targets: mAP50:95 against FP32's boxes "
             ">= 0.95 (detectors), top-1 agreement >= 0.99 (classifiers), mean cosine >= 0.99 (MiniLM).", "",
             "Data: the third-party models and PP-LCNet take 40 crops of datasets/photos_crops (seeded), 16 "
             "calibrate, 24 are held out (MTCNN's transposed); the zoo's recipes their own calibration set and "
             "held-out set (yolov3-tiny and yolov8n-320: the first 48 held-out photos).", "",
             "| model | target | all INT8 | INT8 steps | after fallback | met | layers in float (Conv/Gemm/MatMul) | "
             "MACs in INT8 | time (load) | peak RSS | NNCF quantize | NNCF accuracy control | NNCF Conv/Gemm/MatMul in "
             "float (ops reverted) | NNCF time (load) | calib vs NNCF |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    done = []
    missing = []
    for name in ORDER:
        r = results.get(name)
        if not r or "calib" not in r:
            missing.append(name)
            continue
        c, n = r["calib"], r.get("nncf")
        if "value" not in c:
            row = f"| {name} | {r['target']} | failed: {' '.join(c['stderr_tail'])[-120:]} |" + " |" * 11
            lines.append(row)
            continue
        best = max((v["value"] for v in c["all_int8"].values() if v["value"] is not None), default=None)
        fb = "-" if c["already_met"] else _f(c["value"])
        share = "-" if c["int8_macs_share"] is None else f"{100 * c['int8_macs_share']:.0f} %"
        met = "yes (all INT8)" if c["already_met"] else ("yes" if c["met"] else "no") + \
            (" (budget spent)" if c["out_of_time"] else "")
        if n:
            nq, nv = _f(n.get("quantize")), _f(n.get("value"))
            nl = (f"{n['float_layers']} ({n.get('ops_reverted') or '-'})" if "float_layers" in n else
                  f"- ({n.get('reverted_ops_logged', 0)} ops reverted when cut off)")
            nt = f"{n['seconds'] / 60:.1f} min ({n['load_before']:.1f})" + (f" (cut off at {n['cap_s'] / 60:.0f} min)" if n["capped"] else "")
            nv += "" if n.get("met") else " (not met)"
        else:
            nq = nv = nl = nt = "not run"
        vs = versus(c, n)
        if c.get("met") and vs.startswith(("fewer", "as many", "NNCF does not")) and c["seconds"] < 900:
            done.append(name)
        lines.append(f"| {name} | {r['target']} | {_f(best)} ({c['algorithm']}) | {_steps(c)} | {fb} | {met} | "
                     f"{c['float_layers']} ({c.get('float_weighted', '-')}) | {share} | {c['seconds'] / 60:.1f} min ({c['load_before']:.1f}) | "
                     f"{c['peak_rss_gb']:.2f} GB | {nq} | {nv} | {nl} | {nt} | {vs} |")
    lines += ["", "all INT8: the best calibration algorithm's figure with every layer in INT8; INT8 steps: each "
              "recovery step's figure on the held-out samples (kept only where it raises the figure); after "
              "fallback: with the layers in float; MACs in INT8: the share of the model's Conv/MatMul/Gemm "
              "multiply-adds left in INT8. NNCF layers in float: Conv/Gemm/MatMul layers whose weights NNCF's "
              "plain quantize quantizes and its accuracy control gave back to float. NNCF ran with its defaults "
              "(preset), MiniLM with model_type=TRANSFORMER (NNCF's advice for transformers) and the symmetric preset "
              "PERFORMANCE: the transformer type's default MIXED preset makes asymmetric activations, which TensorRT's "
              "INT8 does not take (with it NNCF's plain quantize scored 0.998 on MiniLM, 21 of its 36 quantizers with "
              "a non-zero zero point). Both sides ran at once with other work on the same two cores (the load average): "
              "a wall-time budget buys less search there than on an idle machine.", ""]
    lines += [f"Target met with no more Conv/Gemm/MatMul layers in float than NNCF's accuracy control needs (or "
              f"NNCF not meeting it): {len(done)} of {len(ORDER)} ({', '.join(done) or 'none'}).", ""]
    if missing:
        lines += [f"Not run yet: {', '.join(missing)}.", ""]
    no_nncf = [m for m in ORDER if m in results and not results[m].get("nncf")]
    if no_nncf:
        lines += [f"NNCF not run yet on {', '.join(no_nncf)} (its runs of up to 20 min each did not fit the time this "
                  "table was made in; both models met the target with calib).", ""]
    lines += ["## Commands (and the commit of calib each row ran)", ""]
    for name in ORDER:
        if name in results and "calib" in results[name]:
            c = results[name]["calib"]
            lines.append(f"- {name} ({c.get('commit') or 'commit not recorded'}): `{c.get('command', '')}`")
    return "\n".join(lines) + "\n"


def versus(c: dict, n: dict | None) -> str:
    """calib's Conv/Gemm/MatMul layers in float against NNCF's, where both met the target."""
    if c.get("already_met"):
        return "as many (none: all INT8 meets it)"
    if not n:
        return "NNCF not run"
    if not n.get("capped") and n.get("rc") not in (0, None):
        return "NNCF failed: " + " ".join(n.get("stderr_tail", [])[:1])[-80:]
    if not n.get("met"):
        return "NNCF does not meet it" + (" (cut off)" if n.get("capped") else "")
    if not c.get("met") or c.get("float_weighted") is None:
        return "-"
    if c["float_weighted"] == 0:
        return "as many or fewer (none in float)"
    d = c["float_weighted"] - n["float_layers"]
    return "fewer" if d < 0 else "as many" if d == 0 else "more"


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ORDER))
    ap.add_argument("--nncf-python", help="a Python with nncf and onnxruntime (NNCF's own environment)")
    ap.add_argument("--nncf-models", help="NNCF on these only (default: every model run)")
    ap.add_argument("--no-calib", action="store_true", help="NNCF only (calib's rows kept from the JSON)")
    ap.add_argument("--time-budget", default="15m")
    ap.add_argument("--nncf-cap", type=float, default=1200)
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--table", action="store_true", help="only write the table again from the JSON")
    a = ap.parse_args()
    results = json.loads(JSON.read_text()) if JSON.is_file() else {}
    if a.table:
        for f in sorted(a.work.glob("*/nncf_row.json")) if a.work else ():
            results.setdefault(f.parent.name, {})["nncf"] = json.loads(f.read_text())
        for name, row in results.items():
            c = row.get("calib", {})
            if "float_names" in c and "float_weighted" not in c:
                c["float_weighted"] = weighted(str(model_file(name)), c["float_names"])
            for part in (c, row.get("nncf") or {}):  # no folder of this machine in what is published
                part["stderr_tail"] = [_short(t, a.work or ROOT) for t in part.get("stderr_tail", [])]
        _write(JSON, json.dumps(results, indent=1, default=str))
        _write(MD, table(results, a.time_budget, a.nncf_cap))
        return
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-recover-"))
    work.mkdir(parents=True, exist_ok=True)
    nncf_models = (a.nncf_models or a.models).split(",")
    for name in [m for m in ORDER if m in a.models.split(",")]:
        b = bench(name, work)
        (work / name).mkdir(parents=True, exist_ok=True)
        row = {}
        row["target"] = f"{b.metric} >= {b.threshold}"
        if not a.no_calib:
            row["calib"] = run_calib(b, work, a.time_budget)
            print(name, "calib", json.dumps({k: row["calib"].get(k) for k in ("value", "met", "float_layers",
                                                                            "seconds", "rc")}), flush=True)
        if a.nncf_python and name in nncf_models:
            row["nncf"] = run_nncf(b, work, a.nncf_python, a.nncf_cap)
            _write(work / name / "nncf_row.json", json.dumps(row["nncf"], default=str))
            print(name, "nncf", json.dumps({k: row["nncf"].get(k) for k in ("value", "float_layers", "seconds",
                                                                           "rc")}), flush=True)
        on_disk = json.loads(JSON.read_text()) if JSON.is_file() else {}  # another run may have written since
        on_disk.setdefault(name, {}).update(row)
        results = on_disk
        _write(JSON, json.dumps(results, indent=1, default=str))
        _write(MD, table(results, a.time_budget, a.nncf_cap))


if __name__ == "__main__":
    main()
