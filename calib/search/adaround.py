"""Learned weight rounding (AdaRound, Nagel et al. 2020), on the CPU: per layer, each weight rounded up or down,
not to the nearest, so that the layer's output on its FP32 inputs stays closest to FP32's.

For a layer Y = W X (a Conv's patches, a Gemm's rows), the output error of weights W' is tr((W' - W) G (W' - W)^T)
with G = X X^T, the Gram matrix of its inputs: gathered once from one FP32 pass over the calibration samples (at
most `rows` input rows per batch), the optimisation never runs the model again. The rounding is a rectified sigmoid
h(V) per weight, pushed to 0 or 1 by an annealed regulariser (Adam on V), then made hard. The chosen integers are
written as weights on the INT8 grid (W' = s x integer, the per-channel scale s unchanged: the largest weight keeps
its 127), so that TensorRT, quantizing them per channel again, gets the same integers: the adjusted FP32 model
builds unchanged. Layers whose Gram matrix would cost more than `max_cost` multiply-adds per step keep nearest
rounding."""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx
from onnx import numpy_helper

from calib.quantize.model import constant_value, initializers_not_inputs
from calib.quantize.qdq import weight_scales
from calib.search.fp32_pass import fp32_tensors

log = logging.getLogger(__name__)
SUFFIX = ".adarounded"
ZETA, GAMMA = 1.1, -0.1


def _attr(node, name, default):
    a = next((a for a in node.attribute if a.name == name), None)
    if a is None:
        return default
    return list(a.ints) if a.ints else a.i


def layers_for(model: onnx.ModelProto, layers) -> list:
    """Conv (group 1, 2-d) and Gemm (A not transposed) among `layers` with constant weights."""
    want, out = set(layers), []
    for n in model.graph.node:
        if (n.name or n.output[0]) not in want or len(n.input) < 2 or constant_value(model, n.input[1]) is None:
            continue
        w = constant_value(model, n.input[1])
        if n.op_type == "Conv" and w.ndim == 4 and (_attr(n, "group", 1) or 1) == 1 \
                and _attr(n, "auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET", 0):
            out.append(n)
        elif n.op_type == "Gemm" and not _attr(n, "transA", 0):
            out.append(n)
    return out


def _matrix(model, node) -> np.ndarray:
    """The weights as [outputs, inputs] in the order of the input rows `_rows` makes."""
    w = np.asarray(constant_value(model, node.input[1]), np.float64)
    if node.op_type == "Conv":
        return w.reshape(w.shape[0], -1)
    return w if _attr(node, "transB", 0) else w.T


def _rows(x: np.ndarray, node, w_shape) -> np.ndarray:
    """The layer's input rows: a Conv's patches [N * Ho * Wo, C * kh * kw], a Gemm's input as it is."""
    if node.op_type != "Conv":
        return x.reshape(-1, x.shape[-1])
    kh, kw = w_shape[2:]
    pads = _attr(node, "pads", [0, 0, 0, 0]) or [0, 0, 0, 0]
    sh, sw = (_attr(node, "strides", [1, 1]) or [1, 1])
    dh, dw = (_attr(node, "dilations", [1, 1]) or [1, 1])
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    win = np.lib.stride_tricks.sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # [N, C, Ho, Wo, kh, kw]
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(-1, x.shape[1] * kh * kw)


def grams(model, nodes, batches, layout=None, rows: int = 2048, seed: int = 0) -> dict:
    """node output -> G = X^T X over (at most `rows` sampled) input rows of every batch, one FP32 pass."""
    rng = np.random.default_rng(seed)
    tensors = list(dict.fromkeys(n.input[0] for n in nodes))
    out: dict = {}
    for got in fp32_tensors(model, tensors, batches, layout):
        for n in nodes:
            x = _rows(np.asarray(got[n.input[0]], np.float64), n, constant_value(model, n.input[1]).shape)
            if x.shape[0] > rows:
                x = x[rng.choice(x.shape[0], rows, replace=False)]
            out[n.output[0]] = out.get(n.output[0], 0.0) + x.T @ x
    return out


