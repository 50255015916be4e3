"""Built-in heads: each decoded from a synthetic output with known boxes, recognized from the shapes, overridden."""
import json

import numpy as np
import pytest
from click.testing import CliRunner
from heads_graphs import fixed_outputs, yolox_demo_postprocess, yolox_raw
from onnx import TensorProto, helper

from calib.cli import main
from calib.errors import ModelError
from calib.evaluate import heads
from calib.evaluate.detect import select
from calib.evaluate.tasks import check_task
from calib.recipe import DetectionSpec

SPEC = DetectionSpec(conf_threshold=0.25)


def _detections(head, outputs, image=0):
    return select(*head.candidates(outputs)[image], SPEC)


def test_yolox_raw_grid_decode_finds_the_known_box():
    # stride 16, cell (2, 1), offsets 0.5, w = h = exp(log 2) * 16 = 32: centre (40, 24), box (24, 8, 56, 40)
    y = yolox_raw(boxes=[(16, 2, 1, 0.5, 0.5, np.log(2), np.log(2), 0.9, 1, 0.8)])
    assert y.shape == (1, 84, 7)  # 8x8 + 4x4 + 2x2 cells of a 64x64 input
    head = heads.resolve("auto", {"output": y}, (64, 64))
    assert head.name == "yolox" and head.grid == ((8, 8), (4, 4), (2, 2))
    d = _detections(head, {"output": y})
    assert d.boxes.ravel().tolist() == pytest.approx([24, 8, 56, 40])
    assert d.scores.tolist() == pytest.approx([0.72]) and d.classes.tolist() == [1]  # objectness x class score
    assert "yolox" in head.describe() and "8x8 + 4x4 + 2x2" in head.describe()


def test_yolox_grid_decode_is_yoloxs_own_on_a_non_square_input():
    rng = np.random.default_rng(0)
    hw = (64, 96)
    y = rng.normal(0, 1, (2, 8 * 12 + 4 * 6 + 2 * 3, 6)).astype(np.float32)
    sizes = heads.grid_sizes(y.shape[1], hw)
    assert sizes == [(8, 12), (4, 6), (2, 3)]
    np.testing.assert_allclose(heads.grid_decode(y, sizes), yolox_demo_postprocess(y, hw), rtol=1e-6)
    assert heads.grid_sizes(y.shape[1], (64, 64)) is None  # not one anchor per cell of that input
    assert heads.grid_sizes(84, None) == [(8, 8), (4, 4), (2, 2)]  # a square input, size unknown


def test_yolov5_decoded_boxes_and_decoded_yolox_are_not_grid_decoded():
    a = 3 * 84  # three anchors per cell: YOLOv5 / YOLOv7
    y = np.zeros((1, a, 7), np.float32)
    y[0, :, 0] = np.linspace(4, 60, a)  # centres in pixels across the input
    y[0, 5] = (30, 20, 10, 8, 0.8, 0.1, 0.9)  # cx, cy, w, h, obj, class scores
    head = heads.resolve("auto", {"out": y}, (64, 64))
    assert head.name == "yolov5"
    d = _detections(head, {"out": y})
    assert d.boxes.ravel().tolist() == pytest.approx([25, 16, 35, 24]) and d.classes.tolist() == [1]
    assert d.scores.tolist() == pytest.approx([0.72])
    decoded = yolox_demo_postprocess(yolox_raw(boxes=[(8, 3, 3, 0.5, 0.5, 1.0, 1.0, 0.9, 0, 0.9)]), (64, 64))
    assert heads.resolve("auto", {"out": decoded}, (64, 64)).name == "yolov5"  # YOLOX exported with decoding


def test_yolov8_layout_known_box():
    y = np.zeros((1, 4 + 3, 100), np.float32)  # [N, 4 + C, A]
    y[0, :, 7] = (32, 32, 16, 8, 0.1, 0.2, 0.6)
    head = heads.resolve("auto", {"output0": y}, (64, 64))
    assert head.name == "yolov8"
    d = _detections(head, {"output0": y})
    assert d.boxes.ravel().tolist() == pytest.approx([24, 28, 40, 36]) and d.classes.tolist() == [2]


def test_separate_boxes_and_scores_with_any_names():
    boxes = np.zeros((1, 5, 4), np.float32)
    scores = np.zeros((1, 5, 3), np.float32)
    boxes[0, 2], scores[0, 2, 0] = (1, 2, 11, 12), 0.7
    outs = {"det_scores": scores, "det_boxes": boxes}
    head = heads.resolve("auto", outs)
    assert head.name == "boxes-scores" and head.outputs == ("det_boxes", "det_scores")
    d = _detections(head, outs)
    assert d.boxes.tolist() == [[1, 2, 11, 12]] and d.classes.tolist() == [0]
    assert heads.resolve("yolov3", {"boxes": boxes, "scores": scores}).name == "boxes-scores"  # the older name


