"""Metrics with known answers; mAP cross-checked by hand on tiny cases."""
import math

import numpy as np
import pytest

from calib.evaluate.detect import decode, nms
from calib.evaluate.metrics import Classification, TensorStats, coco_map, sqnr_db, topk_accuracy
from calib.recipe import DetectionSpec


def test_tensor_stats_known_values():
    s = TensorStats()
    ref = np.array([3.0, 4.0])
    s.update(ref, np.array([3.0, 3.0]))
    r = s.result()
    assert r["sqnr_db"] == pytest.approx(10 * math.log10(25 / 1))
    assert r["rel_l2"] == pytest.approx(1 / 5)
    assert r["max_abs"] == 1.0
    assert r["cosine"] == pytest.approx(21 / (5 * math.sqrt(18)))
    assert sqnr_db(1.0, 0.0) == math.inf


def test_topk_and_agreement():
    ref = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    test = np.array([[0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5]])
    assert topk_accuracy(ref, np.array([1, 0, 0]), 1) == pytest.approx(2 / 3)
    assert topk_accuracy(ref, np.array([1, 0, 0]), 2) == pytest.approx(2 / 3)
    c = Classification()
    c.update(ref, test, [1, 0, 2])
    r = c.result()
    assert r["agreement_top1"] == pytest.approx(2 / 3)
    assert r["ref_top1"] == 1.0 and r["test_top1"] == pytest.approx(2 / 3)


def test_map_perfect_and_half():
    images = [(1, 100, 100), (2, 100, 100)]
    gt = [(1, [10, 10, 20, 20], 3), (2, [50, 50, 30, 30], 3)]
    perfect = [(1, [10, 10, 20, 20], 0.9, 3), (2, [50, 50, 30, 30], 0.8, 3)]
    assert coco_map(images, gt, perfect)["map50_95"] == pytest.approx(1.0)
    # one box found, one missed entirely: recall 0.5 at precision 1 -> AP ~ 0.5 (101-point interpolation)
    half = [(1, [10, 10, 20, 20], 0.9, 3)]
    r = coco_map(images, gt, half)
    assert r["map50"] == pytest.approx(0.5, abs=0.01)
    # a box shifted to IoU 0.6: counts at IoU 0.5, 0.55, 0.6 only -> 3 of 10 thresholds
    shifted = [(1, [10 + 20 * 0.25, 10, 20, 20], 0.9, 3)]
    iou = (15 * 20) / (20 * 20 * 2 - 15 * 20)
    assert iou == pytest.approx(0.6)
    r = coco_map([(1, 100, 100)], gt[:1], shifted)
    assert r["map50"] == pytest.approx(1.0) and r["map50_95"] == pytest.approx(0.3, abs=0.01)


def test_nms_and_decode():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], np.float64)
    scores = np.array([0.9, 0.8, 0.7])
    assert list(nms(boxes, scores, 0.5)) == [0, 2]
    cls_scores = np.zeros((3, 2))
    cls_scores[0, 0], cls_scores[1, 1], cls_scores[2, 0] = 0.9, 0.8, 0.1
    d = decode(boxes, cls_scores, DetectionSpec(conf_threshold=0.25))
    assert len(d.scores) == 2 and set(d.classes) == {0, 1}  # different classes survive NMS
