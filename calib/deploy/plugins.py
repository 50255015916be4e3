"""TensorRT plugin nodes in an ONNX graph: found, cut off for ONNX Runtime, and run in numpy where calib knows them.

ONNX Runtime cannot load a graph with a node such as EfficientNMS_TRT. Calibration needs only the tensors before
the plugin (a plugin's inputs and outputs are not quantized by TensorRT), so calib works on the graph cut before
the plugin nodes (`cut_before_plugins`): its outputs are the plugins' inputs. The CPU simulation of the whole model
runs that graph in ONNX Runtime and then the plugins' function in numpy (`PLUGINS`: EfficientNMS_TRT), so that the
model's own outputs can be compared and evaluated. TensorRT builds the whole graph with its plugin library loaded.

`add_efficient_nms` makes the real example: a YOLOv8 graph (one output [N, 4 + C, A] of cx, cy, w, h and class
scores) with its box decoder (center-size to corners) followed by an EfficientNMS_TRT node.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from calib.errors import ModelError
from calib.quantize.model import node_attr

NMS_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


def is_plugin(node) -> bool:
    """A node no ONNX operator set defines: a TensorRT plugin (EfficientNMS_TRT, ...) or another custom op."""
    if node.op_type.endswith("_TRT"):
        return True
    domain = node.domain or ""
    if domain not in ("", "ai.onnx", "ai.onnx.ml", "com.microsoft"):
        return True
    try:
        return not onnx.defs.has(node.op_type, domain)
    except Exception:
        return True


def plugin_nodes(model: onnx.ModelProto) -> list:
    return [n for n in model.graph.node if is_plugin(n)]


def cut_file(model_path, out_dir) -> tuple:
    """(the file calib calibrates and simulates, the plugin nodes): `model_path` itself when it has no plugin
    node, else its graph cut before the plugins written to out_dir/<stem>.cut.onnx."""
    from pathlib import Path

    from calib.io.files import atomic_write_bytes
    from calib.quantize.model import load_model

    proto = load_model(model_path)
    head, plugins = cut_before_plugins(proto, str(model_path))
    if not plugins:
        return Path(model_path), []
    check_known(plugins, str(model_path))
    out = Path(out_dir) / f"{Path(model_path).stem}.cut.onnx"
    atomic_write_bytes(out, head.SerializeToString())
    return out, plugins


def iou_one_to_many(box: np.ndarray, boxes: np.ndarray, floor: float = 1e-12) -> np.ndarray:
    """IoU of one (x1, y1, x2, y2) box with each of `boxes`. A union under `floor` counts as `floor`; with floor 0
    the division is exact and an empty union gives 0 (as TensorRT's NMS plugin below); calib's own NMS
    (calib.evaluate.detect) uses it with the floor."""
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    a = (box[2] - box[0]) * (box[3] - box[1])
    b = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = a + b - inter
    if floor > 0:
        return inter / np.maximum(union, floor)
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _corners(boxes: np.ndarray, box_coding: int) -> np.ndarray:
    if box_coding == 0:  # x1, y1, x2, y2 (either corner order: TensorRT sorts them)
        return np.concatenate([np.minimum(boxes[..., :2], boxes[..., 2:]),
                               np.maximum(boxes[..., :2], boxes[..., 2:])], -1)
    c, wh = boxes[..., :2], boxes[..., 2:]
    return np.concatenate([c - wh / 2, c + wh / 2], -1)


NMS_SELECTED = 4096  # EfficientNMS_TRT's numSelectedBoxes: the candidates its NMS considers, highest scores first


def efficient_nms(boxes: np.ndarray, scores: np.ndarray, score_threshold: float = 0.25, iou_threshold: float = 0.45,
                  max_output_boxes: int = 100, background_class: int = -1, box_coding: int = 0,
                  score_activation: int = 0, class_agnostic: int = 0) -> dict[str, np.ndarray]:
    """TensorRT's EfficientNMS_TRT in numpy, as its CUDA code does it: boxes [N, A, 4] (or [N, A, C, 4], one box per
    class), scores [N, A, C]; the (anchor, class) pairs scoring at least `score_threshold` (background excluded),
    the 4096 highest (numSelectedBoxes) in descending order, each kept unless a kept box of its class (of any class
    with `class_agnostic`) overlaps it with IoU at least `iou_threshold`, until `max_output_boxes` are kept. TensorRT's
    layout: num_detections [N, 1] int32, detection_boxes [N, M, 4] float32 as corners (x1, y1, x2, y2) whatever the
    input coding, detection_scores [N, M], detection_classes [N, M] int32, zero past num_detections."""
    boxes = np.asarray(boxes, np.float32)
    scores = np.asarray(scores, np.float32)
    if score_activation:
        scores = 1.0 / (1.0 + np.exp(-scores))
    n, a, c = scores.shape
    per_class = boxes.ndim == 4
    if boxes.shape[:2] != (n, a) or boxes.shape[-1] != 4 or (per_class and boxes.shape[2] != c):
        raise ModelError(f"EfficientNMS: boxes {list(boxes.shape)} do not fit scores {list(scores.shape)}")
    m = int(max_output_boxes)
    out = {"num_detections": np.zeros((n, 1), np.int32), "detection_boxes": np.zeros((n, m, 4), np.float32),
           "detection_scores": np.zeros((n, m), np.float32), "detection_classes": np.zeros((n, m), np.int32)}
    corners = _corners(boxes, box_coding).astype(np.float64)
    written = boxes if box_coding == 0 else corners  # TensorRT writes corners, corner input as given (unsorted)
    for i in range(n):
        js, ks = np.nonzero(scores[i] >= score_threshold)
        keep = ks != background_class
        js, ks = js[keep], ks[keep]
        order = np.lexsort((ks, js, -scores[i, js, ks]))[:NMS_SELECTED]
        kept: list[tuple] = []  # (score, anchor, class)
        for j, k in zip(js[order], ks[order]):
            if len(kept) >= m:
                break
            b = corners[i, j, k] if per_class else corners[i, j]
            rivals = [(jj, kk) for _, jj, kk in kept if class_agnostic or kk == k]
            if rivals:
                prev = np.array([corners[i, jj, kk] if per_class else corners[i, jj] for jj, kk in rivals])
                if (iou_one_to_many(b, prev, floor=0.0) >= iou_threshold).any():
                    continue
            kept.append((float(scores[i, j, k]), int(j), int(k)))
        out["num_detections"][i, 0] = len(kept)
        for r, (sc, j, k) in enumerate(kept):
            out["detection_boxes"][i, r] = written[i, j, k] if per_class else written[i, j]
            out["detection_scores"][i, r] = sc
            out["detection_classes"][i, r] = k
    return out


def _nms_node(node, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    boxes, scores = tensors[node.input[0]], tensors[node.input[1]]
    if len(node.input) > 2 and node.input[2]:
        raise ModelError(f"{node.name or node.op_type}: EfficientNMS with anchors is not simulated")
    res = efficient_nms(boxes, scores, float(node_attr(node, "score_threshold", 0.25)),
                        float(node_attr(node, "iou_threshold", 0.45)), int(node_attr(node, "max_output_boxes", 100)),
                        int(node_attr(node, "background_class", -1)), int(node_attr(node, "box_coding", 0)),
                        int(node_attr(node, "score_activation", 0)), int(node_attr(node, "class_agnostic", 0)))
    return dict(zip(node.output, (res[k] for k in NMS_OUTPUTS)))


PLUGINS = {"EfficientNMS_TRT": _nms_node}


def check_known(nodes, label: str) -> None:
    for n in nodes:
        if n.op_type not in PLUGINS:
            raise ModelError(f"{label}: node '{n.name or n.output[0]}' ({n.op_type}) is a plugin calib cannot run "
                             f"on the CPU (it knows {', '.join(PLUGINS)})")


def run_plugins(nodes, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The plugin nodes run in order on `tensors` (the cut graph's outputs); returns every tensor they make."""
    values = dict(tensors)
    out = {}
    for node in nodes:
        res = PLUGINS[node.op_type](node, values)
        values.update(res)
        out.update(res)
    return out


