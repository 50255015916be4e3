"""Calibration speed and memory: calib's one-pass statistics vs ONNX Runtime's calibrators vs pure FP32 inference.

    python benchmarks/bench_calibrate.py [--samples 256] [--batch 32] [--skip-ort entropy,percentile] [--whole 3]
    python benchmarks/bench_calibrate.py --only-whole      # only the whole-process figures

MobileNetV2 (the TensorRT golden model) on the golden real photos, ImageNet preprocessing. Each job runs in its
own process so that peak RSS is its own; the table prints time and memory as ratios to pure FP32 inference run
in the same script. calib's job computes all four algorithms (minmax, entropy, percentile, mse) from one pass.

The whole-process figure runs `calib calibrate` as a user does (a fresh interpreter: imports, loading the compiled
kernels, the model and data, the pass, the caches) against a fresh interpreter doing only the FP32 pass over the
same data, on MobileNetV2 (256 photos) and YOLOv3-tiny (the default recipe's 32 calibration crops); beside it, the
same two jobs in process, each timed from the end of its imports (calib's after its kernels' load), so that the
difference is what start-up costs.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
MODEL = ROOT / "tests" / "golden" / "trt86-h200" / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"


def photos_u8() -> np.ndarray:
    """The 256 golden uint8 NHWC photos; every job preprocesses them batch by batch."""
    from conftest import _photos_224

    return np.load(_photos_224())


class Batches:
    """`samples` preprocessed samples cycling over the photos, so that the data held is the same at any size."""

    def __init__(self, u8: np.ndarray, batch: int, samples: int):
        self.u8, self.batch, self.samples = u8, batch, samples

    def __len__(self) -> int:
        return self.samples

    def __iter__(self):
        from calib.data.arrays import preset_transform

        for i in range(0, self.samples, self.batch):
            idx = np.arange(i, min(self.samples, i + self.batch)) % len(self.u8)
            yield preset_transform(self.u8[idx], "imagenet", True)


class Source(Batches):
    def __iter__(self):
        for b in super().__iter__():
            yield {"input": b}


def job(name: str, samples: int, batch: int) -> dict:
    u8 = photos_u8()
    batches = Batches(u8, batch, samples)
    x = next(iter(batches))
    t0 = time.perf_counter()
    if name == "fp32":
        import onnxruntime as ort

        s = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
        s.run(None, {"input": x})
        setup = time.perf_counter() - t0  # session creation and the first (warm-up) run, reported apart
        t0 = time.perf_counter()
        for b in batches:
            s.run(None, {"input": b})
    elif name == "calib":
        from calib.calibrate import calibrate

        from calib.stats.kernels import abs_histogram, kl_divergences, mse_errors, range_stats

        range_stats(x[0].ravel(), 1)  # compile outside the timing
        abs_histogram(x[0].ravel(), 1.0, 16, 1, True)
        kl_divergences(np.ones(256), 128, 128, 1)
        mse_errors(np.ones(4), np.ones(4), np.ones(2))
        t0 = time.perf_counter()
        calibrate(MODEL, Source(u8, batch, samples), ["minmax", "entropy", "percentile", "mse"])
    else:
        from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, create_calibrator

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter(batches)  # preprocessed lazily, like calib's source

            def get_next(self):
                b = next(self.it, None)
                return None if b is None else {"input": b}

        method = {"ort-minmax": CalibrationMethod.MinMax, "ort-entropy": CalibrationMethod.Entropy,
                  "ort-percentile": CalibrationMethod.Percentile}[name]
        with tempfile.TemporaryDirectory() as d:
            cal = create_calibrator(str(MODEL), augmented_model_path=str(Path(d) / "aug.onnx"),
                                    calibrate_method=method)
            cal.collect_data(Reader())
            cal.compute_data()
    secs = time.perf_counter() - t0
    out = {"job": name, "seconds": secs, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if name == "fp32":
        out["setup_seconds"] = setup
    return out


YOLO = {"data": ROOT / "datasets" / "photos_crops", "limit": 32, "batch": 8}  # the default recipe's calibration set


def plain_pass(which: str, photos: str, imported=lambda: None) -> None:
    """The baseline of the whole-process figure: a fresh interpreter that reads the same data, preprocesses it as
    calib does and runs ONNX Runtime FP32 over it, nothing else (no onnx import: the photos' path is given).
    `imported` is called once the imports are done (where the in-process figure starts its clock)."""
    import onnxruntime as ort

    if which != "mobilenet_v2":
        from calib.data.sources import make_source
        from calib.recipe import DataSpec, PreprocessSpec
        from calib.zoo import fetch
    imported()
    if which == "mobilenet_v2":
        u8 = np.load(photos, mmap_mode="r")
        s = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
        for b in Source(u8, 32, len(u8)):
            s.run(None, b)
        return
    model = fetch("yolov3-tiny")
    src = make_source(DataSpec(kind="folder", path=str(YOLO["data"]), limit=YOLO["limit"]),
                      PreprocessSpec(resize=(416, 416), mode="letterbox", pad_value=127), "images", YOLO["batch"])
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for b in src:
        s.run(None, b)


def calib_command(which: str, out: str) -> list[str]:
    if which == "mobilenet_v2":
        from conftest import _photos_224

        return ["calibrate", str(MODEL), "--data", str(_photos_224()), "--preprocess", "imagenet",
                "--batch-size", "32", "-o", out]
    from calib.zoo import fetch

    return ["calibrate", str(fetch("yolov3-tiny")), "--data", str(YOLO["data"]), "--limit", str(YOLO["limit"]),
            "--letterbox", "--pad-value", "127", "--batch-size", str(YOLO["batch"]), "-o", out]


def calib_in_process(which: str, out: str) -> float:
    """`calib calibrate` in this process after its imports and its kernels' load: the in-process figure."""
    import importlib

    from calib.cli import main
    from calib.stats import warmup

    importlib.import_module("calib.calibrate")  # what the command imports
    warmup.start()
    warmup._thread.join()
    t0 = time.perf_counter()
    try:
        main(["-q", *calib_command(which, out)], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    return time.perf_counter() - t0


def plain_in_process(which: str, photos: str) -> float:
    t0 = [0.0]
    plain_pass(which, photos, lambda: t0.__setitem__(0, time.perf_counter()))
    return time.perf_counter() - t0[0]


def in_process(which: str, job: str, out: str) -> float:
    """Seconds of `job` (calib or plain) in a fresh interpreter, counted from the end of its imports."""
    from conftest import _photos_224

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    r = subprocess.run([sys.executable, __file__, "--in-process", job, "--plain", which, "--photos",
                        str(_photos_224()), "--out", out], capture_output=True, text=True, cwd=ROOT, env=env)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["failed"])[-1])
    return float(r.stdout.strip().splitlines()[-1])


