"""calib's entropy thresholds held against TensorRT's own EntropyCalibration2 caches, tensor by tensor.

    python benchmarks/entropy/compare.py [--results DIR] [--stage DIR] [--extra DIR] [--goldens] [--json OUT]

--results: what capture_trt.py wrote (models/NAME/entropy2.cache and build-entropy2.json, which name the model and
data files); --stage/--extra: the folders holding those files here (matched by file name); --goldens: also the
committed goldens (tests/golden/trt86-h200/cnn, mobilenet_v2, and tests/golden/trt86-h200-entropy/* when present).
For each model: calib's calibrate() with the same samples, the same preprocessing and the same batch size, then per
tensor the relative error |calib / TensorRT - 1| over the tensors both name (TensorRT's own "(Unnamed Layer*)"
tensors left out): median, 90th percentile, max, exact (within 1e-6) and the count. MinMax too where TensorRT's
MinMax cache is there (a check that both saw the same values).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from calib.calibrate import calibrate  # noqa: E402
from calib.quantize.cache import read_cache  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def stats(ours: dict, trt: dict) -> dict:
    names = [k for k in trt if not k.startswith("(Unnamed") and k in ours and trt[k] > 0]
    if not names:
        return {"tensors": 0}
    r = np.array([ours[k] / trt[k] - 1.0 for k in names])
    a = np.abs(r)
    worst = sorted(zip(a.tolist(), names), reverse=True)[:5]
    return {"tensors": len(names), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "max": float(a.max()), "exact": int((a < 1e-6).sum()), "mean_signed": float(r.mean()),
            "missing": [k for k in trt if not k.startswith("(Unnamed") and k not in ours][:10],
            "worst": [(n, round(v, 4)) for v, n in worst]}


def calib_arrays(npz: Path, model: Path) -> dict:
    """The arrays TensorRT was fed (capture_trt.load_inputs), in the model's own dtypes for ONNX Runtime."""
    from capture_trt import load_inputs, model_inputs

    import onnx

    m = onnx.load(str(model), load_external_data=False)
    want = {i.name: i.type.tensor_type.elem_type for i in m.graph.input}
    arrays = load_inputs(npz, model_inputs(model))
    out = {}
    for k, v in arrays.items():
        if want.get(k) == onnx.TensorProto.INT64:
            v = v.astype(np.int64)
        out[k] = v
    return out


def compare_one(name: str, model: Path, arrays: dict, batch: int, caches: dict, params: dict | None = None) -> dict:
    t0 = time.time()
    res = calibrate(model, arrays if len(arrays) > 1 else next(iter(arrays.values())),
                    ["entropy", "minmax"], params=params, batch_size=batch)
    row = {"model": name, "samples": res.samples, "batch": batch, "seconds": round(time.time() - t0, 1)}
    for algo, path in caches.items():
        if path is not None and Path(path).is_file():
            row[algo] = stats(res.amax["entropy" if algo == "entropy2" else "minmax"], read_cache(path).amaxes())
    return row


def find(name: str, dirs: list[Path]) -> Path:
    for d in dirs:
        p = d / Path(name).name
        if p.is_file():
            return p
    raise SystemExit(f"{name}: not found in {', '.join(map(str, dirs))}")


def captured(results: Path, dirs: list[Path], params) -> list[dict]:
    rows = []
    for mdir in sorted((results / "models").glob("*")):
        build = mdir / "build-entropy2.json"
        if not build.is_file():
            continue
        info = json.loads(build.read_text())
        model, data = find(info["model_file"], dirs), find(info["data_file"], dirs)
        arrays = calib_arrays(data, model)
        caches = {"entropy2": mdir / "entropy2.cache", "minmax": mdir / "minmax.cache"}
        rows.append(compare_one(mdir.name, model, arrays, int(info["batch"]), caches, params))
    return rows


def goldens(params) -> list[dict]:
    rows = []
    g = GOLDEN / "trt86-h200"
    rows.append(compare_one("cnn (golden)", g / "cnn" / "cnn.onnx", {"input": np.load(g / "cnn" / "cnn_calib.npy")}, 8,
                            {"entropy2": g / "cnn" / "int8-entropy2.cache", "minmax": g / "cnn" / "int8-minmax.cache"},
                            params))
    photos = Path.home() / ".cache" / "calib" / "golden" / "photos_224.npy"
    if photos.is_file():
        u8 = np.load(photos)
        mean, std = np.float32([0.485, 0.456, 0.406]), np.float32([0.229, 0.224, 0.225])
        x = ((u8.astype(np.float32) / np.float32(255.0) - mean) / std).transpose(0, 3, 1, 2)
        rows.append(compare_one("mobilenet_v2 (golden)", g / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx",
                                {"input": np.ascontiguousarray(x)}, 32,
                                {"entropy2": g / "mobilenet_v2" / "entropy2.cache",
                                 "minmax": g / "mobilenet_v2" / "minmax.cache"}, params))
    new = GOLDEN / "trt86-h200-entropy"
    for mdir in sorted(new.glob("*")) if new.is_dir() else []:
        meta = mdir / "golden.json"
        if not meta.is_file():
            continue
        info = json.loads(meta.read_text())
        model = mdir / info["model"] if (mdir / info["model"]).is_file() else None
        data = mdir / info["data"] if (mdir / info["data"]).is_file() else None
        if model is None or data is None:
            continue
        rows.append(compare_one(f"{mdir.name} (golden)", model, calib_arrays(data, model), int(info["batch"]),
                                {"entropy2": mdir / "entropy2.cache", "minmax": mdir / "minmax.cache"}, params))
    return rows


def table(rows: list[dict]) -> str:
    out = ["| model | tensors | entropy median | p90 | max | exact | minmax max err |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        e, m = r.get("entropy2", {}), r.get("minmax", {})
        if not e.get("tensors"):
            continue
        mm = f"{m['max']:.1e}" if m.get("tensors") else "-"
        out.append(f"| {r['model']} | {e['tensors']} | {100 * e['median']:.2f} % | {100 * e['p90']:.2f} % | "
                   f"{100 * e['max']:.1f} % | {e['exact']} | {mm} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path)
    ap.add_argument("--stage", type=Path, action="append", default=[])
    ap.add_argument("--extra", type=Path, action="append", default=[])
    ap.add_argument("--goldens", action="store_true")
    ap.add_argument("--param", action="append", default=[], help="entropy.KEY=VALUE")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    params: dict = {}
    for p in a.param:
        k, _, v = p.partition("=")
        algo, _, key = k.partition(".")
        params.setdefault(algo, {})[key] = json.loads(v) if v[:1] in "0123456789-[{tfn" else v
    rows = []
    if a.goldens:
        rows += goldens(params or None)
    if a.results:
        rows += captured(a.results, a.stage + a.extra, params or None)
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
