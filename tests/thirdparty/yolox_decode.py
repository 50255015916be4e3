"""The task metric of the YOLOX-style detector `ddddocr-det`, computed without calib.

The preprocessing and decoding are ddddocr 1.4.11's own (`DdddOcr.preproc`, `demo_postprocess`, `nms`,
`multiclass_nms_class_agnostic` and `get_bbox` in ddddocr/__init__.py, MIT licence, copyright the ddddocr authors;
`demo_postprocess` and the NMS there come from YOLOX's demo utilities, Apache-2.0, copyright Megvii Inc.), rewritten
as functions of numpy arrays so that a test can decode FP32 and INT8 outputs of the same model the same way and
compare the boxes: `box_recall` (share of FP32's boxes that INT8 finds again) and `average_precision` (INT8's boxes
ranked by score against FP32's boxes as ground truth, COCO-style 101-point AP at one IoU).

Nothing here imports calib: it is the independent side of a comparison with calib's report. Only the letterbox
resize needs OpenCV (as the package does); everything else is numpy.
"""
from __future__ import annotations

import numpy as np

INPUT_SIZE = (416, 416)  # (height, width) of ddddocr's common_det.onnx
STRIDES = (8, 16, 32)
SCORE_THR = 0.1  # get_bbox's multiclass_nms(score_thr=0.1)
NMS_THR = 0.45  # get_bbox's multiclass_nms(nms_thr=0.45)
PAD_VALUE = 114


def preprocess(img_bgr: np.ndarray, input_size: tuple[int, int] = INPUT_SIZE) -> tuple[np.ndarray, float]:
    """ddddocr's `preproc`: a BGR uint8 image (as cv2.imdecode gives it) resized by one ratio to fit `input_size`,
    placed at the top-left corner of a 114-grey canvas, HWC -> CHW, float32 with values 0-255 (no scaling, no
    mean/std). Returns the [3, H, W] array and the ratio (model pixels per image pixel)."""
    import cv2

    padded = np.ones((input_size[0], input_size[1], 3), dtype=np.uint8) * PAD_VALUE
    r = min(input_size[0] / img_bgr.shape[0], input_size[1] / img_bgr.shape[1])
    resized = cv2.resize(img_bgr, (int(img_bgr.shape[1] * r), int(img_bgr.shape[0] * r)),
                         interpolation=cv2.INTER_LINEAR).astype(np.uint8)
    padded[: int(img_bgr.shape[0] * r), : int(img_bgr.shape[1] * r)] = resized
    return np.ascontiguousarray(padded.transpose(2, 0, 1), dtype=np.float32), r


def grid_decode(output: np.ndarray, input_size: tuple[int, int] = INPUT_SIZE,
                strides: tuple[int, ...] = STRIDES) -> np.ndarray:
    """YOLOX's `demo_postprocess` on a raw head output [..., A, 5 + C] (A = sum of (H/s) * (W/s) over the strides):
    centre xy = (xy + cell) * stride, wh = exp(wh) * stride, in model pixels. Returns a decoded copy."""
    out = np.array(output, dtype=np.float32, copy=True)
    grids, expanded = [], []
    for stride in strides:
        h, w = input_size[0] // stride, input_size[1] // stride
        xv, yv = np.meshgrid(np.arange(w), np.arange(h))
        grid = np.stack((xv, yv), 2).reshape(1, -1, 2)
        grids.append(grid)
        expanded.append(np.full((*grid.shape[:2], 1), stride))
    grids = np.concatenate(grids, 1)
    expanded = np.concatenate(expanded, 1)
    if out.shape[-2] != grids.shape[1]:
        raise ValueError(f"head has {out.shape[-2]} anchors, strides {strides} on {input_size} give {grids.shape[1]}")
    out[..., :2] = (out[..., :2] + grids) * expanded
    out[..., 2:4] = np.exp(out[..., 2:4]) * expanded
    return out