def wall(cmd: list[str]) -> float:
    """Seconds from spawning `cmd` to its exit: interpreter start, imports, compiled-kernel loading, everything."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["failed"])[-1])
    return secs


def whole_process(repeat: int) -> None:
    """`calib calibrate` (four algorithms) as a user runs it against the plain FP32 pass, both whole processes,
    alternated `repeat` times (after one warm-up pair: the kernels compile once per checkout)."""
    print("whole process (spawn to exit) and in process (after the imports and the kernels' load), median of "
          "alternated runs; calib = calib calibrate, four algorithms")
    print(f"{'model':14s} {'plain FP32 s':>12s} {'calib s':>8s} {'x FP32':>7s}   {'in process: plain s':>19s} "
          f"{'calib s':>8s} {'x FP32':>7s}")
    for which in ("mobilenet_v2", "yolov3-tiny"):
        with tempfile.TemporaryDirectory(prefix="calib-bench-") as out:
            calib_cmd = [sys.executable, "-m", "calib", "-q", *calib_command(which, out)]
            from conftest import _photos_224

            plain_cmd = [sys.executable, __file__, "--plain", which, "--photos", str(_photos_224())]
            try:
                wall(plain_cmd), wall(calib_cmd)
                runs = [(wall(plain_cmd), wall(calib_cmd), in_process(which, "plain", out),
                         in_process(which, "calib", out)) for _ in range(repeat)]
            except RuntimeError as exc:
                print(f"{which:14s} failed: {exc}")
                continue
        fp32, cal, fp32_in, cal_in = (sorted(r[i] for r in runs)[len(runs) // 2] for i in range(4))
        print(f"{which:14s} {fp32:12.2f} {cal:8.2f} {cal / fp32:7.2f}   {fp32_in:19.2f} {cal_in:8.2f} "
              f"{cal_in / fp32_in:7.2f}   (whole runs: " + ", ".join(f"{r[0]:.1f}/{r[1]:.1f}" for r in runs) + ")")


def run_job(name: str, samples: int, batch: int) -> dict:
    r = subprocess.run([sys.executable, __file__, "--worker", name, "--samples", str(samples), "--batch", str(batch)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return {"job": name, "error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    """The run with the median time (errors win: a failed run is reported, not hidden)."""
    bad = [r for r in runs if "error" in r]
    if bad:
        return bad[0]
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--worker")
    ap.add_argument("--skip-ort", default="", help="comma-separated: minmax,entropy,percentile")
    ap.add_argument("--scaling", type=int, default=1024, help="also run calib at this many samples (0: skip)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="FP32 and calib runs, alternated; the table shows each one's median (the machine drifts)")
    ap.add_argument("--plain", help=argparse.SUPPRESS)
    ap.add_argument("--photos", help=argparse.SUPPRESS)
    ap.add_argument("--in-process", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--whole", type=int, default=3, help="alternated whole-process runs per model (0: skip)")
    ap.add_argument("--only-whole", action="store_true", help="only the whole-process figures")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(job(a.worker, a.samples, a.batch)))
        return
    if a.in_process:
        secs = calib_in_process(a.plain, a.out) if a.in_process == "calib" else plain_in_process(a.plain, a.photos)
        print(secs)
        return
    if a.plain:
        plain_pass(a.plain, a.photos)
        return
    if a.only_whole:
        whole_process(a.whole)
        return
    skip = {f"ort-{s}" for s in a.skip_ort.split(",") if s}
    pairs = [(run_job("fp32", a.samples, a.batch), run_job("calib", a.samples, a.batch)) for _ in range(a.repeat)]
    rows = [_median([p[0] for p in pairs]), _median([p[1] for p in pairs])]
    rows += [run_job(j, a.samples, a.batch) for j in ("ort-minmax", "ort-percentile", "ort-entropy") if j not in skip]
    base = rows[0]
    calib_row = rows[1]
    print(f"MobileNetV2, {a.samples} photos, batch {a.batch}; ratios against pure FP32 inference and calib")
    if a.repeat > 1:
        print("fp32 and calib: median of %d alternated runs: fp32 %s s, calib %s s" % (a.repeat, *(
            " ".join(f"{p[i].get('seconds', float('nan')):.2f}" for p in pairs) for i in (0, 1))))
    print(f"{'job':16s} {'seconds':>9s} {'x FP32':>8s} {'x calib':>8s} {'peak RSS MB':>12s}")
    for r in rows:
        if "error" in r:
            print(f"{r['job']:16s} failed: {r['error']}")
            continue
        print(f"{r['job']:16s} {r['seconds']:9.2f} {r['seconds'] / base['seconds']:8.2f} "
              f"{r['seconds'] / calib_row['seconds']:8.2f} {r['peak_rss_mb']:12.0f}")
    if "setup_seconds" in base and "error" not in calib_row:
        e2e = base["seconds"] + base["setup_seconds"]
        print(f"FP32 counting its session creation and warm-up run as calib's time counts its own: {e2e:.2f} s; "
              f"calib = {calib_row['seconds'] / e2e:.2f}x that")
    if a.whole:
        whole_process(a.whole)
    if a.scaling:
        big = run_job("calib", a.scaling, a.batch)
        print(f"calib at {a.scaling} samples: {big['seconds']:.2f} s, peak RSS {big['peak_rss_mb']:.0f} MB "
              f"({big['peak_rss_mb'] / calib_row['peak_rss_mb']:.2f}x the RSS at {a.samples})")


if __name__ == "__main__":
    main()
