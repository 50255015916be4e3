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


@pytest.mark.parametrize("n", [0, 1, 4095, 4097, 200_003])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_tensor_stats_match_float64_numpy_over_batches(n, dtype):
    rng = np.random.default_rng(n)
    s = TensorStats()
    refs = [rng.normal(0, 3, n).astype(dtype) for _ in range(3)]
    tests = [(r + rng.normal(0, 0.1, n)).astype(dtype) for r in refs]
    for r, t in zip(refs, tests):
        s.update(r.reshape(-1, 1) if n else r, t)
    R = np.concatenate(refs).astype(np.float64)
    T = np.concatenate(tests).astype(np.float64)
    D = R - T
    assert s.count == 3 * n
    assert s.signal == pytest.approx(R @ R, rel=1e-12, abs=1e-12)
    assert s.noise == pytest.approx(D @ D, rel=1e-12, abs=1e-12)
    assert s.dot == pytest.approx(R @ T, rel=1e-12, abs=1e-12)
    assert s.test_sq == pytest.approx(T @ T, rel=1e-12, abs=1e-12)
    assert s.maxabs == (np.abs(D).max() if n else 0.0)


def test_tensor_stats_nan_is_not_hidden():
    s = TensorStats()
    t = np.ones(10_000, np.float32)
    t[7777] = np.nan
    s.update(np.ones(10_000, np.float32), t)
    assert math.isnan(s.noise) and math.isnan(s.maxabs) and math.isnan(s.result()["sqnr_db"])
    with pytest.raises(ValueError, match="cannot compare"):
        s.update(np.ones(3), np.ones(4))


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


def test_detection_evaluation_against_coco_labels(tmp_path):
    """A fake 'detector' graph whose boxes/scores are fixed constants: mAP vs labels is known exactly."""
    import json as _json

    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    from calib.data.sources import make_source
    from calib.evaluate.api import evaluate
    from calib.recipe import DataSpec, PreprocessSpec

    boxes = np.array([[[8, 8, 24, 24], [40, 40, 60, 60]]], np.float32)  # input pixels (64x64 = original)
    scores = np.array([[[0.9, 0.0], [0.0, 0.8]]], np.float32)
    # out = input.mean() * 0 + constant, so the graph has one real activation path
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=0, axes=[1, 2, 3]),
             helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Unsqueeze", ["z", "ax"], ["z2"]),
             helper.make_node("Unsqueeze", ["z2", "ax2"], ["z3"]),
             helper.make_node("Add", ["z3", "cb"], ["boxes"]), helper.make_node("Add", ["z3", "cs"], ["scores"])]
    g = helper.make_graph(nodes, "fake", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 64, 64])],
                          [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", 2, 4]),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 2, 2])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                           numpy_helper.from_array(np.array([1], np.int64), "ax"),
                           numpy_helper.from_array(np.array([2], np.int64), "ax2"),
                           numpy_helper.from_array(boxes, "cb"), numpy_helper.from_array(scores, "cs")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "fake.onnx"))
    (tmp_path / "im").mkdir()
    Image.new("RGB", (64, 64)).save(tmp_path / "im" / "a.png")
    doc = {"images": [{"id": 1, "file_name": "a.png", "width": 64, "height": 64}],
           "annotations": [{"id": 1, "image_id": 1, "bbox": [8, 8, 16, 16], "category_id": 0, "iscrowd": 0},
                           {"id": 2, "image_id": 1, "bbox": [0, 0, 5, 5], "category_id": 1, "iscrowd": 0}],
           "categories": [{"id": 0, "name": "a"}, {"id": 1, "name": "b"}]}
    (tmp_path / "ann.json").write_text(_json.dumps(doc))
    src = make_source(DataSpec(kind="coco", path=str(tmp_path / "im"), annotations=str(tmp_path / "ann.json")),
                      PreprocessSpec(resize=(64, 64), mode="letterbox"), "images", 1)
    res = evaluate(tmp_path / "fake.onnx", {"int8": {"images": 1.0}}, src, task="detection")
    t = res["configs"]["int8"]["task"]
    assert t["vs_fp32"]["map50_95"] == pytest.approx(1.0)  # same boxes as FP32
    # class 0 found exactly (AP 1), class 1 box is elsewhere (AP 0): mean 0.5
    assert t["vs_labels"]["map50_95"] == pytest.approx(0.5, abs=0.01)
    assert t["vs_labels"]["recall"] == 0.5 and t["vs_fp32"]["recall"] == 1.0  # box recall: the same boxes


def test_report_drop_column():
    from calib.evaluate.report import summary

    ev = {"task": "classification", "configs": {
        "a": {"task": {"agreement_top1": 0.9, "ref_top1": 0.8, "test_top1": 0.7}, "outputs": {}, "layers": []},
        "b": {"task": {"agreement_top1": 0.95}, "outputs": {}, "layers": []}}}
    s = summary(ev)
    assert s["rows"]["a"]["drop"] == pytest.approx(0.1) and s["rows"]["b"]["drop"] == pytest.approx(0.05)
    assert s["best"] == "b"
