"""Task metrics: tensor similarity, top-k accuracy and agreement, detection mAP through pycocotools."""
from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TensorStats:
    """Streaming comparison of a reference tensor with a test tensor (sums over all batches)."""

    signal: float = 0.0  # sum ref^2
    noise: float = 0.0  # sum (ref - test)^2
    dot: float = 0.0
    test_sq: float = 0.0
    maxabs: float = 0.0
    count: int = 0
    rows: list = field(default_factory=list)  # per_row: arrays [samples, 4]: sum r^2, sum (r-t)^2, sum r*t, sum t^2

    def update(self, ref: np.ndarray, test: np.ndarray, per_row: bool = False) -> None:
        """Fold a pair of tensors in; with `per_row`, axis 0 is the samples and each one's sums are kept too
        (for intervals over samples), at no extra pass over the values."""
        from calib.stats.kernels import compare_sums

        r, t = _flat(ref), _flat(test)
        if r.size != t.size:
            raise ValueError(f"cannot compare {r.size} values with {t.size}")
        n = np.shape(ref)[0] if per_row and np.ndim(ref) >= 1 and np.shape(ref)[0] > 0 else 1
        sums = np.empty((n, 4), np.float64)
        for i, (part_r, part_t) in enumerate(zip(np.split(r, n), np.split(t, n))):
            rr, dd, rt, tt, m = compare_sums(part_r, part_t, 2 if part_r.size > (1 << 16) else 1)
            self.signal += rr
            self.noise += dd
            self.dot += rt
            self.test_sq += tt
            self.maxabs = max(self.maxabs, m) if m == m else math.nan
            sums[i] = (rr, dd, rt, tt)
        if per_row:  # 32 bytes a sample, in one array per batch (not a Python tuple per sample)
            self.rows.append(sums)
        self.count += r.size

    def row_sums(self) -> np.ndarray:
        return np.concatenate(self.rows) if self.rows else np.zeros((0, 4), np.float64)

    def result(self) -> dict:
        return {"cosine": cosine(self.dot, self.signal, self.test_sq), "sqnr_db": sqnr_db(self.signal, self.noise),
                "rel_l2": math.sqrt(self.noise / self.signal) if self.signal > 0 else (0.0 if self.noise == 0 else
                                                                                       math.inf),
                "max_abs": self.maxabs}


