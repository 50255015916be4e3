"""Decoding YOLO outputs into detections: confidence threshold, class-wise NMS, back to original pixels."""
from __future__ import annotations

import numpy as np

from calib.evaluate.metrics import Detections
from calib.recipe import DetectionSpec


def iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    a = (box[2] - box[0]) * (box[3] - box[1])
    b = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(a + b - inter, 1e-12)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Indices kept by greedy NMS, highest score first."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        if order.size == 1:
            break
        rest = order[1:]
        order = rest[iou_one_to_many(boxes[i], boxes[rest]) <= iou]
    return np.asarray(keep, np.int64)


def split_outputs(outputs: dict, spec: DetectionSpec) -> tuple[np.ndarray, np.ndarray]:
    """(boxes [N, A, 4] xyxy in input pixels, scores [N, A, C]) from a model's outputs."""
    if spec.format == "yolov3":
        return outputs["boxes"], outputs["scores"]
    (y,) = outputs.values()  # yolov8: [N, 4 + C, A] with cx, cy, w, h
    y = y.transpose(0, 2, 1)
    cxcy, wh = y[..., :2], y[..., 2:4]
    return np.concatenate([cxcy - wh / 2, cxcy + wh / 2], -1), y[..., 4:]


def decode(boxes: np.ndarray, scores: np.ndarray, spec: DetectionSpec, conf: float | None = None,
           letterbox=None) -> Detections:
    """Detections of one image (boxes [A, 4], scores [A, C])."""
    conf = spec.conf_threshold if conf is None else conf
    cls = scores.argmax(1)
    best = scores[np.arange(scores.shape[0]), cls]
    m = best >= conf
    b, s, c = boxes[m].astype(np.float64), best[m].astype(np.float64), cls[m]
    keep_all = []
    for k in np.unique(c):
        idx = np.nonzero(c == k)[0]
        keep_all.append(idx[nms(b[idx], s[idx], spec.iou_threshold)])
    keep = np.concatenate(keep_all) if keep_all else np.zeros(0, np.int64)
    keep = keep[np.argsort(-s[keep], kind="stable")][:spec.max_detections]
    b, s, c = b[keep], s[keep], c[keep]
    if letterbox is not None and b.size:
        b = letterbox.to_original(b)
    return Detections(b.reshape(-1, 4), s, c)


def xyxy_to_xywh(b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, np.float64).reshape(-1, 4)
    return np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)
