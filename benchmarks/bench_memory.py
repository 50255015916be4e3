"""Peak memory of whole `calib` commands, against the calibration pass's, each in its own process.

    python benchmarks/bench_memory.py [--evaluate-sizes 16,32,64] [--skip-hires]
    python benchmarks/bench_memory.py --models [--only ppocr-det,layout-cdla] [--markdown FILE]

--models: calib's estimate of each command's peak RSS against the measured peak, for every third-party model of
tests/thirdparty and every zoo model that needs no extra, calibrate and evaluate at their native input sizes, the
default budget and batch size (benchmarks/memory_models.py); the ratio estimate / peak is what calib's model of
memory gets wrong (over 1 it refuses runs the machine could do, under 1 it lets a run past its budget).

YOLOv3-tiny (the default recipe's model) on the default recipe's photo crops. Each job is one `calib` command run
in a fresh interpreter (imports, model loading, everything); its peak RSS is the process's own high-water mark
(getrusage RUSAGE_SELF, read in the worker after the command, which equals VmHWM). Printed as ratios to the peak
of the calibration pass alone (`calib calibrate`, four algorithms, the recipe's 32 calibration crops), so that
machines compare. `calib evaluate` runs with four caches at several evaluation sizes: flat means bounded.

Then a high-resolution model against the memory budget: a synthetic detector-like conv net at 736x736 (a stride-1
stem, two downsamplings, an upsampling and a concat: 323 MB of float activations per sample), calibrated at
--batch-size 1, 8 and 32 and evaluated with four caches under the default budget (2 GB), each peak printed as a
ratio to the budget; one row with a budget large enough for whole batches shows what the budget saves.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))  # this checkout's calib, whatever is installed
CROPS = ROOT / "datasets" / "photos_crops"
ALGOS = ("minmax", "entropy", "percentile", "mse")
LIMIT_GB = 1.5
BUDGET_GB = 2.0  # calib's default --memory-budget
MB = 1 << 20


def worker(argv: list[str]) -> dict:
    """Run one calib command in this process; its time and this process's peak RSS."""
    from calib.cli import main

    t0 = time.perf_counter()
    try:
        main(["--quiet", *argv], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    return {"seconds": time.perf_counter() - t0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(name: str, argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(argv)], capture_output=True, text=True,
                       cwd=ROOT)
    if r.returncode != 0:
        return {"job": name, "error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return {"job": name, **json.loads(r.stdout.strip().splitlines()[-1])}


def hires_model(path: Path, size: int = 736, width: int = 16) -> Path:
    """A detector-like conv net at size x size (dynamic batch), with random weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x, cin, cout, stride, name, relu=True):
        w = rng.normal(0, (2 / (9 * cin)) ** 0.5, (cout, cin, 3, 3)).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, name + "_w"),
                      numpy_helper.from_array(np.zeros(cout, np.float32), name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], name=name, pads=[1, 1, 1, 1],
                                      strides=[stride, stride]))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + "_relu"], name=name + "_relu"))
        return name + "_relu"

    w = width
    x = conv("images", 3, w, 1, "stem")
    x = conv(x, w, 2 * w, 2, "down1")
    a = conv(conv(x, 2 * w, 2 * w, 1, "c1"), 2 * w, 2 * w, 1, "c2")
    y = conv(conv(a, 2 * w, 4 * w, 2, "down2"), 4 * w, 4 * w, 1, "c3")
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up_scales"))
    nodes.append(helper.make_node("Resize", [y, "", "up_scales"], ["up"], name="up", mode="nearest"))
    nodes.append(helper.make_node("Concat", ["up", a], ["cat"], name="cat", axis=1))
    out = conv(conv("cat", 6 * w, 2 * w, 1, "c4"), 2 * w, 6, 1, "head", relu=False)
    g = helper.make_graph(nodes, "hires", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                         ["N", 3, size, size])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def hires_rows(tmp: Path) -> list[dict]:
    model = str(hires_model(tmp / "hires736.onnx"))
    data = ["--data", str(CROPS), "--limit", "32", "--letterbox"]
    caches = tmp / "hires-caches"
    rows = []
    for b in (1, 8, 32):
        out = caches if b == 8 else tmp / f"hires-b{b}"
        rows.append(run(f"calibrate 736, batch {b}", ["calibrate", model, *data, "--batch-size", str(b), "--algo",
                                                      ",".join(ALGOS), "-o", str(out)]))
    rows.append(run("calibrate 736, batch 8, 64GB", ["calibrate", model, *data, "--batch-size", "8", "--algo",
                                                     ",".join(ALGOS), "--memory-budget", "64GB",
                                                     "-o", str(tmp / "hires-roomy")]))
    rows.append(run("evaluate 736, 4 caches, 16", [
        "evaluate", model, *[x for al in ALGOS for x in ("--cache", str(caches / f"{al}.cache"))],
        "--data", str(CROPS), "--limit", "16", "--offset", "32", "--letterbox", "-o", str(tmp / "hires-eval")]))
    return rows


def print_hires(rows: list[dict]) -> None:
    print(f"\n736x736 conv net (323 MB of activations per sample), against the default budget of {BUDGET_GB:g} GB")
    print(f"{'job':28s} {'seconds':>8s} {'peak RSS MB':>12s} {'x budget':>9s}")
    for r in rows:
        if "error" in r:
            print(f"{r['job']:28s} failed: {r['error']}")
            continue
        ratio = r["peak_rss_mb"] / (BUDGET_GB * 1024)
        print(f"{r['job']:28s} {r['seconds']:8.1f} {r['peak_rss_mb']:12.0f} {ratio:9.2f}")


def model_rows(only: set | None) -> tuple[list[dict], list[str]]:
    import memory_models

    with tempfile.TemporaryDirectory(prefix="calib-bench-") as tmp:
        rows = [memory_models.run(job, Path(__file__)) for job in memory_models.jobs(Path(tmp), only)]
        for r in rows:
            r["command"] = memory_models.shown(r["args"], Path(tmp))
    lines = ["| model | step | estimate MB | peak RSS MB | estimate / peak | seconds |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        est = f"{r['estimate'] / MB:.0f}" if r.get("estimate") else "-"
        ratio = f"{r['estimate'] / r['peak']:.2f}" if r.get("estimate") and r["peak"] else "-"
        peak = f"{r['peak'] / MB:.0f}" if not r.get("error") else "refused: " + r["error"][:120]
        lines.append(f"| {r['model']} | {r['step']} | {est} | {peak} | {ratio} | {r['seconds']:.1f} |")
    return rows, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker")
    ap.add_argument("--model-worker")
    ap.add_argument("--models", action="store_true", help="estimate against measured peak, per model")
    ap.add_argument("--only", help="--models: these models only (comma-separated)")
    ap.add_argument("--markdown", help="--models: also write the table and the commands to this file")
    ap.add_argument("--evaluate-sizes", default="16,32", help="evaluation images for `calib evaluate` (<= 32)")
    ap.add_argument("--skip-run", action="store_true", help="leave out `calib run recipes/yolo.yaml`")
    ap.add_argument("--skip-hires", action="store_true", help="leave out the 736x736 model against the budget")
    ap.add_argument("--only-hires", action="store_true", help="only the 736x736 model against the budget")
    a = ap.parse_args()
    if a.model_worker:
        import memory_models

        print(json.dumps(memory_models.worker(json.loads(a.model_worker))))
        return
    if a.models:
        rows, lines = model_rows(set(a.only.split(",")) if a.only else None)
        print("\n".join(lines))
        if a.markdown:
            from calib.io.files import atomic_write_text

            cmds = ["", "Commands (each in its own interpreter):", ""] + [f"    {r['command']}" for r in rows]
            atomic_write_text(Path(a.markdown), "\n".join(lines + cmds) + "\n")
        return
    if a.only_hires:
        with tempfile.TemporaryDirectory(prefix="calib-bench-") as tmp:
            print_hires(hires_rows(Path(tmp)))
        return
    from calib.zoo import fetch

    model = str(fetch("yolov3-tiny"))
    pre = ["--letterbox", "--pad-value", "127"]
    with tempfile.TemporaryDirectory(prefix="calib-bench-") as tmp:
        caches = Path(tmp) / "caches"
        rows = [run("calibrate (the pass)", ["calibrate", model, "--data", str(CROPS), "--limit", "32", *pre,
                                             "--algo", ",".join(ALGOS), "-o", str(caches)])]
        if not a.skip_run:
            rows.append(run("run recipes/yolo.yaml", ["run", str(ROOT / "recipes" / "yolo.yaml"), "--out",
                                                      str(Path(tmp) / "run")]))
        for n in (int(s) for s in a.evaluate_sizes.split(",") if s):
            rows.append(run(f"evaluate 4 caches, {n} img", [
                "evaluate", model, *[x for al in ALGOS for x in ("--cache", str(caches / f"{al}.cache"))],
                "--data", str(CROPS), "--limit", str(n), "--offset", "32", *pre, "--task", "detection",
                "--batch-size", "4", "-o", str(Path(tmp) / f"eval{n}")]))
        hires = [] if a.skip_hires else hires_rows(Path(tmp))
    base = rows[0]
    print("YOLOv3-tiny, default recipe's crops; peak RSS of each whole command (own process), against the pass")
    print(f"{'job':28s} {'seconds':>8s} {'peak RSS MB':>12s} {'x pass':>7s}")
    for r in rows:
        if "error" in r:
            print(f"{r['job']:28s} failed: {r['error']}")
            continue
        ratio = r["peak_rss_mb"] / base["peak_rss_mb"] if "error" not in base else float("nan")
        flag = "" if r["peak_rss_mb"] <= LIMIT_GB * 1024 else f"  over {LIMIT_GB} GB"
        print(f"{r['job']:28s} {r['seconds']:8.1f} {r['peak_rss_mb']:12.0f} {ratio:7.2f}{flag}")
    if hires:
        print_hires(hires)


if __name__ == "__main__":
    main()
