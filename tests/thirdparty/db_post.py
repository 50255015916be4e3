"""A `--postprocess` hook for the DB text detector `ppocr-det` (rapidocr-onnxruntime 1.4.4's
ch_PP-OCRv4_det_infer.onnx): its probability map [N, 1, H, W] -> text boxes, per image.

The decoding follows the package's `DBPostProcess` (rapidocr_onnxruntime/ch_ppocr_det/utils.py, Apache-2.0,
copyright RapidAI; from PaddleOCR) with its config.yaml values: bitmap = map > 0.3, dilated by a 2x2 kernel;
each contour's min-area rectangle (dropped under 3 pixels a side); score = mean probability inside it ("fast"
mode); unclipped by area x 1.6 / perimeter on every side (dropped under 5 pixels a side). Two differences, as
calib takes axis-aligned boxes and thresholds itself: each rotated rectangle becomes the axis-aligned box around
it, and every contour is returned with its score (the package drops those under box_thresh 0.5; calib applies its
confidence threshold). Boxes are in input pixels. Needs OpenCV, as the package does.
"""
from __future__ import annotations

import numpy as np

THRESH = 0.3
MIN_SIZE = 3
UNCLIP_RATIO = 1.6
MAX_CANDIDATES = 1000


def _score_fast(prob: np.ndarray, points: np.ndarray) -> float:
    """The package's box_score_fast: mean probability inside the polygon, over its bounding rectangle."""
    import cv2

    h, w = prob.shape
    xmin, xmax = (int(np.clip(f(points[:, 0]), 0, w - 1)) for f in (lambda v: np.floor(v.min()),
                                                                     lambda v: np.ceil(v.max())))
    ymin, ymax = (int(np.clip(f(points[:, 1]), 0, h - 1)) for f in (lambda v: np.floor(v.min()),
                                                                     lambda v: np.ceil(v.max())))
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), np.uint8)
    cv2.fillPoly(mask, (points - [xmin, ymin]).reshape(1, -1, 2).astype(np.int32), 1)
    return float(cv2.mean(prob[ymin:ymax + 1, xmin:xmax + 1], mask)[0])


def boxes(prob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One probability map [H, W] -> (boxes [K, 4] xyxy in input pixels, scores [K])."""
    import cv2

    bitmap = cv2.dilate((prob > THRESH).astype(np.uint8), np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    out, scores = [], []
    for contour in contours[:MAX_CANDIDATES]:
        (cx, cy), (w, h), angle = cv2.minAreaRect(contour)
        if min(w, h) < MIN_SIZE:
            continue
        score = _score_fast(prob, cv2.boxPoints(((cx, cy), (w, h), angle)))
        d = w * h * UNCLIP_RATIO / (2 * (w + h))  # pyclipper's offset of a rectangle by area x ratio / perimeter
        if min(w, h) + 2 * d < MIN_SIZE + 2:
            continue
        corners = cv2.boxPoints(((cx, cy), (w + 2 * d, h + 2 * d), angle))
        x0, y0 = np.clip(corners.min(0), 0, [prob.shape[1], prob.shape[0]])
        x1, y1 = np.clip(corners.max(0), 0, [prob.shape[1], prob.shape[0]])
        out.append([x0, y0, x1, y1])
        scores.append(score)
    return np.asarray(out, np.float32).reshape(-1, 4), np.asarray(scores, np.float32)


def decode(outputs: dict) -> list:
    """One batch of the model's outputs ({'sigmoid_0.tmp_0': [N, 1, H, W]}) -> per image (boxes, scores, classes)."""
    (prob,) = outputs.values()
    result = []
    for p in np.asarray(prob)[:, 0]:
        b, s = boxes(p)
        result.append((b, s, np.zeros(len(s), np.int64)))
    return result
