"""Decoding YOLO outputs into detections: confidence threshold, class-wise NMS, back to original pixels."""
from __future__ import annotations

import numpy as np

from calib.deploy.plugins import iou_one_to_many
from calib.evaluate import heads
from calib.evaluate.metrics import Detections, coco_map_matches
from calib.evaluate.recall import Recall
from calib.recipe import DetectionSpec


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, limit: int | None = None) -> np.ndarray:
    """Indices kept by greedy NMS, highest score first; with `limit`, the first `limit` of them (greedy NMS keeps
    boxes in score order, so they are the same: a detection limit need not suppress the rest)."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size and (limit is None or len(keep) < limit):
        i = order[0]
        keep.append(i)
        if order.size == 1:
            break
        rest = order[1:]
        order = rest[iou_one_to_many(boxes[i], boxes[rest]) <= iou]
    return np.asarray(keep, np.int64)


def split_outputs(outputs: dict, spec: DetectionSpec) -> tuple[np.ndarray, np.ndarray]:
    """(boxes [N, A, 4] xyxy in input pixels, scores [N, A, C]) from a model's outputs (calib.evaluate.heads)."""
    return heads.resolve(spec.format, outputs).split(outputs)


def decode(boxes: np.ndarray, scores: np.ndarray, spec: DetectionSpec, conf: float | None = None,
           letterbox=None) -> Detections:
    """Detections of one image (boxes [A, 4], scores [A, C])."""
    cls = scores.argmax(1)
    return select(boxes, scores[np.arange(scores.shape[0]), cls], cls, spec, conf, letterbox)


def select(boxes: np.ndarray, best: np.ndarray, cls: np.ndarray, spec: DetectionSpec, conf: float | None = None,
           letterbox=None) -> Detections:
    """Detections of one image from candidates (boxes [A, 4], score [A], class [A]): confidence threshold,
    class-wise NMS, the detection limit, back to original pixels."""
    conf = spec.conf_threshold if conf is None else conf
    m = best >= conf
    b, s, c = boxes[m].astype(np.float64), best[m].astype(np.float64), cls[m]
    keep_all = []
    for k in np.unique(c):
        idx = np.nonzero(c == k)[0]
        keep_all.append(idx[nms(b[idx], s[idx], spec.iou_threshold, spec.max_detections)])
    keep = np.concatenate(keep_all) if keep_all else np.zeros(0, np.int64)
    keep = keep[np.argsort(-s[keep], kind="stable")][:spec.max_detections]
    b, s, c = b[keep], s[keep], c[keep]
    if letterbox is not None and b.size:
        b = letterbox.to_original(b)
    return Detections(b.reshape(-1, 4), s, c)


def xywh_to_xyxy(b) -> np.ndarray:
    b = np.asarray(b, np.float64).reshape(-1, 4)
    return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], 1)


def xyxy_to_xywh(b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, np.float64).reshape(-1, 4)
    return np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)


class DetectionTally:
    """Detections of FP32 and of each test configuration, image by image, for mAP through pycocotools and box
    recall (calib.evaluate.recall).

    FP32's confident detections are the pseudo-labels; every model's low-threshold detections are scored
    against them (and against the dataset's own boxes where samples carry them). With `score_reference`
    FP32 is scored too (1.0 against itself: a check that decoding is consistent). `decoder` turns a batch of
    outputs into candidates per image (a calib.evaluate.heads.Head or a postprocess hook); by default the head
    `spec.format` names, resolved on the first batch of FP32 outputs (`auto`: the one that fits)."""

    def __init__(self, spec: DetectionSpec, names, model_outputs, score_reference: bool = True, decoder=None):
        self.spec, self.model_outputs, self.decoder = spec, list(model_outputs), decoder
        self.images, self.gt, self.pseudo = [], [], []
        self.dets = {n: [] for n in (["fp32"] if score_reference else []) + list(names)}
        self.recall = {n: {"vs_fp32": Recall(), "vs_labels": Recall()} for n in self.dets}
        self.matches: dict = {}  # name -> {"vs_fp32" | "vs_labels": ap.Matches}, filled by result()

    def update(self, ref: dict, tests: dict, samples, letterboxes, first_id: int, input_hw=None) -> None:
        """One batch: `ref` and each of `tests` (name -> outputs) are a model's outputs on the same images;
        `input_hw` the model input's height and width (for a head decoded on its grid)."""
        outs = {k: {o: v[o] for o in self.model_outputs} for k, v in {"fp32": ref, **tests}.items()
                if k in self.dets or k == "fp32"}
        if self.decoder is None:
            self.decoder = heads.resolve(self.spec.format, outs["fp32"], input_hw, "evaluation.detection.format")
        cand = {k: self.decoder.candidates(v) for k, v in outs.items()}
        for j, (s, lb) in enumerate(zip(samples, letterboxes)):
            iid = first_id + j
            self.images.append((iid, lb.width, lb.height) if lb is not None else (iid, 1, 1))
            labels = s is not None and s.boxes is not None
            if labels:
                self.gt += [(iid, b, c) for b, c in zip(s.boxes, s.classes)]
            strong = select(*cand["fp32"][j], self.spec, letterbox=lb)
            self.pseudo += [(iid, b, c) for b, c in zip(xyxy_to_xywh(strong.boxes), strong.classes)]
            for k in self.dets:
                d = select(*cand[k][j], self.spec, conf=0.001, letterbox=lb)
                self.dets[k] += [(iid, b, float(p), int(c)) for b, p, c in
                                 zip(xyxy_to_xywh(d.boxes), d.scores, d.classes)]
                sure = d.scores >= self.spec.conf_threshold
                confident = Detections(d.boxes[sure], d.scores[sure], d.classes[sure])
                self.recall[k]["vs_fp32"].add(strong.boxes, strong.classes, confident)
                gt_boxes, gt_classes = (xywh_to_xyxy(s.boxes), s.classes) if labels else (np.zeros((0, 4)), [])
                self.recall[k]["vs_labels"].add(gt_boxes, gt_classes, confident)  # every image: the bootstrap's

    def describe(self) -> str | None:
        return self.decoder.describe() if self.decoder is not None else None

    def map_vs_fp32(self, name: str) -> dict:
        return coco_map_matches(self.images, self.pseudo, self.dets[name])[0]

    def result(self) -> dict:
        res = {}
        for k, dets in self.dets.items():
            r, m = {}, {}
            r["vs_fp32"], m["vs_fp32"] = coco_map_matches(self.images, self.pseudo, dets)
            if self.gt:
                r["vs_labels"], m["vs_labels"] = coco_map_matches(self.images, self.gt, dets)
            for ref in r:
                r[ref]["recall"] = self.recall[k][ref].value()
            r["detections"] = len(dets)
            res[k], self.matches[k] = r, m
        res["fp32_boxes"] = len(self.pseudo)
        return res
