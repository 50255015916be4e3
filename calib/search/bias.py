"""Bias correction: INT8 shifts the mean of a quantized layer's output (weights rounded one way more than the
other, activations clipped and rounded); the shift per output channel is taken off the layer's bias (a bias is added
where the layer has none). The FP32 model with the corrected biases computes what the INT8 engine then computes on
average: TensorRT builds it unchanged (its Q/DQ model, or its cache beside it).

The shift is each layer's own, measured locally as in data-free quantization's bias correction (Nagel et al.,
2019) but on the calibration samples: E[W_q Q(x)] - E[W x] per output channel, from the per-channel means of the
layer's FP32 input x and of that input rounded with its scale (one FP32 pass), and the weights rounded per output
channel as the Q/DQ model rounds them. Shifts measured on the INT8 model itself would count an upstream layer's
shift again in every layer after it (a deep detector's corrections then diverge)."""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import numpy_helper

from calib.quantize.model import constant_value, initializers_not_inputs
from calib.quantize.qdq import activation_scale, weight_scales
from calib.quantize.ties import tie_amax
from calib.search.fp32_pass import fp32_tensors

log = logging.getLogger(__name__)
OPS = ("Conv", "Gemm")
SUFFIX = ".bias_corrected"
ADJUSTED = (SUFFIX, ".adarounded")  # the initializers the INT8-only steps add


def correctable(model: onnx.ModelProto, layers, amax: dict | None = None) -> list:
    """The nodes among `layers` whose output channels a bias can shift: Conv (channels on axis 1) and Gemm
    without a transposed A (the last axis), with constant weights (and, with `amax`, a scale for the input)."""
    want = set(layers)
    out = []
    for node in model.graph.node:
        if (node.name or node.output[0]) in want and node.op_type in OPS and len(node.input) > 1 \
                and constant_value(model, node.input[1]) is not None \
                and not any(a.name == "transA" and a.i for a in node.attribute) \
                and (amax is None or node.input[0] in amax):
            out.append(node)
    return out


def _rounded(x: np.ndarray, amax: float) -> np.ndarray:
    scale = activation_scale(amax)
    if scale is None:
        return x
    return np.clip(np.rint(x / scale), -127, 127) * scale  # calib's Q/DQ: symmetric, zero point 0


def _weights_q(w: np.ndarray, axis: int) -> np.ndarray:
    s = weight_scales(w, axis)
    shape = [1] * w.ndim
    shape[axis] = -1
    s = s.reshape(shape)
    return np.clip(np.rint(w / s), -127, 127) * s


def _attr(node, name, default):
    return next((a.i for a in node.attribute if a.name == name), default)


def _shift(model, node, mean_x: np.ndarray, mean_q: np.ndarray, w_fp32=None) -> np.ndarray | None:
    """E[W_q Q(x)] - E[W x] per output channel, the input taken uniform over its spatial positions (W: `w_fp32`
    where the model's weights are adjusted already, e.g. rounded by AdaRound)."""
    wm = np.asarray(constant_value(model, node.input[1]), np.float64)
    w = wm if w_fp32 is None else np.asarray(w_fp32, np.float64)
    if node.op_type == "Conv":
        g = _attr(node, "group", 1) or 1
        cout, cin_g = w.shape[0], w.shape[1]
        if mean_x.shape[0] != cin_g * g:
            return None
        wq = _weights_q(wm, 0)
        ws, wqs = w.reshape(cout, cin_g, -1).sum(2), wq.reshape(cout, cin_g, -1).sum(2)
        grp = np.arange(cout) // (cout // g)  # output channel -> its group's input channels
        idx = grp[:, None] * cin_g + np.arange(cin_g)[None, :]
        return (wqs * mean_q[idx]).sum(1) - (ws * mean_x[idx]).sum(1)
    b = w.T if _attr(node, "transB", 0) else w  # [K, N]
    if mean_x.shape[0] != b.shape[0]:
        return None
    bq = _weights_q(wm.T if _attr(node, "transB", 0) else wm, 1)
    alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.0)
    return alpha * (mean_q @ bq - mean_x @ b)


def _channels(model, node) -> int:
    w = constant_value(model, node.input[1])
    if node.op_type == "Conv":
        return int(w.shape[0])
    return int(w.shape[0] if _attr(node, "transB", 0) else w.shape[1])