def test_head_override_and_refusals():
    y = yolox_raw(boxes=[(16, 2, 1, 0.5, 0.5, np.log(2), np.log(2), 0.9, 1, 0.8)])
    forced = heads.resolve("yolov5", {"output": y}, (64, 64))
    assert forced.name == "yolov5" and not forced.grid  # the user's choice: no grid decode
    half = np.log(2) / 2  # x, y, w, h read as pixels
    assert _detections(forced, {"output": y}).boxes.ravel().tolist() == pytest.approx([0.5 - half, 0.5 - half,
                                                                                     0.5 + half, 0.5 + half])
    with pytest.raises(ModelError, match=r"--head yolov8: the outputs are output \[1, 84, 7\], not YOLOv8.*"
                                         r"\(yolov5, yolox fits\)"):
        heads.resolve("yolov8", {"output": y})
    with pytest.raises(ModelError, match="no built-in head fits the outputs logits \\[2, 5\\]: choose one with "
                                         "--head .* or give --postprocess FILE.py:FUNCTION"):
        heads.resolve("auto", {"logits": np.zeros((2, 5))})
    with pytest.raises(ModelError, match="--head yolox: 100 anchors are not one per cell"):
        heads.resolve("yolox", {"output": np.zeros((1, 100, 7))}, (64, 64))


def _model(*outs):
    g = helper.make_graph([], "g", [], [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs])
    return helper.make_model(g)


def test_recognized_from_declared_shapes_before_any_inference():
    assert check_task(_model(("output", ["N", 84, 7])), "detection") == "auto"  # yolov5 or yolox: values decide
    assert check_task(_model(("output", ["N", 84, 7])), "detection", "yolox") == "yolox"
    assert check_task(_model(("output0", ["N", 7, 8400])), "detection") == "yolov8"
    assert check_task(_model(("b", ["N", 10, 4]), ("s", ["N", 10, 3])), "detection") == "boxes-scores"
    with pytest.raises(ModelError, match=r"detection format yolov8 does not fit its outputs output \[N, 84, 7\] "
                                         r"\(yolov5 or yolox does; --head chooses the head\)"):
        check_task(_model(("output", ["N", 84, 7])), "detection", "yolov8")


@pytest.fixture
def yolox_model(tmp_path):
    y = yolox_raw(boxes=[(8, 1, 1, 0.5, 0.5, 1.0, 1.0, 0.9, 0, 0.9), (16, 2, 1, 0.5, 0.5, np.log(2), np.log(2),
                                                                      0.9, 1, 0.8)])
    path = fixed_outputs(tmp_path / "yolox.onnx", {"output": y})
    data = np.random.default_rng(0).random((4, 3, 64, 64), dtype=np.float32)
    np.save(tmp_path / "x.npy", data)
    r = CliRunner().invoke(main, ["calibrate", str(path), "--data", str(tmp_path / "x.npy"), "--algo", "minmax",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    return path, tmp_path / "x.npy", tmp_path / "c" / "minmax.cache"


def test_evaluate_decodes_with_the_recognized_head_and_names_it(yolox_model, tmp_path):
    model, data, cache = yolox_model
    r = CliRunner().invoke(main, ["evaluate", str(model), "--cache", str(cache), "--data", str(data),
                                  "--task", "detection", "--no-layerwise", "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["decoder"].startswith("head yolox (YOLOX-style raw")
    assert rep["summary"]["fp32_boxes"] == 2 * 4  # two boxes per image, four images
    t = rep["evaluation"]["configs"]["minmax"]["task"]["vs_fp32"]
    assert t["map50_95"] == pytest.approx(1.0) and t["recall"] == pytest.approx(1.0)
    assert "Decoded by head yolox" in (tmp_path / "rep" / "report.md").read_text()
    # --head alone is a detection evaluation; a head that does not fit is refused in one line
    r = CliRunner().invoke(main, ["evaluate", str(model), "--cache", str(cache), "--data", str(data), "--head",
                                  "yolov5", "--no-layerwise", "--out", str(tmp_path / "rep2")])
    assert r.exit_code == 0, r.output
    rep2 = json.loads((tmp_path / "rep2" / "report.json").read_text())
    assert rep2["evaluation"]["configs"]["minmax"]["task"] and rep2["decoder"].startswith("head yolov5")
    assert rep2["summary"]["fp32_boxes"] == 2 * 4
    r = CliRunner().invoke(main, ["evaluate", str(model), "--cache", str(cache), "--data", str(data), "--head",
                                  "yolov8", "--out", str(tmp_path / "rep3")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "detection format yolov8 does not fit its outputs output [N, 84, 7]" in r.output


def test_box_recall_known_answer():
    from calib.evaluate.metrics import Detections
    from calib.evaluate.recall import Recall, figures, found

    ref = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]]
    boxes = np.array([[1, 1, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30], [60, 60, 70, 70]], np.float64)
    scores, classes = np.array([0.9, 0.8, 0.7, 0.6]), np.array([0, 0, 1, 0])
    # box 0 finds ref 0 (IoU 0.81); box 1 cannot take it again; box 2 has the wrong class; box 3 overlaps nothing
    assert found(ref, [0, 0, 0], boxes, scores, classes) == 1
    assert found(ref, [0, 1, 0], boxes, scores, classes) == 2
    r = Recall()
    r.add(ref, [0, 1, 0], Detections(boxes, scores, classes))
    r.add(np.zeros((0, 4)), [], Detections(boxes, scores, classes))  # an image without boxes counts for nothing
    assert r.value() == pytest.approx(2 / 3)
    figs, _ = figures({"vs_fp32": r}, 2)
    assert figs["recall_vs_fp32"]["value"] == pytest.approx(2 / 3) and figs["recall_vs_fp32"]["boxes"] == 3
