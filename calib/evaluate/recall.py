"""Box recall: the share of reference boxes (FP32's confident boxes, or the dataset's) that a model's confident
detections find with the same class at IoU >= 0.5, each detection matching at most one box, highest score first
(as pycocotools matches). Kept per image, so that the bootstrap can resample images: recall = sum(hits) / sum(boxes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calib.deploy.plugins import iou_one_to_many

IOU = 0.5


def found(ref_boxes, ref_classes, boxes, scores, classes, iou: float = IOU) -> int:
    """How many reference boxes (xyxy) the detections (xyxy, score, class) find."""
    ref_boxes = np.asarray(ref_boxes, np.float64).reshape(-1, 4)
    ref_classes = np.asarray(ref_classes).reshape(-1)
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    taken = np.zeros(len(ref_boxes), bool)
    for i in np.argsort(-np.asarray(scores, np.float64), kind="stable"):
        cand = np.nonzero(~taken & (ref_classes == classes[i]))[0]
        if cand.size == 0:
            continue
        ious = iou_one_to_many(boxes[i], ref_boxes[cand])
        best = int(np.argmax(ious))
        if ious[best] >= iou:
            taken[cand[best]] = True
    return int(taken.sum())


@dataclass
class Recall:
    """Per image: boxes found and boxes there are, for one configuration against one reference."""

    hits: list = field(default_factory=list)
    boxes: list = field(default_factory=list)

    def add(self, ref_boxes, ref_classes, det) -> None:
        """`det`: calib.evaluate.metrics.Detections above the confidence threshold, in the reference's pixels."""
        self.hits.append(found(ref_boxes, ref_classes, det.boxes, det.scores, det.classes))
        self.boxes.append(len(np.asarray(ref_classes).reshape(-1)))

    def value(self) -> float | None:
        total = sum(self.boxes)
        return sum(self.hits) / total if total else None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.hits, np.float64), np.asarray(self.boxes, np.float64)


def figures(recalls: dict, n_images: int, groups=None) -> tuple[dict, dict]:
    """recall_vs_fp32 / recall_labels with their bootstrap intervals over images (a ratio of sums), from
    {"vs_fp32" | "vs_labels": Recall} with one entry per image."""
    from calib.evaluate import uncertainty as u

    figs, reps = {}, {}
    for ref, key in (("vs_fp32", "recall_vs_fp32"), ("vs_labels", "recall_labels")):
        r = recalls.get(ref)
        if r is None or r.value() is None or len(r.hits) != n_images:
            continue
        hits, boxes = r.arrays()
        with np.errstate(invalid="ignore", divide="ignore"):
            reps[key] = u.replicates(lambda w: (w @ hits) / (w @ boxes), n_images, groups=groups)
        gc = u.group_codes(groups)
        figs[key] = u.figure(r.value(), reps[key], n_images, boxes=int(boxes.sum()),
                             **({"groups": gc[1]} if gc else {}))
    return figs, reps