def _biases(model, nodes) -> dict:
    out = {}
    for node in nodes:
        b = constant_value(model, node.input[2]) if len(node.input) > 2 and node.input[2] else None
        out[node.output[0]] = np.zeros(_channels(model, node), np.float32) if b is None else \
            np.asarray(b, np.float32).reshape(-1).copy()
    return out


def with_biases(model: onnx.ModelProto, biases: dict) -> onnx.ModelProto:
    """A copy of `model` whose layers (by output tensor) read the given biases from new initializers."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for node in g.node:
        if node.output[0] in biases:
            name = (node.name or node.output[0]) + SUFFIX
            g.initializer.append(numpy_helper.from_array(biases[node.output[0]].astype(np.float32), name))
            while len(node.input) < 3:
                node.input.append("")
            node.input[2] = name
    return m


def _input_means(model, tensors: list, amax: dict, ops: dict, batches, layout) -> dict:
    """tensor -> (per-channel mean of x, of x rounded with its scale) over `batches`, one FP32 run."""
    sums: dict = {}
    n = 0
    for got in fp32_tensors(model, tensors, batches, layout):
        for t in tensors:
            x = np.asarray(got[t], np.float64)
            axis = 1 if ops[t] == "Conv" else x.ndim - 1
            q = _rounded(x, amax[t])
            red = tuple(i for i in range(x.ndim) if i != axis)
            cnt = x.size // x.shape[axis]
            s = sums.setdefault(t, [0.0, 0.0, 0])
            s[0] = s[0] + x.sum(red)
            s[1] = s[1] + q.sum(red)
            s[2] += cnt
        n += 1
    return {t: (s[0] / max(s[2], 1), s[1] / max(s[2], 1)) for t, s in sums.items()}


def correct(model: onnx.ModelProto, amax: dict, batches, layers, layout=None, reference=None):
    """(the FP32 model with corrected biases, {layer: largest shift taken off}) for the `layers` that can take
    one; `amax` the activation scales (ties applied as in the Q/DQ model), `batches` the calibration feeds
    (canonical layout, `layout` the model's); `reference`: the model with the FP32 weights, where `model`'s are
    adjusted already (node for node)."""
    model = initializers_not_inputs(model)
    amax = tie_amax(model, amax, qdq=True)
    nodes = correctable(model, layers, amax)
    if not nodes:
        return model, {}
    ops = {n.input[0]: n.op_type for n in nodes}
    means = _input_means(model, list(ops), amax, ops, batches, layout)
    biases = _biases(model, nodes)
    done = {}
    ref_w = {}
    if reference is not None:
        for n, r in zip(model.graph.node, reference.graph.node):
            ref_w[n.output[0]] = constant_value(reference, r.input[1]) if len(r.input) > 1 else None
    for node in nodes:
        if node.input[0] not in means:
            continue
        shift = _shift(model, node, *means[node.input[0]], ref_w.get(node.output[0]))
        t = node.output[0]
        if shift is None or shift.shape[0] != biases[t].shape[0] or not np.all(np.isfinite(shift)):
            continue  # a layout calib cannot read: left as it is
        biases[t] = (biases[t] - shift).astype(np.float32)
        done[node.name or t] = float(np.abs(shift).max())
    log.info("bias correction: %d layers, largest shift %.3g", len(done), max(done.values(), default=0.0))
    return with_biases(model, {t: b for t, b in biases.items()
                               if any((n.name or n.output[0]) in done and n.output[0] == t for n in nodes)}), done


def revert(corrected: onnx.ModelProto, original: onnx.ModelProto, layers) -> onnx.ModelProto:
    """`corrected` with the `layers` given back their inputs in `original` (the model before the INT8-only steps,
    bias correction and learned rounding, node for node): a layer kept in float computes what FP32 computes."""
    names = set(layers)
    if not names:
        return corrected
    m = onnx.ModelProto()
    m.CopyFrom(corrected)
    for node, old in zip(m.graph.node, original.graph.node):
        if (node.name or node.output[0]) in names and list(node.input) != list(old.input):
            del node.input[:]
            node.input.extend(old.input)
    used = {i for n in m.graph.node for i in n.input}
    keep = [t for t in m.graph.initializer if not t.name.endswith(ADJUSTED) or t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    return m