@dataclass
class OutputRows:
    """Per-sample sums of one output (row i of the batch axis is sample i), for intervals over samples."""

    parts: list = field(default_factory=list)  # [rows, 4]: sum ref^2, sum (ref - test)^2, sum ref*test, sum test^2

    def update(self, ref: np.ndarray, test: np.ndarray) -> None:
        """One pass of the comparison kernel over each row, in the tensors' own type (float64 copies of a batch's
        output and of its difference would hold 6x the pair's bytes at once)."""
        from calib.stats.kernels import compare_sums

        r, t = _flat(ref), _flat(test)
        n = ref.shape[0] if np.ndim(ref) else 1
        sums = np.empty((n, 4), np.float64)
        for i, (part_r, part_t) in enumerate(zip(np.split(r, n), np.split(t, n)) if n else ()):
            sums[i] = compare_sums(part_r, part_t, 2 if part_r.size > (1 << 16) else 1)[:4]
        self.parts.append(sums)

    def sums(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros((0, 4))


def _flat(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)
    return np.ascontiguousarray(x).reshape(-1)


def sqnr_db(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine(dot: float, a2: float, b2: float) -> float:
    if a2 == 0 or b2 == 0:
        return 1.0 if a2 == b2 else 0.0
    return dot / math.sqrt(a2 * b2)


@dataclass
class Classification:
    """Top-1/top-5 against labels (where known) and agreement of the test model with the reference."""

    n: int = 0
    agree1: int = 0
    agree5: int = 0
    labelled: int = 0
    ref_top1: int = 0
    ref_top5: int = 0
    test_top1: int = 0
    test_top5: int = 0
    per_sample: dict = field(default_factory=dict)  # name -> [0/1 arrays per batch], for the bootstrap

    def _keep(self, name: str, values: np.ndarray) -> None:
        self.per_sample.setdefault(name, []).append(np.asarray(values, bool))

    def samples(self, name: str) -> np.ndarray:
        """Per-sample 0/1 outcomes: agree1, agree5 (all samples); ref1, test1 (labelled samples only)."""
        got = self.per_sample.get(name)
        return np.concatenate(got) if got else np.zeros(0, bool)

    def update(self, ref: np.ndarray, test: np.ndarray, labels=None) -> None:
        ref, test = ref.reshape(ref.shape[0], -1), test.reshape(test.shape[0], -1)
        k = min(5, ref.shape[1])
        r1, t1 = ref.argmax(1), test.argmax(1)
        t5 = np.argsort(-test, axis=1)[:, :k]
        r5 = np.argsort(-ref, axis=1)[:, :k]
        self.n += ref.shape[0]
        self.agree1 += int((r1 == t1).sum())
        self.agree5 += int((t5 == r1[:, None]).any(1).sum())
        self._keep("agree1", r1 == t1)
        self._keep("agree5", (t5 == r1[:, None]).any(1))
        if labels is not None:
            lab = np.asarray([-1 if v is None else v for v in labels])
            ok = lab >= 0
            self.labelled += int(ok.sum())
            self.ref_top1 += int((r1 == lab)[ok].sum())
            self.test_top1 += int((t1 == lab)[ok].sum())
            self.ref_top5 += int((r5 == lab[:, None]).any(1)[ok].sum())
            self.test_top5 += int((t5 == lab[:, None]).any(1)[ok].sum())
            self._keep("ref1", (r1 == lab)[ok])
            self._keep("test1", (t1 == lab)[ok])

    def result(self) -> dict:
        out = {"samples": self.n, "agreement_top1": self.agree1 / self.n if self.n else None,
               "agreement_top5": self.agree5 / self.n if self.n else None}
        if self.labelled:
            out.update(labelled=self.labelled, ref_top1=self.ref_top1 / self.labelled,
                       test_top1=self.test_top1 / self.labelled, ref_top5=self.ref_top5 / self.labelled,
                       test_top5=self.test_top5 / self.labelled)
        return out


def topk_accuracy(logits: np.ndarray, labels: np.ndarray, k: int = 1) -> float:
    top = np.argsort(-logits, axis=1)[:, :k]
    return float((top == np.asarray(labels)[:, None]).any(1).mean())


@dataclass
class Detections:
    """Detections of one image: boxes [n, 4] xyxy in original pixels, scores [n], classes [n]."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


@dataclass
class DetectionSet:
    images: list = field(default_factory=list)  # (image_id, width, height)
    gt: list = field(default_factory=list)  # (image_id, xywh, class)
    ref: dict = field(default_factory=dict)  # image_id -> Detections
    test: dict = field(default_factory=dict)


def coco_map(images, gt_boxes, detections) -> dict:
    """mAP50 and mAP50:95 with pycocotools. images: [(id, w, h)]; gt_boxes: [(id, xywh, class)];
    detections: [(id, xywh, score, class)]. Classes are the model's class indices on both sides."""
    return coco_map_matches(images, gt_boxes, detections)[0]


def coco_map_matches(images, gt_boxes, detections):
    """(coco_map's result, the per-image matches behind it for the bootstrap, or None without boxes)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from calib.evaluate.ap import matches_from_cocoeval

    if not gt_boxes:
        return {"map50": None, "map50_95": None, "gt_boxes": 0}, None
    classes = sorted({int(c) for _, _, c in gt_boxes} | {int(d[3]) for d in detections})
    gt = {"images": [{"id": int(i), "width": int(w), "height": int(h)} for i, w, h in images],
          "categories": [{"id": c, "name": str(c)} for c in classes],
          "annotations": [{"id": k + 1, "image_id": int(i), "bbox": [float(v) for v in b],
                           "area": float(b[2] * b[3]), "iscrowd": 0, "category_id": int(c)}
                          for k, (i, b, c) in enumerate(gt_boxes)]}
    with contextlib.redirect_stdout(io.StringIO()):
        cg = COCO()
        cg.dataset = gt
        cg.createIndex()
        if not detections:
            return {"map50": 0.0, "map50_95": 0.0, "gt_boxes": len(gt_boxes)}, None
        cd = cg.loadRes([{"image_id": int(i), "bbox": [float(v) for v in b], "score": float(s),
                          "category_id": int(c)} for i, b, s, c in detections])
        ev = COCOeval(cg, cd, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    res = {"map50_95": float(max(ev.stats[0], 0.0)), "map50": float(max(ev.stats[1], 0.0)),
           "gt_boxes": len(gt_boxes)}
    return res, matches_from_cocoeval(ev, [i for i, _, _ in images])