def cut_before_plugins(model: onnx.ModelProto, label: str = "model") -> tuple[onnx.ModelProto, list]:
    """(the graph without its plugin nodes, whose outputs are the plugins' inputs and the other graph outputs;
    the plugin nodes in order). Plugin nodes must be last: nothing but plugins may read a plugin's output."""
    plugins = plugin_nodes(model)
    if not plugins:
        return model, []
    made = {o for n in plugins for o in n.output}
    for n in model.graph.node:
        if not is_plugin(n) and made & set(n.input):
            raise ModelError(f"{label}: node '{n.name or n.output[0]}' ({n.op_type}) reads the output of plugin "
                             f"{plugins[0].op_type}; calib cuts the graph before plugins, which must come last")
    head = onnx.ModelProto()
    head.CopyFrom(model)
    del head.graph.node[:]
    head.graph.node.extend(n for n in model.graph.node if not is_plugin(n))
    keep = [o for o in model.graph.output if o.name not in made]
    del head.graph.output[:]
    head.graph.output.extend(keep)
    have = {o.name for o in keep}
    for n in plugins:
        for t in n.input:
            if t and t not in have and t not in made:
                head.graph.output.append(onnx.ValueInfoProto(name=t))
                have.add(t)
    inferred = {}
    try:
        from calib.quantize.model import infer_shapes

        inferred = {v.name: v for v in infer_shapes(head).graph.value_info}
    except Exception:
        pass
    for o in head.graph.output:
        if not o.type.HasField("tensor_type") and o.name in inferred:
            o.CopyFrom(inferred[o.name])
    return head, plugins


