"""Plugin nodes: EfficientNMS_TRT in numpy against hand-made cases, the graph cut before the plugin, the YOLOv8 +
EfficientNMS surgery, and the whole plugin model through the TensorRT stand-in (which, like TensorRT's parser,
refuses the plugin node until the plugin library is loaded)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from calib.errors import ModelError
from calib.deploy.plugins import (NMS_OUTPUTS, PluginModelRunner, add_efficient_nms, cut_before_plugins, efficient_nms,
                           is_plugin)
from calib.runners.tensorrt.builder import BuildSpec, build
from calib.runners.tensorrt.runner import TrtRunner
from standin.tensorrt import Memory, make_trt


def _nms(boxes, scores, **kw):
    return efficient_nms(np.array([boxes], np.float32), np.array([scores], np.float32), **kw)


def test_overlapping_boxes_of_one_class_keep_the_higher_score():
    # IoU of box 0 and 1: 81 / 119 = 0.68 > 0.45; box 2 far away
    out = _nms([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], [[0.9], [0.8], [0.3]], score_threshold=0.25,
               iou_threshold=0.45, max_output_boxes=4)
    assert out["num_detections"].tolist() == [[2]]
    np.testing.assert_allclose(out["detection_scores"], [[0.9, 0.3, 0, 0]])
    np.testing.assert_allclose(out["detection_boxes"][0, :2], [[0, 0, 10, 10], [50, 50, 60, 60]])
    assert out["detection_boxes"][0, 2:].tolist() == [[0, 0, 0, 0]] * 2  # zero past num_detections
    assert out["detection_classes"].tolist() == [[0, 0, 0, 0]]
    assert out["num_detections"].dtype == np.int32 and out["detection_classes"].dtype == np.int32


def test_iou_below_the_threshold_keeps_both_and_the_score_threshold_drops():
    # IoU of these two: 25 / 175 = 0.14
    out = _nms([[0, 0, 10, 10], [5, 5, 15, 15], [20, 20, 30, 30]], [[0.6], [0.7], [0.2]], score_threshold=0.25,
               iou_threshold=0.45, max_output_boxes=10)
    assert out["num_detections"].tolist() == [[2]]
    np.testing.assert_allclose(out["detection_scores"][0, :2], [0.7, 0.6])
    np.testing.assert_allclose(out["detection_boxes"][0, 0], [5, 5, 15, 15])


def test_nms_is_per_class_unless_class_agnostic():
    boxes = [[0, 0, 10, 10], [0, 0, 10, 10]]
    scores = [[0.9, 0.1], [0.1, 0.8]]  # the same box, best in class 0 and in class 1
    per_class = _nms(boxes, scores, iou_threshold=0.5, max_output_boxes=5)
    assert per_class["num_detections"].tolist() == [[2]]
    assert per_class["detection_classes"][0, :2].tolist() == [0, 1]
    np.testing.assert_allclose(per_class["detection_scores"][0, :2], [0.9, 0.8])
    agnostic = _nms(boxes, scores, iou_threshold=0.5, max_output_boxes=5, class_agnostic=1)
    assert agnostic["num_detections"].tolist() == [[1]]
    assert agnostic["detection_classes"][0, 0] == 0


def test_max_output_boxes_keeps_the_highest_of_all_classes_and_center_size_coding():
    boxes = [[5 + 20 * i, 5, 10, 10] for i in range(4)]  # cx, cy, w, h: disjoint
    scores = [[0.3, 0.0], [0.0, 0.95], [0.5, 0.0], [0.0, 0.7]]
    out = _nms(boxes, scores, max_output_boxes=3, box_coding=1)
    assert out["num_detections"].tolist() == [[3]]
    np.testing.assert_allclose(out["detection_scores"][0], [0.95, 0.7, 0.5])
    assert out["detection_classes"][0].tolist() == [1, 1, 0]
    np.testing.assert_allclose(out["detection_boxes"][0, 0], [20, 0, 30, 10])  # corners, whatever the input coding


def test_the_thresholds_and_the_candidate_cap_are_tensorrts():
    """As EfficientNMS_TRT's CUDA code: a score equal to the threshold is kept (>=), an IoU equal to the threshold
    suppresses (>=), and only the 4096 highest scores (numSelectedBoxes) reach the NMS; corner boxes come out as
    given, unsorted corners included."""
    out = _nms([[0, 0, 10, 10], [0, 0, 10, 20]], [[0.25], [0.9]], score_threshold=0.25, iou_threshold=0.5)
    assert out["num_detections"].tolist() == [[1]]  # IoU 100 / 200 = 0.5 exactly: suppressed
    np.testing.assert_allclose(out["detection_scores"][0, 0], 0.9)
    out = _nms([[0, 0, 10, 10], [0, 0, 10, 20]], [[0.25], [0.9]], score_threshold=0.25, iou_threshold=0.51)
    assert out["num_detections"].tolist() == [[2]]  # 0.25 exactly: kept
    np.testing.assert_allclose(out["detection_scores"][0, :2], [0.9, 0.25])
    out = _nms([[10, 10, 0, 0]], [[0.5]])
    np.testing.assert_allclose(out["detection_boxes"][0, 0], [10, 10, 0, 0])
    scores = np.linspace(0.3, 0.9, 4097, dtype=np.float32)[None, None, :]  # one box, 4097 classes
    out = efficient_nms(np.zeros((1, 1, 4), np.float32), scores, max_output_boxes=5000)
    assert out["num_detections"].tolist() == [[4096]]
    assert out["detection_classes"][0, :4096].min() == 1  # the lowest score (class 0) did not reach the NMS


def test_batch_rows_are_independent_and_score_activation_applies_a_sigmoid():
    boxes = np.array([[[0, 0, 1, 1]], [[0, 0, 2, 2]]], np.float32)
    logits = np.array([[[0.0]], [[-3.0]]], np.float32)  # sigmoid 0.5 and 0.047
    out = efficient_nms(boxes, logits, score_threshold=0.25, max_output_boxes=2, score_activation=1)
    assert out["num_detections"].tolist() == [[1], [0]]
    np.testing.assert_allclose(out["detection_scores"][0, 0], 0.5)


def yolov8_like(classes=2, anchors=5) -> onnx.ModelProto:
    """x [N, 4 + C, A] -> Identity -> output0: a YOLOv8 head with nothing before it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4 + classes, anchors])
    y = helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 + classes, anchors])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["output0"], name="id")], "y8", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _raw():
    """One image, 5 anchors (cx, cy, w, h) and 2 classes: anchors 0 and 1 overlap (class 0), 3 is class 1."""
    a = np.array([[10, 10, 10, 10, 0.9, 0.0], [11, 11, 10, 10, 0.8, 0.1], [40, 40, 4, 4, 0.1, 0.2],
                  [70, 70, 8, 8, 0.0, 0.6], [90, 90, 2, 2, 0.05, 0.05]], np.float32)
    return a.T[None].copy()  # [1, 6, 5]


