"""Tiny detectors for the head and postprocess tests: each output is a fixed array (plus 0 x the input's mean, so
that the graph has one real activation path), and raw YOLOX-style outputs with known boxes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def fixed_outputs(path: Path, outputs: dict, hw=(64, 64)) -> Path:
    """input `images` [N, 3, H, W] -> one output per entry of `outputs` (name -> array [1, ...]), broadcast to N."""
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=0, axes=[1, 2, 3], name="mean"),
             helper.make_node("Mul", ["m", "zero"], ["z"], name="zero_mul")]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero")]
    outs = []
    for k, (name, value) in enumerate(outputs.items()):
        value = np.asarray(value, np.float32)
        axes = list(range(1, value.ndim))
        inits += [numpy_helper.from_array(value, f"c{k}"), numpy_helper.from_array(np.array(axes, np.int64),
                                                                                   f"ax{k}")]
        nodes += [helper.make_node("Unsqueeze", ["z", f"ax{k}"], [f"z{k}"], name=f"unsq{k}"),
                  helper.make_node("Add", [f"z{k}", f"c{k}"], [name], name=f"out{k}")]
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", *value.shape[1:]]))
    g = helper.make_graph(nodes, "fixed", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                         ["N", 3, *hw])], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def yolox_raw(hw=(64, 64), classes=2, boxes=()) -> np.ndarray:
    """A raw YOLOX head [1, A, 5 + C] (A: one anchor per cell of strides 8/16/32) with background everywhere
    (objectness 0.01) and each of `boxes` = (stride, cell_x, cell_y, dx, dy, log_w, log_h, obj, class, score)."""
    sizes = [(hw[0] // s, hw[1] // s) for s in (8, 16, 32)]
    y = np.zeros((1, sum(h * w for h, w in sizes), 5 + classes), np.float32)
    y[..., 4] = 0.01
    y[..., 5:] = 0.01
    for stride, cx, cy, dx, dy, lw, lh, obj, cls, score in boxes:
        level = (8, 16, 32).index(stride)
        first = sum(h * w for h, w in sizes[:level])
        i = first + cy * sizes[level][1] + cx
        y[0, i, :4] = (dx, dy, lw, lh)
        y[0, i, 4] = obj
        y[0, i, 5 + cls] = score
    return y


def yolox_demo_postprocess(outputs: np.ndarray, img_size, p6: bool = False) -> np.ndarray:
    """YOLOX's own yolox/utils/demo_utils.py demo_postprocess (Apache-2.0), as the reference of the grid decode."""
    grids = []
    expanded_strides = []
    strides = [8, 16, 32] if not p6 else [8, 16, 32, 64]
    hsizes = [img_size[0] // stride for stride in strides]
    wsizes = [img_size[1] // stride for stride in strides]
    for hsize, wsize, stride in zip(hsizes, wsizes, strides):
        xv, yv = np.meshgrid(np.arange(wsize), np.arange(hsize))
        grid = np.stack((xv, yv), 2).reshape(1, -1, 2)
        grids.append(grid)
        shape = grid.shape[:2]
        expanded_strides.append(np.full((*shape, 1), stride))
    grids = np.concatenate(grids, 1)
    expanded_strides = np.concatenate(expanded_strides, 1)
    outputs = outputs.copy()
    outputs[..., :2] = (outputs[..., :2] + grids) * expanded_strides
    outputs[..., 2:4] = np.exp(outputs[..., 2:4]) * expanded_strides
    return outputs