def add_efficient_nms(model: onnx.ModelProto, score_threshold: float = 0.25, iou_threshold: float = 0.45,
                      max_output_boxes: int = 100, class_agnostic: bool = False) -> onnx.ModelProto:
    """A copy of a YOLOv8 graph (one output [N, 4 + C, A]: cx, cy, w, h, class scores) ending in a box decoder
    (center-size to corners: `boxes` [N, A, 4]) and `scores` [N, A, C] feeding an EfficientNMS_TRT node, whose four
    outputs (num_detections, detection_boxes, detection_scores, detection_classes) replace the model's output.
    The graph cut before the plugin is then in calib's boxes + scores detection layout."""
    if len(model.graph.output) != 1:
        raise ModelError("add_efficient_nms: the model must have one output [N, 4 + C, A] (YOLOv8)")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    y = g.output[0].name
    dims = [d.dim_value if d.HasField("dim_value") else None for d in g.output[0].type.tensor_type.shape.dim]
    if len(dims) != 3 or not dims[1] or dims[1] <= 4:
        raise ModelError(f"add_efficient_nms: output '{y}' is {dims}, not [N, 4 + C, A]")
    c = dims[1] - 4
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=13)
    if opset < 13:
        raise ModelError(f"add_efficient_nms: opset {opset} (13 or later needed)")

    def const(name, value):
        g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, inputs, output, **attrs):
        g.node.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    t = node("Transpose", [y], "nms_in/transpose", perm=[0, 2, 1])
    start = {k: const(f"nms_in/{k}", np.array([v], np.int64)) for k, v in
             (("s0", 0), ("s2", 2), ("s4", 4), ("end", 4 + c), ("axis", 2))}
    cxcy = node("Slice", [t, start["s0"], start["s2"], start["axis"]], "nms_in/cxcy")
    wh = node("Slice", [t, start["s2"], start["s4"], start["axis"]], "nms_in/wh")
    scores = node("Slice", [t, start["s4"], start["end"], start["axis"]], "scores")
    half = node("Mul", [wh, const("nms_in/half", np.float32(0.5))], "nms_in/half_wh")
    boxes = node("Concat", [node("Sub", [cxcy, half], "nms_in/xy1"), node("Add", [cxcy, half], "nms_in/xy2")],
                 "boxes", axis=2)
    nms = helper.make_node("EfficientNMS_TRT", [boxes, scores], list(NMS_OUTPUTS), name="EfficientNMS_TRT",
                           plugin_version="1", background_class=-1, box_coding=0, score_activation=0,
                           class_agnostic=int(class_agnostic), score_threshold=float(score_threshold),
                           iou_threshold=float(iou_threshold), max_output_boxes=int(max_output_boxes))
    g.node.append(nms)
    batch = g.input[0].type.tensor_type.shape.dim[0]
    b = batch.dim_value if batch.HasField("dim_value") else (batch.dim_param or "batch")
    del g.output[:]
    g.output.extend([
        helper.make_tensor_value_info("num_detections", TensorProto.INT32, [b, 1]),
        helper.make_tensor_value_info("detection_boxes", TensorProto.FLOAT, [b, max_output_boxes, 4]),
        helper.make_tensor_value_info("detection_scores", TensorProto.FLOAT, [b, max_output_boxes]),
        helper.make_tensor_value_info("detection_classes", TensorProto.INT32, [b, max_output_boxes])])
    return m


class PluginModelRunner:
    """A model with plugin nodes on the CPU: the graph before the plugins in ONNX Runtime, then the plugins in
    numpy. run() returns the model's own outputs (and any tensor of the cut graph asked for by name)."""

    backend = "onnxruntime+numpy"

    def __init__(self, model, label: str | None = None, threads: int = 0):
        from calib.quantize.model import load_model
        from calib.runners.onnxruntime import OrtRunner

        proto = model if isinstance(model, onnx.ModelProto) else load_model(model)
        self.label = label or (proto.graph.name if isinstance(model, onnx.ModelProto) else str(model))
        self.head, self.plugins = cut_before_plugins(proto, self.label)
        check_known(self.plugins, self.label)
        self.outputs = [o.name for o in proto.graph.output]
        self.head_outputs = [o.name for o in self.head.graph.output]
        self.runner = OrtRunner(self.head, threads=threads)

    def tensor_names(self) -> list[str]:
        return list(self.outputs)

    def output_names(self) -> list[str]:
        return list(self.outputs)

    def run(self, batch, outputs=None) -> dict[str, np.ndarray]:
        head = self.runner.run(batch)
        values = {**head, **run_plugins(self.plugins, head)}
        names = self.outputs if outputs is None else list(outputs)
        missing = [n for n in names if n not in values]
        if missing:
            raise ModelError(f"{self.label}: '{missing[0]}' is not an output of the model")
        return {n: values[n] for n in names}
