"""`--ray` against one process: the statistics pass and a recovery's variant evaluations on MobileNetV2.

    python benchmarks/bench_ray.py [--calib 192] [--holdout 48] [--workers 2] [--ray ADDRESS]

Needs the [ray] extra. Each job runs twice in this process, as `calib calibrate` / `calib recover` would, first
alone (ONNX Runtime on all cores), then with `--ray` on a Ray cluster: by default one started here with `--workers`
CPUs (a worker process each, one ONNX Runtime thread per task), or the cluster at `--ray`. The outputs must be
identical (every cache and sidecar byte for byte; recover.json up to its wall times), else the script fails. It
prints the seconds and the ratio (one process / Ray) per job, and the cluster's start-up separately.

On a machine of N cores, one process already runs ONNX Runtime on N threads: Ray's N workers gain only what a
single process leaves idle (session set-up, Python between runs, the histogram loops' hand-offs, a variant's
model building) and pay for the object store and each task's unpacking. The gain grows with machines, not with
workers on the same cores.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"


def _cli(args: list[str]) -> float:
    from calib.cli.main import main

    t0 = time.perf_counter()
    try:
        main(["-q", *args], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise RuntimeError(f"calib {' '.join(args)}: exit {exc.code}") from None
    return time.perf_counter() - t0


def _files(folder: Path, skip=(".calib-manifest.json", "recover.md", "run.log")) -> dict:
    out = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name not in skip}
    if "recover.json" in out:
        res = json.loads(out["recover.json"].decode().replace(str(folder), "OUT"))

        def untimed(x):
            if isinstance(x, dict):
                return {k: untimed(v) for k, v in x.items() if k not in ("seconds", "command")}
            return [untimed(v) for v in x] if isinstance(x, list) else x

        out["recover.json"] = untimed(res)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calib", type=int, default=192, help="calibration samples of the statistics pass")
    ap.add_argument("--holdout", type=int, default=48, help="held-out samples of the recovery")
    ap.add_argument("--workers", type=int, default=2, help="CPUs of the Ray cluster started here")
    ap.add_argument("--ray", help="a running cluster's address instead")
    a = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import os

    import ray
    from conftest import _photos_224

    photos = np.load(_photos_224())
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    calib_npy, rec_npy = tmp / "calib.npy", tmp / "recover.npy"
    np.save(calib_npy, photos[:a.calib])
    np.save(rec_npy, photos[:32 + a.holdout])
    t0 = time.perf_counter()
    if a.ray:
        ray.init(address=a.ray, log_to_driver=False)
    else:  # the workers import calib from this checkout
        ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}})
    start = time.perf_counter() - t0
    cpus = int(ray.cluster_resources().get("CPU", 0))
    _cli(["calibrate", str(MODEL), "--data", str(calib_npy), "--preprocess", "imagenet", "--limit", "8",
          "-o", str(tmp / "warm")])  # the compiled loops and the capture graph, once for both
    jobs = {
        f"statistics pass ({a.calib} samples, 4 algorithms)":
            ["calibrate", str(MODEL), "--data", str(calib_npy), "--preprocess", "imagenet", "--batch-size", "16"],
        f"recover, variant evaluations (32 + {a.holdout} samples, --steps none)":
            ["recover", str(MODEL), "--data", str(rec_npy), "--preprocess", "imagenet", "--task", "classification",
             "--target", "agreement_top1>=0.99", "--steps", "none"],
    }
    rows = []
    for name, args in jobs.items():
        one = _cli([*args, "-o", str(tmp / "one")])
        on_ray = _cli([*args, "-o", str(tmp / "ray"), "--ray", "auto"])
        same = _files(tmp / "one") == _files(tmp / "ray")
        if not same:
            raise SystemExit(f"{name}: the --ray output differs from one process's")
        extra = ""
        if args[0] == "recover":
            res = json.loads((tmp / "one" / "recover.json").read_text())
            extra = f" ({res['variants_measured']} variants, {len(res['float_layers'])} layers in float)"
        rows.append((name + extra, one, on_ray))
        for d in ("one", "ray"):
            import shutil

            shutil.rmtree(tmp / d)
    ray.shutdown()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"Ray {ray.__version__}; cluster of {cpus} CPUs started in {start:.1f} s\n")
    print("| job | one process (s) | Ray (s) | one / Ray | outputs |\n|---|---|---|---|---|")
    for name, one, on_ray in rows:
        print(f"| {name} | {one:.1f} | {on_ray:.1f} | {one / on_ray:.2f} | identical |")


if __name__ == "__main__":
    main()