def _h(v):
    return np.clip(1.0 / (1.0 + np.exp(-v)) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


def learn(w: np.ndarray, g: np.ndarray, steps: int = 300, lam: float = 0.01, lr: float = 0.05) -> np.ndarray:
    """The weights of `w` [outputs, inputs] rounded per output channel's scale (up or down) so as to minimise the
    output error under the Gram matrix `g`: Adam on the rectified-sigmoid rounding, in units of one rounding step
    and of the inputs' mean energy, the regulariser's beta annealed 20 -> 2 after a warm-up. Nearest rounding
    where it is no worse."""
    s = weight_scales(w, 0).astype(np.float64).reshape(-1, 1)
    ws = w / s
    base = np.floor(ws)
    rest = np.clip(ws - base, 0.01, 0.99)
    gn = g / max(float(np.mean(np.diag(g))), 1e-30)
    v = -np.log((ZETA - GAMMA) / (rest - GAMMA) - 1.0)
    m1, m2 = np.zeros_like(v), np.zeros_like(v)
    warm = steps // 5
    for t in range(1, steps + 1):
        sig = 1.0 / (1.0 + np.exp(-v))
        h = np.clip(sig * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)
        grad_h = 2.0 * ((base + h - ws) @ gn)
        if t > warm:  # the rounding regulariser after a warm-up on the error alone
            beta = 20.0 - (20.0 - 2.0) * (t - warm) / (steps - warm)
            u = 2.0 * h - 1.0
            grad_h = grad_h - lam * 2.0 * beta * np.abs(u) ** (beta - 1.0) * np.sign(u)
        grad_v = grad_h * sig * (1.0 - sig) * (ZETA - GAMMA) * ((h > 0.0) & (h < 1.0))
        m1 = 0.9 * m1 + 0.1 * grad_v
        m2 = 0.999 * m2 + 0.001 * grad_v ** 2
        v -= lr * (m1 / (1 - 0.9 ** t)) / (np.sqrt(m2 / (1 - 0.999 ** t)) + 1e-8)
    q = np.clip(base + (_h(v) >= 0.5), -127, 127)
    nearest = np.clip(np.rint(ws), -127, 127)
    err = lambda qq: float(np.einsum("ij,jk,ik->", qq - ws, gn, qq - ws))  # noqa: E731
    return (q if err(q) < err(nearest) else nearest) * s


def adaround(model: onnx.ModelProto, batches, layers, layout=None, max_cost: float = 2e8, steps: int = 200,
             deadline: float | None = None, gram_bytes: int = 256 << 20):
    """(the model with learned-rounding weights on the INT8 grid, {layer: output error learned / nearest}). The
    layers go in groups whose Gram matrices fit `gram_bytes`, one FP32 pass each."""
    model = initializers_not_inputs(model)
    nodes = [n for n in layers_for(model, layers)
             if _matrix(model, n).shape[0] * _matrix(model, n).shape[1] ** 2 <= max_cost]
    if not nodes:
        return model, {}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    index = {(n.name or n.output[0]): i for i, n in enumerate(m.graph.node)}
    done = {}
    for group in _groups(model, nodes, gram_bytes):
        if deadline is not None and time.monotonic() > deadline:
            break
        g = grams(model, group, batches, layout)  # one FP32 pass per group: the Gram matrices held stay bounded
        _learn_group(model, m, group, g, index, done, steps, deadline)
    log.info("learned rounding: %d layers, output error %.2f of nearest rounding's (median)", len(done),
             float(np.median(list(done.values()))) if done else 1.0)
    return m, done


def _groups(model, nodes, limit: int) -> list[list]:
    """`nodes` in consecutive groups whose Gram matrices (float64, inputs^2 each) take at most `limit` bytes."""
    out, size = [[]], 0
    for n in nodes:
        b = 8 * _matrix(model, n).shape[1] ** 2
        if out[-1] and size + b > limit:
            out.append([])
            size = 0
        out[-1].append(n)
        size += b
    return out


def _learn_group(model, m, group, g: dict, index: dict, done: dict, steps: int, deadline) -> None:
    for n in group:
        if deadline is not None and time.monotonic() > deadline:
            return
        w = _matrix(model, n)
        gg = g.pop(n.output[0])
        new = learn(w, gg, steps)
        s = weight_scales(w, 0).astype(np.float64).reshape(-1, 1)
        nearest = np.clip(np.rint(w / s), -127, 127) * s
        e_new = float(np.einsum("ij,jk,ik->", new - w, gg, new - w))
        e_near = float(np.einsum("ij,jk,ik->", nearest - w, gg, nearest - w))
        shape = constant_value(model, n.input[1]).shape
        arr = new.reshape(shape) if n.op_type == "Conv" else (new if _attr(n, "transB", 0) else new.T)
        name = (n.name or n.output[0]) + SUFFIX
        m.graph.initializer.append(numpy_helper.from_array(arr.astype(np.float32), name))
        m.graph.node[index[n.name or n.output[0]]].input[1] = name
        done[n.name or n.output[0]] = e_new / e_near if e_near > 0 else 1.0
