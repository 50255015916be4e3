"""Peak memory of whole `calib` commands, against the calibration pass's, each in its own process.

    python benchmarks/bench_memory.py [--evaluate-sizes 16,32,64]

YOLOv3-tiny (the default recipe's model) on the default recipe's photo crops. Each job is one `calib` command run
in a fresh interpreter (imports, model loading, everything); its peak RSS is the process's own high-water mark
(getrusage RUSAGE_SELF, read in the worker after the command, which equals VmHWM). Printed as ratios to the peak
of the calibration pass alone (`calib calibrate`, four algorithms, the recipe's 32 calibration crops), so that
machines compare. `calib evaluate` runs with four caches at several evaluation sizes: flat means bounded.
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
sys.path.insert(0, str(ROOT))  # this checkout's calib, whatever is installed
CROPS = ROOT / "datasets" / "photos_crops"
ALGOS = ("minmax", "entropy", "percentile", "mse")
LIMIT_GB = 1.5


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker")
    ap.add_argument("--evaluate-sizes", default="16,32", help="evaluation images for `calib evaluate` (<= 32)")
    ap.add_argument("--skip-run", action="store_true", help="leave out `calib run recipes/yolo.yaml`")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
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


if __name__ == "__main__":
    main()
