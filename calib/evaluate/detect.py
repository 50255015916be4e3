"""Decoding YOLO outputs into detections: confidence threshold, class-wise NMS, back to original pixels."""
from __future__ import annotations

import numpy as np

from calib.deploy.plugins import iou_one_to_many
from calib.evaluate.metrics import Detections, coco_map_matches
from calib.recipe import DetectionSpec


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


class DetectionTally:
    """Detections of FP32 and of each test configuration, image by image, for mAP through pycocotools.

    FP32's confident detections are the pseudo-labels; every model's low-threshold detections are scored
    against them (and against the dataset's own boxes where samples carry them). With `score_reference`
    FP32 is scored too (1.0 against itself: a check that decoding is consistent)."""

    def __init__(self, spec: DetectionSpec, names, model_outputs, score_reference: bool = True):
        self.spec, self.model_outputs = spec, list(model_outputs)
        self.images, self.gt, self.pseudo = [], [], []
        self.dets = {n: [] for n in (["fp32"] if score_reference else []) + list(names)}
        self.matches: dict = {}  # name -> {"vs_fp32" | "vs_labels": ap.Matches}, filled by result()

    def update(self, ref: dict, tests: dict, samples, letterboxes, first_id: int) -> None:
        """One batch: `ref` and each of `tests` (name -> outputs) are a model's outputs on the same images."""
        outs = {"fp32": ref, **tests}
        split = {k: split_outputs({o: v[o] for o in self.model_outputs}, self.spec) for k, v in outs.items()
                 if k in self.dets or k == "fp32"}
        for j, (s, lb) in enumerate(zip(samples, letterboxes)):
            iid = first_id + j
            self.images.append((iid, lb.width, lb.height) if lb is not None else (iid, 1, 1))
            if s is not None and s.boxes is not None:
                self.gt += [(iid, b, c) for b, c in zip(s.boxes, s.classes)]
            strong = decode(split["fp32"][0][j], split["fp32"][1][j], self.spec, letterbox=lb)
            self.pseudo += [(iid, b, c) for b, c in zip(xyxy_to_xywh(strong.boxes), strong.classes)]
            for k in self.dets:
                bx, sc = split[k]
                d = decode(bx[j], sc[j], self.spec, conf=0.001, letterbox=lb)
                self.dets[k] += [(iid, b, float(p), int(c)) for b, p, c in
                                 zip(xyxy_to_xywh(d.boxes), d.scores, d.classes)]

    def map_vs_fp32(self, name: str) -> dict:
        return coco_map_matches(self.images, self.pseudo, self.dets[name])[0]

    def result(self) -> dict:
        res = {}
        for k, dets in self.dets.items():
            r, m = {}, {}
            r["vs_fp32"], m["vs_fp32"] = coco_map_matches(self.images, self.pseudo, dets)
            if self.gt:
                r["vs_labels"], m["vs_labels"] = coco_map_matches(self.images, self.gt, dets)
            r["detections"] = len(dets)
            res[k], self.matches[k] = r, m
        res["fp32_boxes"] = len(self.pseudo)
        return res