def test_yolov8_with_efficient_nms_is_cut_before_the_plugin_and_runs_on_the_cpu(tmp_path):
    m = add_efficient_nms(yolov8_like(), score_threshold=0.25, iou_threshold=0.45, max_output_boxes=4)
    path = tmp_path / "y8nms.onnx"
    onnx.save(m, path)
    assert [o.name for o in m.graph.output] == list(NMS_OUTPUTS)
    nms = [n for n in m.graph.node if is_plugin(n)]
    assert [n.op_type for n in nms] == ["EfficientNMS_TRT"]
    with pytest.raises(Exception, match="EfficientNMS_TRT"):
        ort.InferenceSession(str(path))  # what calib cuts the graph for
    head, plugins = cut_before_plugins(m)
    assert plugins == nms
    assert [o.name for o in head.graph.output] == ["boxes", "scores"]  # calib's boxes + scores detection layout
    assert not any(is_plugin(n) for n in head.graph.node)
    got = ort.InferenceSession(head.SerializeToString()).run(None, {"x": _raw()})
    np.testing.assert_allclose(got[0][0, 0], [5, 5, 15, 15])  # the decoder: center-size to corners
    np.testing.assert_allclose(got[1][0, 3], [0.0, 0.6])
    out = PluginModelRunner(path).run({"x": _raw()})
    assert out["num_detections"].tolist() == [[2]]
    np.testing.assert_allclose(out["detection_boxes"][0, :2], [[5, 5, 15, 15], [66, 66, 74, 74]])
    np.testing.assert_allclose(out["detection_scores"][0], [0.9, 0.6, 0, 0])
    assert out["detection_classes"][0, :2].tolist() == [0, 1]


def test_a_node_reading_a_plugin_output_is_refused_and_an_unknown_plugin_named():
    m = add_efficient_nms(yolov8_like())
    m.graph.node.append(helper.make_node("Identity", ["detection_scores"], ["again"], name="after"))
    with pytest.raises(ModelError, match="'after' .* reads the output of plugin EfficientNMS_TRT"):
        cut_before_plugins(m, "m.onnx")
    other = add_efficient_nms(yolov8_like())
    other.graph.node[-1].op_type = "BatchedNMSDynamic_TRT"
    with pytest.raises(ModelError, match=r"BatchedNMSDynamic_TRT\) is a plugin calib cannot run on the CPU"):
        PluginModelRunner(other, "m.onnx")


