"""Activation smoothing for MatMul/Gemm layers (SmoothQuant, Xiao et al. 2023): where a few input channels of a
layer's activation are far larger than the rest (transformers' outlier channels), one per-tensor INT8 scale rounds
the rest away. Each channel k is divided by s_k = max|x_k|^alpha / max|W_k|^(1 - alpha) and the weights' row k
multiplied by it: the product is unchanged in FP32, the activation's channels are level, the weights (quantized
per output channel) take the range. The division is a Mul by a constant vector before the layer (TensorRT builds
it unchanged); the smoothed model is calibrated again."""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper

from calib.quantize.model import constant_value, initializers_not_inputs
from calib.search.fp32_pass import fp32_tensors

log = logging.getLogger(__name__)
SUFFIX = ".smoothed"


def candidates(model: onnx.ModelProto, layers) -> list:
    """MatMul (constant 2-d B) and Gemm (A not transposed) among `layers`, activation first."""
    want, out = set(layers), []
    for n in model.graph.node:
        if (n.name or n.output[0]) not in want or n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
            continue
        w = constant_value(model, n.input[1])
        if w is None or np.ndim(w) != 2 or constant_value(model, n.input[0]) is not None:
            continue
        if n.op_type == "Gemm" and any(a.name == "transA" and a.i for a in n.attribute):
            continue
        out.append(n)
    return out


def _rows_b(node, w: np.ndarray) -> np.ndarray:
    """B as [K, N] (a Gemm's transB undone)."""
    return w.T if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute) else w


def channel_maxima(model, nodes, batches, layout=None) -> dict:
    """input tensor -> max |x| per channel of its last axis over `batches`, one FP32 pass."""
    tensors = list(dict.fromkeys(n.input[0] for n in nodes))
    out: dict = {}
    for got in fp32_tensors(model, tensors, batches, layout):
        for t in tensors:
            x = np.abs(np.asarray(got[t], np.float64))
            m = x.reshape(-1, x.shape[-1]).max(0)
            out[t] = np.maximum(out[t], m) if t in out else m
    return out


def smooth(model: onnx.ModelProto, batches, layers, layout=None, alpha: float = 0.5, outlier: float = 8.0):
    """(the smoothed model, {layer: largest channel max / median before}) for the layers whose activation has
    outlier channels (a channel's max above `outlier` x the median channel's)."""
    model = initializers_not_inputs(model)
    nodes = candidates(model, layers)
    if not nodes:
        return model, {}
    maxima = channel_maxima(model, nodes, batches, layout)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    index = {(n.name or n.output[0]): i for i, n in enumerate(m.graph.node)}
    done, new_nodes = {}, []
    for n in nodes:
        xm = maxima.get(n.input[0])
        w = np.asarray(constant_value(model, n.input[1]), np.float64)
        b = _rows_b(n, w)
        if xm is None or xm.shape[0] != b.shape[0]:
            continue
        med = float(np.median(xm))
        ratio = float(xm.max() / med) if med > 0 else float("inf")
        if ratio < outlier:
            continue
        wm = np.abs(b).max(1)
        s = np.where((xm > 0) & (wm > 0), xm ** alpha / np.maximum(wm, 1e-12) ** (1 - alpha), 1.0)
        s = np.clip(s, 1e-5, 1e5)
        layer = n.name or n.output[0]
        b2 = b * s[:, None]
        w2 = b2.T if b is not w else b2
        m.graph.initializer.append(numpy_helper.from_array(w2.astype(np.float32), layer + SUFFIX))
        m.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), layer + SUFFIX + ".inv"))
        node = m.graph.node[index[layer]]
        new_nodes.append((index[layer], helper.make_node("Mul", [node.input[0], layer + SUFFIX + ".inv"],
                                                         [layer + SUFFIX + ".input"], name=layer + SUFFIX + ".mul")))
        node.input[0] = layer + SUFFIX + ".input"
        node.input[1] = layer + SUFFIX
        done[layer] = ratio
    for i, node in sorted(new_nodes, key=lambda p: -p[0]):  # each Mul right before its layer
        m.graph.node.insert(i, node)
    log.info("smoothing: %d of %d MatMul/Gemm layers with outlier channels", len(done), len(nodes))
    return m, done
