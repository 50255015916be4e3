"""Capture TensorRT's own calibration caches (EntropyCalibration2, and MinMax for the ranges) for real models
and for the probe networks of probes.py. Runs on the GPU machine (TensorRT 8.6, cuda-python), through calib's
builder and calib's calibrator classes fed with the given data; the cache TensorRT writes is the result.

    python3.10 benchmarks/entropy/capture_trt.py OUT_DIR [--opt-level 0] [--deadline SECONDS]
        [--model NAME=MODEL.onnx --data NAME=DATA.npz [--batch NAME=8]]... [--probes dist,dist_b4,dist_n1,topo]
        [--minmax-models]

DATA.npz holds one array per model input, keyed by input name ([samples, ...]). uint8 image arrays with
`__scale__`/`__mean__`/`__std__` keys are fed as (u8 * scale - mean) / std in NCHW (calib's Preprocessor's
arithmetic); any other array is fed as it is (int64 as int32, which TensorRT 8.6's inputs take). Every sample is
fed once, in file order, in batches of --batch (a short last batch padded by calib's Rebatcher, recorded).

Writes, as it goes: OUT_DIR/models/NAME/{entropy2,minmax}.cache (+ calib's .json sidecar with the data's
sha256), OUT_DIR/models/NAME/build-*.json (engine layers, times, get_batch calls), OUT_DIR/probes/NET.onnx,
NET.npz (the arrays fed), NET-{entropy2,minmax}.cache, and OUT_DIR/summary.json.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probes  # noqa: E402

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")  # no cuBLAS/cuDNN on the carried TensorRT
log = logging.getLogger("capture")


def pairs(items, what) -> dict:
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep or not k or not v:
            raise SystemExit(f"--{what} '{it}': expected NAME=VALUE")
        out[k] = v
    return out


def model_inputs(model: Path) -> list[str]:
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def load_inputs(npz_path: Path, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays fed to the model, one per input name, after the npz's own preprocessing keys."""
    z = np.load(npz_path)
    keys = [k for k in z.files if not k.startswith("__")]
    if names is not None:
        missing = [n for n in names if n not in keys]
        if missing:
            raise SystemExit(f"{npz_path}: no array for model input '{missing[0]}' (has {keys})")
        keys = list(names)
    if not keys:
        raise SystemExit(f"{npz_path}: no input arrays")
    out = {}
    for k in keys:
        a = z[k]
        if a.dtype == np.uint8 and "__scale__" in z.files and a.ndim == 4:
            mean = np.asarray(z["__mean__"], np.float32).reshape(-1)
            std = np.asarray(z["__std__"], np.float32).reshape(-1)
            x = a.astype(np.float32) * np.float32(z["__scale__"])
            a = ((x - mean) / std).astype(np.float32).transpose(0, 3, 1, 2)
        elif a.dtype == np.int64:
            a = a.astype(np.int32)
        elif a.dtype == np.float64:
            a = a.astype(np.float32)
        out[k] = np.ascontiguousarray(a)
    n = {v.shape[0] for v in out.values()}
    if len(n) != 1:
        raise SystemExit(f"{npz_path}: inputs disagree on the sample count {sorted(n)}")
    return out


class Batches:
    """A calib Source: dict batches of `batch` samples in array order."""

    def __init__(self, arrays: dict, batch: int):
        self.arrays, self.batch = arrays, batch

    def __iter__(self):
        n = next(iter(self.arrays.values())).shape[0]
        for i in range(0, n, self.batch):
            yield {k: v[i:i + self.batch] for k, v in self.arrays.items()}


def trt_input_dtypes(model: Path) -> dict:
    """The dtype TensorRT's network gives each input (INT64 ONNX inputs become INT32 in 8.6); {} if unknown."""
    try:
        import tensorrt as trt
        from calib.runners.tensorrt import builder

        b = trt.Builder(builder.trt_logger(trt))
        net, parser = builder._parse(trt, b, model, False)
        out = {net.get_input(i).name: np.dtype(trt.nptype(net.get_input(i).dtype)) for i in range(net.num_inputs)}
        del parser, net, b  # children before the builder
        return out
    except Exception as exc:  # the stand-in has no nptype: keep the arrays' own types
        log.info("input dtypes from the arrays (%s)", exc)
        return {}


