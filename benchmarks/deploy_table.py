"""benchmarks/RESULTS_DEPLOY.md from what benchmarks/deploy_gpu.sh wrote on the GPU machine (its OUT folder):

    python benchmarks/deploy_table.py OUT [-o benchmarks/RESULTS_DEPLOY.md]

Optimization profiles (1/8/32), the EfficientNMS plugin model, the sentence encoder (FP16, INT8 Q/DQ) and the two
`calib run` recipes with backend tensorrt; every table names the card, TensorRT and the builder level."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


NOTES = "<!-- findings: kept when the tables are made again -->"


def _load(p: Path):
    return json.loads(p.read_text()) if p.is_file() else None


def _f(v, nd=4):
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def device(out: Path) -> dict:
    lines = (out / "device.txt").read_text().splitlines() if (out / "device.txt").is_file() else []
    d = {"card": lines[0] if lines else "?", "tensorrt": "?", "level": "?", "steps": []}
    for line in lines:
        if line.startswith("tensorrt "):
            d["tensorrt"] = line.split()[1]
        elif line.startswith("builder optimization level"):
            d["level"] = line.split()[-1]
        elif line.split(":")[0] in ("tests", "yolov8n", "minilm") and line.endswith(" s"):
            d["steps"].append(line)
    return d


def profiles(out: Path) -> list[str]:
    rows = ["| engine | shape point | batch | median ms | images/s |", "|---|---|---|---|---|"]
    found = False
    for prec in ("fp32", "int8"):
        for r in _load(out / "gpu" / f"profiles-{prec}.json") or []:
            found = True
            rows.append(f"| golden CNN {prec} | {r['point']} | {r['batch']} | {r['median_ms']} | "
                        f"{r.get('throughput_per_s', '-')} |")
    return rows if found else ["(no profile figures came back)"]


def _test_status(out: Path, test: str) -> str:
    """Why a GPU test's figures are missing, from the pytest logs (pytest.log, pytest-STEP.log)."""
    for log in sorted(out.glob("pytest*.log")):
        text = log.read_text(errors="replace")
        if test in text and "Fatal Python error" in text:
            return f"(no figures came back: the test run was cut at its time limit in {test}, during the build)"
        if test in text and "FAILED" in text:
            return f"(no figures came back: {test} failed; see {log.name})"
    return "(no figures came back: the test did not run or did not finish)"


def plugins(out: Path) -> list[str]:
    p = _load(out / "gpu" / "plugins.json")
    if not p:
        return [_test_status(out, "test_plugins_gpu.py")]
    rows = [f"YOLOv8n-320 + EfficientNMS_TRT on {p['images']} photos; FP32 reference: ONNX Runtime on the graph cut "
            f"before the plugin + the NMS in numpy ({p['fp32_cpu_detections']} detections).", "",
            "| configuration | detections | matched to FP32 CPU (same class, IoU >= 0.5) | recall vs FP32 | "
            "build s | median ms b1 / b4 / b8 |", "|---|---|---|---|---|---|"]
    s = p.get("int8_simulated") or {}
    rows.append(f"| INT8 simulated (calib Q/DQ, CPU) | {s.get('detections')} | {s.get('matched_fp32')} | "
                f"{_f(s.get('recall_vs_fp32'), 3)} | - | - |")
    for name, e in p["engines"].items():
        ms = e.get("median_ms", {})
        rows.append(f"| TensorRT {name} | {e['detections']} | {e['matched_fp32']} | {_f(e['recall_vs_fp32'], 3)} | "
                    f"{e['build_s']} | {' / '.join(str(ms.get(k, '-')) for k in ('1', '4', '8'))} |")
    return rows