def nms(boxes: np.ndarray, scores: np.ndarray, nms_thr: float) -> list[int]:
    """YOLOX's single-class NMS (areas and overlaps with the +1 pixel convention, as the package has it)."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = scores.argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(int(i))
        xx1 = np.maximum(x1[i], x1[order[1:]])
        yy1 = np.maximum(y1[i], y1[order[1:]])
        xx2 = np.minimum(x2[i], x2[order[1:]])
        yy2 = np.minimum(y2[i], y2[order[1:]])
        w = np.maximum(0.0, xx2 - xx1 + 1)
        h = np.maximum(0.0, yy2 - yy1 + 1)
        inter = w * h
        ovr = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[np.where(ovr <= nms_thr)[0] + 1]
    return keep


def detections(output: np.ndarray, ratio: float, score_thr: float = SCORE_THR, nms_thr: float = NMS_THR,
               input_size: tuple[int, int] = INPUT_SIZE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's raw output [1, A, 5 + C] (or [A, 5 + C]) -> boxes xyxy in image pixels (float, unclipped),
    scores (objectness * class score) and classes, after the package's class-agnostic NMS; best first."""
    pred = grid_decode(output, input_size)
    pred = pred.reshape(-1, pred.shape[-1])
    boxes = pred[:, :4]
    scores = pred[:, 4:5] * pred[:, 5:]
    xyxy = np.empty_like(boxes)
    xyxy[:, 0] = boxes[:, 0] - boxes[:, 2] / 2.0
    xyxy[:, 1] = boxes[:, 1] - boxes[:, 3] / 2.0
    xyxy[:, 2] = boxes[:, 0] + boxes[:, 2] / 2.0
    xyxy[:, 3] = boxes[:, 1] + boxes[:, 3] / 2.0
    xyxy /= ratio
    cls = scores.argmax(1)
    cls_scores = scores[np.arange(len(cls)), cls]
    mask = cls_scores > score_thr
    if not mask.any():
        return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
    keep = nms(xyxy[mask], cls_scores[mask], nms_thr)
    return xyxy[mask][keep], cls_scores[mask][keep], cls[mask][keep]


def package_boxes(output: np.ndarray, ratio: float, image_hw: tuple[int, int]) -> list[list[int]]:
    """What ddddocr's `get_bbox` returns for this output: [x_min, y_min, x_max, y_max] ints, clipped to the image."""
    boxes, _, _ = detections(output, ratio)
    h, w = image_hw
    out = []
    for b in boxes.tolist():
        out.append([0 if b[0] < 0 else int(b[0]), 0 if b[1] < 0 else int(b[1]),
                    int(w) if b[2] > w else int(b[2]), int(h) if b[3] > h else int(b[3])])
    return out


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [N, 4] with every box of `b` [M, 4] (xyxy, continuous coordinates)."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(-1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _greedy_matches(ref: np.ndarray, cand: np.ndarray, cand_scores: np.ndarray, iou: float) -> np.ndarray:
    """For each candidate (best score first): True when it matches a not yet matched reference box at >= iou."""
    order = np.argsort(-np.asarray(cand_scores), kind="stable")
    ious = iou_matrix(cand, ref)
    taken = np.zeros(len(ref), bool)
    tp = np.zeros(len(cand), bool)
    for k in order:
        if not len(ref):
            break
        row = np.where(taken, -1.0, ious[k])
        j = int(row.argmax())
        if row[j] >= iou:
            taken[j] = True
            tp[k] = True
    return tp


def box_recall(ref_boxes: list[np.ndarray], boxes: list[np.ndarray], scores: list[np.ndarray],
               iou: float = 0.5) -> tuple[float, int]:
    """Over images: the share of reference (FP32) boxes that a candidate (INT8) box matches one to one at IoU >= iou,
    and the number of reference boxes. NaN when there are none."""
    found = total = 0
    for ref, cand, sc in zip(ref_boxes, boxes, scores):
        total += len(ref)
        found += int(_greedy_matches(np.asarray(ref), np.asarray(cand), np.asarray(sc), iou).sum())
    return (found / total if total else float("nan")), total


def average_precision(ref_boxes: list[np.ndarray], boxes: list[np.ndarray], scores: list[np.ndarray],
                      iou: float = 0.5) -> float:
    """Single-class AP of the candidate boxes against the reference boxes as ground truth, pooled over images:
    greedy matching per image by score, then the 101-point interpolated precision-recall area (COCO style)."""
    tps, confs, total = [], [], 0
    for ref, cand, sc in zip(ref_boxes, boxes, scores):
        total += len(ref)
        tps.append(_greedy_matches(np.asarray(ref), np.asarray(cand), np.asarray(sc), iou))
        confs.append(np.asarray(sc, np.float64).reshape(-1))
    if total == 0:
        return float("nan")
    tp = np.concatenate(tps) if tps else np.zeros(0, bool)
    conf = np.concatenate(confs) if confs else np.zeros(0)
    order = np.argsort(-conf, kind="stable")
    tp = tp[order]
    ctp = np.cumsum(tp)
    cfp = np.cumsum(~tp)
    recall = ctp / total
    precision = ctp / np.maximum(ctp + cfp, 1)
    # precision envelope, then sampled at recall 0, 0.01, ..., 1
    envelope = np.maximum.accumulate(precision[::-1])[::-1] if len(precision) else precision
    points = np.linspace(0, 1, 101)
    idx = np.searchsorted(recall, points, side="left")
    sampled = np.array([envelope[i] if i < len(envelope) else 0.0 for i in idx])
    return float(sampled.mean())
