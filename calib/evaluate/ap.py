"""COCO average precision re-accumulated from per-image box matches, with images weighted (bootstrap).

pycocotools matches detections to boxes image by image (COCOeval.evaluate) and then accumulates precision and
recall over all images (COCOeval.accumulate). Drawing images with replacement changes only the second step: each
image's matches count as many times as the image is drawn. `Matches` keeps the first step's result, per category,
as arrays; `Matches.map(weights)` is COCOeval.accumulate + summarize (area 'all', 100 detections per image) for
a whole batch of weight vectors at once, in numpy. With all weights 1 it gives pycocotools' own mAP50 and mAP50:95.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_REC_THRS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
_CHUNK = 1 << 20  # weights x thresholds x detections held at once


@dataclass
class CategoryMatches:
    det_image: np.ndarray  # [D] image position of each detection, detections sorted by score (as pycocotools)
    tp: np.ndarray  # [T, D] matched to a box, not ignored
    fp: np.ndarray  # [T, D] unmatched, not ignored
    gt_per_image: np.ndarray  # [I] boxes of this category that count (not ignored), per image


@dataclass
class Matches:
    n_images: int
    categories: list  # CategoryMatches

    def map(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mAP50 [b], mAP50:95 [b]) for image weights [b, n_images]; NaN where no drawn image has a box."""
        w = np.atleast_2d(np.asarray(weights, np.float64))
        b = w.shape[0]
        sum50, sum_all, valid = np.zeros(b), np.zeros(b), np.zeros(b)
        for c in self.categories:
            npig = w @ c.gt_per_image  # [b]
            q = _precision_at_recall(w, c, npig)  # [b, T, R]
            ok = npig > 0
            sum50 += np.where(ok, q[:, 0].mean(-1), 0.0)
            sum_all += np.where(ok, q.mean((1, 2)), 0.0)
            valid += ok
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(valid > 0, sum50 / valid, np.nan), np.where(valid > 0, sum_all / valid, np.nan)


def _precision_at_recall(w: np.ndarray, c: CategoryMatches, npig: np.ndarray) -> np.ndarray:
    T, D = c.tp.shape
    R = _REC_THRS.size
    out = np.zeros((w.shape[0], T, R))
    if D == 0:
        return out
    step = max(1, _CHUNK // (T * D))
    for lo in range(0, w.shape[0], step):
        wd = w[lo:lo + step, c.det_image]  # [b, D]
        b = wd.shape[0]
        tp = np.cumsum(wd[:, None, :] * c.tp[None], axis=-1)
        fp = np.cumsum(wd[:, None, :] * c.fp[None], axis=-1)
        pr = tp / (fp + tp + np.spacing(1))
        pr = np.maximum.accumulate(pr[..., ::-1], axis=-1)[..., ::-1]  # precision envelope
        # pycocotools: the first detection whose recall tp / npig >= each threshold. tp holds whole numbers, so
        # find the smallest whole k with k / npig >= threshold (the same float division) and count tp < k
        n = np.maximum(npig[lo:lo + b], 1.0)[:, None]  # [b, 1]
        k = np.ceil(_REC_THRS[None, :] * n)
        k = np.where((k - 1) / n >= _REC_THRS, k - 1, k)
        k = np.where(k / n < _REC_THRS, k + 1, k)  # [b, R]
        rows = b * T
        top = float(tp.max()) + 2.0 if tp.size else 2.0
        offset = top * np.arange(rows)[:, None]  # whole numbers: one exactly sorted array for all rows
        kk = np.minimum(np.broadcast_to(k[:, None, :], (b, T, R)).reshape(rows, R), top - 1.0)
        idx = np.searchsorted((tp.reshape(rows, D) + offset).reshape(-1), (kk + offset).reshape(-1), side="left")
        idx = idx.reshape(rows, R) - D * np.arange(rows)[:, None]
        inside = idx < D
        flat = pr.reshape(rows, D)
        q = np.where(inside, np.take_along_axis(flat, np.minimum(idx, D - 1), axis=1), 0.0)
        out[lo:lo + b] = q.reshape(b, T, R)
    return out


def matches_from_cocoeval(ev, image_ids: list) -> Matches:
    """The per-image matches of an evaluated COCOeval (after .evaluate()), area range 'all'."""
    p = ev.params
    pos = {int(i): k for k, i in enumerate(image_ids)}
    n_img, n_area = len(p.imgIds), len(p.areaRng)
    max_det = p.maxDets[-1]
    cats = []
    for k, _cat in enumerate(p.catIds):
        evs = [ev.evalImgs[k * n_area * n_img + i] for i in range(n_img)]  # area index 0: 'all'
        evs = [e for e in evs if e is not None]
        gt = np.zeros(len(image_ids))
        scores, img, tps, fps = [], [], [], []
        for e in evs:
            gt[pos[int(e["image_id"])]] += int(np.count_nonzero(np.asarray(e["gtIgnore"]) == 0))
            s = np.asarray(e["dtScores"][:max_det], np.float64)
            m = np.asarray(e["dtMatches"])[:, :max_det] > 0
            ig = np.asarray(e["dtIgnore"])[:, :max_det].astype(bool)
            scores.append(s)
            img.append(np.full(s.size, pos[int(e["image_id"])], np.int64))
            tps.append(m & ~ig)
            fps.append(~m & ~ig)
        T = len(p.iouThrs)
        if scores:
            s = np.concatenate(scores)
            order = np.argsort(-s, kind="mergesort")
            cm = CategoryMatches(np.concatenate(img)[order], np.concatenate(tps, 1)[:, order].astype(np.float64),
                                 np.concatenate(fps, 1)[:, order].astype(np.float64), gt)
        else:
            cm = CategoryMatches(np.zeros(0, np.int64), np.zeros((T, 0)), np.zeros((T, 0)), gt)
        if gt.sum() > 0:  # a category no image has a box of never counts, whatever the weights
            cats.append(cm)
    return Matches(len(image_ids), cats)
