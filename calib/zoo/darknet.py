"""Darknet (.cfg + .weights) to ONNX, with numpy and onnx.helper only.

Supports what YOLOv3 / YOLOv3-tiny use: convolutional (batch norm folded, leaky/linear), maxpool, upsample,
route, shortcut and yolo layers. The yolo heads are decoded inside the graph, so the model's outputs are
`boxes` [N, A, 4] (x1, y1, x2, y2 in input pixels) and `scores` [N, A, classes] (objectness x class
probability), like most deployed YOLO ONNX models.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from calib.errors import ModelError
from calib.io.reading import read_text


def parse_cfg(path: str | Path) -> list[dict]:
    sections: list[dict] = []
    for no, raw in enumerate(read_text(path, 16 << 20, "Darknet cfg", ModelError).splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            sections.append({"type": line.strip("[]").strip()})
        elif "=" in line and sections:
            k, v = line.split("=", 1)
            sections[-1][k.strip()] = v.strip()
        else:
            raise ModelError(f"{path}: line {no}: cannot parse '{line}'")
    if not sections or sections[0]["type"] not in ("net", "network"):
        raise ModelError(f"{path}: a Darknet cfg starts with a [net] section")
    return sections


class _Weights:
    def __init__(self, path: Path):
        data = Path(path).read_bytes()
        major, minor, _rev = np.frombuffer(data[:12], np.int32)
        off = 12 + (8 if major * 10 + minor >= 2 else 4)
        self.values = np.frombuffer(data[off:], np.float32)
        self.pos = 0
        self.path = path

    def take(self, n: int) -> np.ndarray:
        if self.pos + n > self.values.size:
            raise ModelError(f"{self.path}: weights file ends early (cfg wants more values)")
        out = self.values[self.pos:self.pos + n].copy()
        self.pos += n
        return out


class _Graph:
    def __init__(self):
        self.nodes, self.inits = [], []
        self.count = 0

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name


def _yolo_decode(g: _Graph, x: str, sec: dict, idx: int, grid_hw: tuple[int, int], in_hw: tuple[int, int]):
    classes = int(sec.get("classes", 80))
    mask = [int(v) for v in sec["mask"].split(",")]
    anchors = np.array([float(v) for v in sec["anchors"].split(",")], np.float32).reshape(-1, 2)[mask]
    na, (h, w), c = len(mask), grid_hw, 5 + classes
    stride = np.array([in_hw[1] / w, in_hw[0] / h], np.float32)
    p = f"yolo{idx}"
    r = g.node("Reshape", [x, g.const(f"{p}_shape5", np.array([-1, na, c, h, w], np.int64))], f"{p}_reshape")
    t = g.node("Transpose", [r], f"{p}_transpose", perm=[0, 1, 3, 4, 2])
    flat = g.node("Reshape", [t, g.const(f"{p}_shape3", np.array([-1, na * h * w, c], np.int64))], f"{p}_raw")

    def sl(start, end, name):
        return g.node("Slice", [flat, g.const(f"{name}_s", np.array([start], np.int64)),
                                g.const(f"{name}_e", np.array([end], np.int64)),
                                g.const(f"{name}_a", np.array([2], np.int64))], name)

    gy, gx = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    grid = np.broadcast_to(np.stack([gx, gy], -1)[None], (na, h, w, 2)).reshape(1, -1, 2)
    anc = np.broadcast_to(anchors[:, None, None, :], (na, h, w, 2)).reshape(1, -1, 2)
    xy = g.node("Sigmoid", [sl(0, 2, f"{p}_txy")], f"{p}_sxy")
    xy = g.node("Add", [xy, g.const(f"{p}_grid", grid.astype(np.float32))], f"{p}_gxy")
    xy = g.node("Mul", [xy, g.const(f"{p}_stride", stride.reshape(1, 1, 2))], f"{p}_xy")
    wh = g.node("Exp", [sl(2, 4, f"{p}_twh")], f"{p}_ewh")
    wh = g.node("Mul", [wh, g.const(f"{p}_anchors", anc.astype(np.float32))], f"{p}_wh")
    half = g.node("Mul", [wh, g.const(f"{p}_half", np.array(0.5, np.float32))], f"{p}_halfwh")
    x1y1 = g.node("Sub", [xy, half], f"{p}_x1y1")
    x2y2 = g.node("Add", [xy, half], f"{p}_x2y2")
    boxes = g.node("Concat", [x1y1, x2y2], f"{p}_boxes", axis=2)
    obj = g.node("Sigmoid", [sl(4, 5, f"{p}_tobj")], f"{p}_obj")
    cls = g.node("Sigmoid", [sl(5, c, f"{p}_tcls")], f"{p}_cls")
    scores = g.node("Mul", [obj, cls], f"{p}_scores")
    return boxes, scores, classes


def darknet_to_onnx(cfg: str | Path, weights: str | Path, opset: int = 13) -> onnx.ModelProto:
    """Convert a Darknet model; the input `images` is [N, 3, H, W] RGB scaled to [0, 1]."""
    secs = parse_cfg(cfg)
    net = secs[0]
    H, W, C = int(net.get("height", 416)), int(net.get("width", 416)), int(net.get("channels", 3))
    wts = _Weights(Path(weights))
    g = _Graph()
    outs: list[str] = []  # output tensor of each layer
    shapes: list[tuple[int, int, int]] = []  # (channels, h, w) of each layer
    x, shape = "images", (C, H, W)
    heads = []
    for i, s in enumerate(secs[1:]):
        kind = s["type"]
        name = f"layer{i}_{kind}"
        if kind == "convolutional":
            f, k, st = int(s["filters"]), int(s["size"]), int(s.get("stride", 1))
            pad = k // 2 if int(s.get("pad", 0)) else int(s.get("padding", 0))
            bn = int(s.get("batch_normalize", 0))
            cin = shape[0]
            if bn:
                beta, gamma, mean, var = (wts.take(f) for _ in range(4))
            else:
                bias = wts.take(f)
            w = wts.take(f * cin * k * k).reshape(f, cin, k, k)
            if bn:  # darknet normalises with (x - mean) / (sqrt(var) + 1e-6)
                a = gamma / (np.sqrt(var) + 1e-6)
                w = w * a[:, None, None, None]
                bias = beta - mean * a
            x = g.node("Conv", [x, g.const(f"{name}.weight", w.astype(np.float32)),
                                g.const(f"{name}.bias", bias.astype(np.float32))], name,
                       kernel_shape=[k, k], strides=[st, st], pads=[pad] * 4)
            shape = (f, (shape[1] + 2 * pad - k) // st + 1, (shape[2] + 2 * pad - k) // st + 1)
            act = s.get("activation", "linear")
            if act == "leaky":
                x = g.node("LeakyRelu", [x], f"{name}_leaky", alpha=0.1)
            elif act != "linear":
                raise ModelError(f"{cfg}: layer {i}: activation '{act}' is not supported")
        elif kind == "maxpool":
            k, st = int(s["size"]), int(s.get("stride", 1))
            p = int(s.get("padding", k - 1))  # darknet pads size-1 at the right and bottom
            x = g.node("MaxPool", [x], name, kernel_shape=[k, k], strides=[st, st], pads=[0, 0, p, p])
            shape = (shape[0], (shape[1] + p - k) // st + 1, (shape[2] + p - k) // st + 1)
        elif kind == "upsample":
            st = int(s.get("stride", 2))
            scales = g.const(f"{name}_scales", np.array([1, 1, st, st], np.float32))
            x = g.node("Resize", [x, "", scales], name, mode="nearest")
            shape = (shape[0], shape[1] * st, shape[2] * st)
        elif kind == "route":
            refs = [int(v) for v in s["layers"].split(",")]
            refs = [r if r >= 0 else i + r for r in refs]
            if len(refs) == 1:
                x, shape = outs[refs[0]], shapes[refs[0]]
            else:
                x = g.node("Concat", [outs[r] for r in refs], name, axis=1)
                shape = (sum(shapes[r][0] for r in refs), shapes[refs[0]][1], shapes[refs[0]][2])
        elif kind == "shortcut":
            r = int(s["from"])
            r = r if r >= 0 else i + r
            x = g.node("Add", [x, outs[r]], name)
        elif kind == "yolo":
            heads.append(_yolo_decode(g, x, s, len(heads), shape[1:], (H, W)))
        else:
            raise ModelError(f"{cfg}: layer {i}: [{kind}] is not supported")
        outs.append(x)
        shapes.append(shape)
    if wts.pos != wts.values.size:
        raise ModelError(f"{weights}: {wts.values.size - wts.pos} values left over (cfg and weights differ)")
    if not heads:
        raise ModelError(f"{cfg}: no [yolo] layers")
    classes = heads[0][2]
    g.node("Concat", [h[0] for h in heads], "boxes", axis=1)
    g.node("Concat", [h[1] for h in heads], "scores", axis=1)
    graph = helper.make_graph(
        g.nodes, Path(cfg).stem,
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", C, H, W])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", None, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", None, classes])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="calib")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
