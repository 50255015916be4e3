"""How calib's compiled loops share the cores: the OpenMP wait settings, on an idle machine and beside busy processes.

    python benchmarks/bench_contention.py [--samples 64] [--busy 1,2] [--repeat 2]

calib's statistics loops run on numba's OpenMP team (GNU libgomp), between ONNX Runtime's runs. Its threads spin
after each loop (300000 turns by default), sleep at once with OMP_WAIT_POLICY=PASSIVE, or spin briefly and then
sleep with GOMP_SPINCOUNT=500 (what calib sets unless the user set either variable). Each setting runs a fresh
process that calibrates MobileNetV2 on the golden photos (four algorithms) in process, alone and beside `--busy`
processes that each keep one core busy; the table prints seconds and the ratio to calib's setting in the same
condition. The settings only take effect when the OpenMP library loads, hence one process per run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"calib (spin 500, then sleep)": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "500"},
            "passive": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"},
            "spinning (libgomp default)": {"OMP_WAIT_POLICY": "ACTIVE"}}


def worker(samples: int) -> None:
    import numpy as np

    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from conftest import _photos_224

    from calib.calibrate import calibrate

    model = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"
    photos = np.load(_photos_224())[:samples]
    calibrate(model, photos[:8], preprocess="imagenet", batch_size=8)  # loads the compiled loops
    t0 = time.perf_counter()
    calibrate(model, photos, preprocess="imagenet", batch_size=32)
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def run(setting: dict, samples: int) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    r = subprocess.run([sys.executable, __file__, "--worker", "--samples", str(samples)], capture_output=True,
                       text=True, env={**env, **setting})
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--busy", default="0,1,2", help="comma list: how many busy processes beside the run")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args.samples)
    print(f"MobileNetV2, {args.samples} photos, four algorithms, in process; {os.cpu_count()} cores; "
          f"best of {args.repeat}")
    print(f"{'busy processes':>14s}  {'setting':28s} {'seconds':>8s} {'x calib':>8s}")
    for busy in [int(b) for b in args.busy.split(",")]:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            times = {name: min(run(s, args.samples) for _ in range(args.repeat)) for name, s in SETTINGS.items()}
        finally:
            for h in hogs:
                h.kill()
        base = times["calib (spin 500, then sleep)"]
        for name, t in times.items():
            print(f"{busy:14d}  {name:28s} {t:8.2f} {t / base:8.2f}", flush=True)


if __name__ == "__main__":
    main()