def minilm(out: Path) -> list[str]:
    m = _load(out / "gpu" / "minilm.json")
    if not m:
        return [_test_status(out, "test_minilm_gpu.py")]
    rows = [f"all-MiniLM-L6-v2, {m['sentences']} held-out sentences, {m['seq_len']} tokens; cosine per sentence to "
            "ONNX Runtime's FP32 embedding.", "",
            "| configuration | mean cosine | lowest cosine | INT8 MatMuls | build s | median ms b1 / b16 / b32 |",
            "|---|---|---|---|---|---|"]
    for name, e in m["engines"].items():
        ms = e.get("median_ms", {})
        mm = f"{e['matmuls_int8']} of {e['matmuls']}" if "matmuls" in e else (f"{e['qdq_pairs']} Q/DQ pairs"
                                                                            if "qdq_pairs" in e else "-")
        rows.append(f"| {name} | {_f(e.get('mean_cosine'))} | {_f(e.get('min_cosine'))} | {mm} | "
                    f"{e.get('build_s', '-')} | {' / '.join(str(ms.get(k, '-')) for k in ('1', '16', '32'))} |"
                    if ms else f"| {name} | {_f(e.get('mean_cosine'))} | {_f(e.get('min_cosine'))} | {mm} | - | - |")
    return rows


def built_lines(log: Path) -> list[str]:
    """The engines a run built before it stopped (its `building` / `built` lines), and its exit status."""
    if not log.is_file():
        return ["(no log came back)"]
    lines = log.read_text(errors="replace").splitlines()
    rows = [ln for ln in lines if ln.startswith(("building ", "built ", "caches written", "exit "))]
    myelin = sum("myelinCache" in ln for ln in lines)
    if myelin:
        rows.append(f"(TensorRT: 'Myelin error from unknown graph' reading the timing cache, {myelin} times: "
                    "the cache was not used)")
    return ["(no report came back; what the run printed:)", "", "```", *rows, "```"]


def recipe_run(out: Path, name: str) -> list[str]:
    r = _load(out / "runs" / f"{name}-trt" / "report.json")
    log = out / f"{name.split('-')[0]}.log"
    if not r:
        return built_lines(log)
    s = r["summary"]
    metric = s["metric"]
    engines = (r.get("tensorrt") or {}).get("engines", {})
    rows = [f"Primary metric: {s['labels'].get(metric, metric)}, n = {s['n']}; ship: {s['best']}.", "",
            f"| configuration | {s['labels'].get(metric, metric)} | engine median ms | engine layers |",
            "|---|---|---|---|"]
    for cfg, row in s["rows"].items():
        e = engines.get(cfg, {})
        lat = (e.get("latency") or {}).get("median_ms", "-")
        layers = ", ".join(f"{k} {v}" for k, v in sorted(e.get("layer_summary", {}).items())) or "-"
        rows.append(f"| {cfg} | {_f(row.get(metric))} | {lat} | {layers} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("-o", type=Path, default=Path(__file__).with_name("RESULTS_DEPLOY.md"))
    a = ap.parse_args()
    d = device(a.out)
    head = f"{d['card']}, TensorRT {d['tensorrt']}, builder optimization level {d['level']}"
    parts = ["# Deployment features on a real GPU", "",
             f"Measured with `bash benchmarks/deploy_gpu.sh OUT {d['level']}` on {head}; tables made by "
             "`python benchmarks/deploy_table.py OUT`. Level 1 builds are functional runs: their latencies are not "
             "the tuned ones (level 3).", "",
             "## Dynamic batch: one optimization profile 1/8/32 (tests/gpu/test_profiles_gpu.py)", "",
             *profiles(a.out), "",
             "## A plugin model: YOLOv8n with EfficientNMS_TRT (tests/gpu/test_plugins_gpu.py)", "", *plugins(a.out),
             "", "## A transformer: the sentence encoder in FP16 and INT8 Q/DQ (tests/gpu/test_minilm_gpu.py)", "",
             *minilm(a.out), "", "## calib run with backend tensorrt: recipes/yolov8n.yaml", "",
             *recipe_run(a.out, "yolov8n"), "", "## calib run with backend tensorrt: recipes/minilm.yaml", "",
             *recipe_run(a.out, "minilm"), ""]
    if d["steps"]:
        parts += ["Step times on the device: " + "; ".join(d["steps"]) + ".", ""]
    notes = ""
    if a.o.is_file() and NOTES in a.o.read_text():  # findings written by hand below the marker are kept
        notes = a.o.read_text().split(NOTES, 1)[1]
    a.o.write_text("\n".join(parts) + "\n" + NOTES + notes)
    print(f"wrote {a.o}")


if __name__ == "__main__":
    main()