def calibrate(model: Path, arrays: dict, batch: int, kind: str, cache: Path, opt_level: int, cuda) -> dict:
    """One INT8 build with TensorRT's `kind` calibrator fed `arrays`; the cache lands at `cache`."""
    from calib.io.files import sha256_file
    from calib.runners.tensorrt import builder
    from calib.runners.tensorrt.calibrators import make_calibrator

    want = trt_input_dtypes(model)
    arrays = {k: (v.astype(want[k]) if k in want and v.dtype != want[k] else v) for k, v in arrays.items()}
    inputs = {k: (tuple(v.shape[1:]), v.dtype) for k, v in arrays.items()}
    shapes = tuple((k, (batch, *s)) for k, (s, _) in inputs.items())
    cal = make_calibrator(kind, Batches(arrays, batch), inputs, batch, cuda, cache, sha256_file(model))
    cls = type(cal)

    class Counting(cls):  # every get_batch call, the None that ends the data included
        def get_batch(self, names):
            self.asked = getattr(self, "asked", []) + [list(names)]
            return cls.get_batch(self, names)

        def write_calibration_cache(self, blob):  # TensorRT's bytes first, whatever calib's reader says of them
            cache.with_name(cache.stem + ".raw" + cache.suffix).write_bytes(bytes(blob))
            return cls.write_calibration_cache(self, blob)

    cal = Counting()
    spec = builder.BuildSpec(precisions=("fp32", "int8"), optimization_level=opt_level, batch_size=batch,
                             shapes=shapes, tactic_sources=TACTICS)
    cache.unlink(missing_ok=True)
    t0 = time.time()
    built = builder.build(model, spec, cal)
    info = {k: v for k, v in built.info.items() if k != "layers"}
    asked = getattr(cal, "asked", [])
    info.update(kind=kind, seconds=round(time.time() - t0, 2), get_batch_calls=cal.calls,
                get_batch_asked=len(asked), names_asked=asked[0] if asked else None,
                samples=cal.rebatcher.samples, padded=cal.rebatcher.padded, batch=batch,
                data_sha256=probes.digest(arrays), cache_written=cache.is_file(),
                int8_layers=[ly.get("name") for ly in built.layers if "int8" in str(ly.get("precision", "")).lower()],
                layers=built.layers)
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--opt-level", type=int, default=0)
    ap.add_argument("--deadline", type=float, default=480.0, help="seconds; later jobs are skipped")
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--data", action="append", default=[])
    ap.add_argument("--batch", action="append", default=[], help="NAME=N (default 8)")
    ap.add_argument("--discover", action="append", default=[],
                    help="a folder: every X.onnx with an X*.npz beside it is one more model (batch 8 unless --batch)")
    ap.add_argument("--probes", default="dist,topo,dist_b4,dist_n1,edge", help="probe networks ('' for none)")
    ap.add_argument("--minmax-models", action="store_true", help="also a MinMax cache per model (last)")
    a = ap.parse_args()
    t_start = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        handlers=[logging.StreamHandler(sys.stdout), logging.FileHandler(a.out / "capture.log")])
    models, datas, batches = pairs(a.model, "model"), pairs(a.data, "data"), pairs(a.batch, "batch")
    for folder in a.discover:
        for onnx_file in sorted(Path(folder).glob("*.onnx")):
            npz = sorted(Path(folder).glob(onnx_file.stem + "*.npz"))
            if npz and onnx_file.stem not in models and not onnx_file.stem.endswith(".qdq"):
                models[onnx_file.stem], datas[onnx_file.stem] = str(onnx_file), str(npz[0])
                print(f"discovered {onnx_file.stem}: {onnx_file} + {npz[0]}")
    missing = sorted(set(models) ^ set(datas))
    if missing:
        raise SystemExit(f"'{missing[0]}' needs both --model and --data")
    import tensorrt as trt
    from calib.runners.tensorrt.device import Cuda

    cuda = Cuda()
    summary = {"tensorrt": trt.__version__, "gpu": cuda.name(), "opt_level": a.opt_level, "jobs": []}

    def save():
        (a.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")

    def job(name, fn):
        left = a.deadline - (time.time() - t_start)
        if left < 20:
            summary["jobs"].append({"job": name, "skipped": f"{left:.0f} s left of the deadline"})
            log.warning("skipping %s: deadline", name)
            save()
            return
        t0 = time.time()
        try:
            res = fn()
            summary["jobs"].append({"job": name, "ok": True, "seconds": round(time.time() - t0, 1), **(res or {})})
        except BaseException as exc:  # keep going: one failed job must not lose the others
            summary["jobs"].append({"job": name, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                                    "trace": traceback.format_exc()[-3000:]})
            log.error("%s failed: %s", name, exc)
            if isinstance(exc, KeyboardInterrupt):
                raise
        save()

    if a.probes:
        import onnx

        pdir = a.out / "probes"
        pdir.mkdir(exist_ok=True)
        for net in a.probes.split(","):
            def run_probe(net=net):
                model, data = probes.make(net)
                onnx.save(model, str(pdir / f"{net}.onnx"))
                if net in ("dist", "topo", "edge"):  # dist_b4 and dist_n1 are dist's values regrouped / cut
                    np.savez_compressed(pdir / f"{net}.npz", **data)
                arrays = {k: v.reshape(-1, *v.shape[2:]) for k, v in data.items()}
                batch = next(iter(data.values())).shape[1]
                res = {}
                for kind in ("entropy2", "minmax"):
                    info = calibrate(pdir / f"{net}.onnx", arrays, batch, kind, pdir / f"{net}-{kind}.cache",
                                     a.opt_level, cuda)
                    (pdir / f"{net}-{kind}-build.json").write_text(json.dumps(info, indent=1, default=str))
                    res[kind] = {k: info[k] for k in ("seconds", "get_batch_calls", "get_batch_asked", "samples",
                                                      "data_sha256")}
                return res
            job(f"probe {net}", run_probe)

    kinds = [("entropy2", n) for n in models] + ([("minmax", n) for n in models] if a.minmax_models else [])
    for kind, name in kinds:
        def run_model(kind=kind, name=name):
            mdir = a.out / "models" / name
            mdir.mkdir(parents=True, exist_ok=True)
            arrays = load_inputs(Path(datas[name]), model_inputs(Path(models[name])))
            batch = int(batches.get(name, 8))
            info = calibrate(Path(models[name]), arrays, batch, kind, mdir / f"{kind}.cache", a.opt_level, cuda)
            info["model_file"] = models[name]
            info["data_file"] = datas[name]
            (mdir / f"build-{kind}.json").write_text(json.dumps(info, indent=1, default=str))
            return {k: info[k] for k in ("seconds", "get_batch_calls", "get_batch_asked", "samples", "padded", "batch",
                                         "data_sha256",
                                         "cache_written")} | {"int8_layers": len(info["int8_layers"])}
        job(f"{kind} {name}", run_model)
    summary["seconds"] = round(time.time() - t_start, 1)
    save()
    bad = [j["job"] for j in summary["jobs"] if j.get("ok") is False]
    log.info("done in %.0f s; failed: %s", summary["seconds"], bad or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