@pytest.mark.parametrize("version", ["8.6.0", "10.3.0"])
def test_plugin_model_builds_with_the_plugin_library_loaded_and_runs(tmp_path, version):
    path = tmp_path / "y8nms.onnx"
    onnx.save(add_efficient_nms(yolov8_like(), max_output_boxes=4), path)
    mem = Memory()
    trt = make_trt(version, mem)
    built = build(path, BuildSpec(precisions=("fp32",), batch_size=2), None, trt, mem)
    assert trt.plugins_loaded  # calib registered TensorRT's plugins before parsing
    r = TrtRunner(built.plan, trt, mem)
    try:
        x = np.concatenate([_raw(), _raw()])
        got = r.run({"x": x})
        want = PluginModelRunner(path).run({"x": x})
        assert set(got) == set(NMS_OUTPUTS)
        for k in NMS_OUTPUTS:
            np.testing.assert_allclose(got[k], want[k])
    finally:
        r.close()
    fresh = make_trt(version, Memory())  # the stand-in's parser, like TensorRT's, fails without the library
    builder = fresh.Builder(fresh.Logger())
    net = builder.create_network(1 << int(fresh.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = fresh.OnnxParser(net, None)
    assert not parser.parse_from_file(str(path))
    assert "No importer registered for op: EfficientNMS_TRT" in parser.get_error(0)


def tiny_detector_with_nms(path, classes=2):
    """images [N, 3, 8, 8] -> Conv 1x1 (3 -> 4 + C) -> Sigmoid -> * 8 -> Reshape [N, 4 + C, 64] -> the YOLOv8
    decoder and EfficientNMS_TRT."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4 + classes, 3, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["images", "w"], ["c"], name="conv"),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["s", "eight"], ["m"], name="scale"),
             helper.make_node("Reshape", ["m", "shape"], ["output0"], name="flat")]
    inits = [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.float32(8), "eight"),
             onnx.numpy_helper.from_array(np.array([-1, 4 + classes, 64], np.int64), "shape")]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + classes, 64])],
                          inits)
    m = add_efficient_nms(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), score_threshold=0.25,
                          iou_threshold=0.45, max_output_boxes=20)
    onnx.save(m, path)
    return path


def test_calib_run_on_a_plugin_model_calibrates_the_cut_graph_and_builds_the_whole(tmp_path):
    import json

    import yaml

    from test_tensorrt_cli import calib_cli

    model = tiny_detector_with_nms(tmp_path / "det.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(1).random((24, 3, 8, 8), dtype=np.float32))
    recipe = {"name": "det", "model": str(model),
              "calibration_data": {"kind": "npy", "path": "x.npy", "limit": 16},
              "evaluation_data": {"kind": "npy", "path": "x.npy", "offset": 16},
              "calibration": {"algorithms": ["minmax"], "batch_size": 4},
              "evaluation": {"task": "detection", "batch_size": 4, "detection": {"format": "yolov3"}},
              "backend": {"kind": "tensorrt", "batch_size": 4, "trt_calibrator": None,
                          "profiles": [{"images": {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [4, 3, 8, 8]}}]},
              "output": "runs/det"}
    (tmp_path / "det.yaml").write_text(yaml.safe_dump(recipe))
    r = calib_cli("run", tmp_path / "det.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "runs" / "det"
    rep = json.loads((out / "report.json").read_text())
    cut = onnx.load(str(out / "det.cut.onnx"))  # the graph calib calibrated: no plugin, boxes + scores out
    assert [o.name for o in cut.graph.output] == ["boxes", "scores"] and not any(is_plugin(n) for n in cut.graph.node)
    assert "det.cut.onnx" in rep["files"]
    qdq = onnx.load(str(out / "det.minmax.qdq.onnx"))  # the deployable Q/DQ model keeps the plugin
    assert [n.op_type for n in qdq.graph.node if is_plugin(n)] == ["EfficientNMS_TRT"]
    assert sum(n.op_type == "QuantizeLinear" for n in qdq.graph.node) > 0
    rows = rep["summary"]["rows"]
    assert rows["trt-fp32"]["map50_95_vs_fp32"] == pytest.approx(1.0)  # the engine's boxes + scores = FP32's
    assert {"minmax", "trt-fp16", "trt-int8-minmax"} <= set(rows)
