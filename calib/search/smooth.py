"""Activation smoothing for MatMul/Gemm layers (SmoothQuant, Xiao et al. 2023): where a few input channels of a
layer's activation are far larger than the rest (transformers' outlier channels), one per-tensor INT8 scale rounds
the rest away. Each channel k is divided by s_k = max|x_k|^alpha / max|W_k|^(1 - alpha) and the weights' row k
multiplied by it: the product is unchanged in FP32, the activation's channels are level, the weights (quantized
per output channel) take the range. The division is a Mul by a constant vector before the layer (TensorRT builds
it unchanged); the smoothed model is calibrated again.

alpha is chosen per layer (as Intel Neural Compressor's auto-alpha does): the one of ALPHAS whose INT8 simulation
of the layer (activation per tensor at its max, weights per output channel, symmetric) gives the smallest output
error on a sample of the calibration rows, the scales set on one half of them and the error measured on the other
(set and measured on the same rows, a classifier head's Gemm, 12 to 48 rows of one image each, chose alphas that
lowered its error on held-out images by 1 to 13 dB); a layer is smoothed only where that error falls by GAIN_DB
or more, and one with fewer than MIN_ROWS rows is left alone. One
alpha does not fit every layer: 0.5 (the paper's) moves the weights' uneven rows into the activation, and on a
layer whose weight rows are less level than its input channels (MiniLM's FFN output, after GELU) it raises the
activation's error; 0.95 (NNCF's for transformers) suits most of MiniLM's layers, 0.8 some."""
from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from calib.quantize.model import constant_value, initializers_not_inputs
from calib.search.fp32_pass import fp32_tensors

log = logging.getLogger(__name__)
SUFFIX = ".smoothed"
ALPHAS = (0.5, 0.65, 0.8, 0.9, 0.95)
GAIN_DB = 1.0  # the least fall of a layer's INT8 output error (dB) that is worth a Mul before it
ROWS = 1024  # calibration rows (tokens, or samples) per activation the errors are measured on
MIN_ROWS = 64  # fewer rows (a classifier head's Gemm: one per image) tell no alpha from another


class Smoothed(NamedTuple):
    alpha: float
    before_db: float  # the layer's INT8 output SQNR unsmoothed
    after_db: float  # and smoothed with alpha


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


def channel_stats(model, nodes, batches, layout=None, rows: int = ROWS) -> tuple[dict, dict]:
    """(input tensor -> max |x| per channel of its last axis over `batches`, input tensor -> up to `rows` rows
    [rows, channels] taken evenly from every batch), one FP32 pass."""
    batches = list(batches)
    tensors = list(dict.fromkeys(n.input[0] for n in nodes))
    per_batch = -(-rows // max(len(batches), 1))
    maxima: dict = {}
    kept: dict = {t: [] for t in tensors}
    for got in fp32_tensors(model, tensors, batches, layout):
        for t in tensors:
            x = np.asarray(got[t], np.float32)
            x = x.reshape(-1, x.shape[-1])
            m = np.abs(x).max(0).astype(np.float64)
            maxima[t] = np.maximum(maxima[t], m) if t in maxima else m
            kept[t].append(x[np.unique(np.linspace(0, len(x) - 1, min(per_batch, len(x))).astype(int))])
    return maxima, {t: np.concatenate(v)[:rows] for t, v in kept.items() if v}


def scales(xm: np.ndarray, wm: np.ndarray, alpha: float) -> np.ndarray:
    """s_k = max|x_k|^alpha / max|W_k|^(1 - alpha) (1 where either is 0), kept within [1e-5, 1e5]."""
    s = np.where((xm > 0) & (wm > 0), xm ** alpha / np.maximum(wm, 1e-12) ** (1 - alpha), 1.0)
    return np.clip(s, 1e-5, 1e5)


def _int8(v: np.ndarray, amax) -> np.ndarray:
    step = np.where(amax > 0, amax, 1.0) / 127.0
    return np.clip(np.rint(v / step), -127, 127) * step


def output_sqnr(x: np.ndarray, b: np.ndarray, xm: np.ndarray, s: np.ndarray) -> float:
    """SQNR (dB) of x @ b in INT8 after smoothing by s: x / s per tensor at its max over the calibration pass
    (max(xm / s)), b * s per output channel (column), both symmetric."""
    ref = x @ b
    xs, bs = x / s, b * s[:, None]
    got = _int8(xs, float((xm / s).max())) @ _int8(bs, np.abs(bs).max(0, keepdims=True))
    noise = float(np.mean((got - ref) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(max(float(np.mean(ref ** 2)), 1e-30) / noise)


def held_out_sqnr(x: np.ndarray, b: np.ndarray, alpha: float | None) -> float:
    """output_sqnr with the scales (channel maxima, the activation's amax) set on one half of the rows and the error
    measured on the other, both ways, averaged: smoothing sets every channel at its calibration maximum, so rows
    beyond it (as deployment brings) are what tells a good alpha from one that only fits the rows it was set on."""
    wm = np.abs(b).max(1)
    halves = (x[0::2], x[1::2])
    got = []
    for fit, test in (halves, halves[::-1]):
        xm = np.abs(fit).max(0)
        got.append(output_sqnr(test, b, xm, np.ones_like(xm) if alpha is None else scales(xm, wm, alpha)))
    return float(np.mean(got))


def choose(x: np.ndarray, b: np.ndarray, alphas=ALPHAS) -> Smoothed:
    """The alpha of `alphas` with the highest held-out output SQNR, with that SQNR unsmoothed and smoothed by it;
    with fewer than MIN_ROWS rows, no alpha (after_db = before_db: nothing to gain that the rows could show)."""
    x, b = np.asarray(x, np.float64), np.asarray(b, np.float64)
    before = held_out_sqnr(x, b, None)
    if len(x) < MIN_ROWS:
        return Smoothed(max(alphas), before, before)
    after, alpha = max((held_out_sqnr(x, b, a), a) for a in alphas)
    return Smoothed(alpha, before, after)


def smooth(model: onnx.ModelProto, batches, layers, layout=None, alphas=ALPHAS, gain_db: float = GAIN_DB):
    """(the smoothed model, {layer: Smoothed}) for the layers whose INT8 output error smoothing lowers by
    `gain_db` or more, each with its own alpha of `alphas`."""
    model = initializers_not_inputs(model)
    nodes = candidates(model, layers)
    if not nodes:
        return model, {}
    maxima, rows = channel_stats(model, nodes, batches, layout)
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
        got = choose(rows[n.input[0]], b, alphas)
        if got.after_db < got.before_db + gain_db:
            continue
        s = scales(xm, np.abs(b).max(1), got.alpha)
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
        done[layer] = got
    for i, node in sorted(new_nodes, key=lambda p: -p[0]):  # each Mul right before its layer
        m.graph.node.insert(i, node)
    log.info("smoothing: %d of %d MatMul/Gemm layers", len(done), len(nodes))
    return m, done


def alphas(done: dict) -> str:
    """The alphas chosen, e.g. '0.8 (7), 0.9 (9), 0.95 (20)'."""
    got = sorted(d.alpha for d in done.values())
    return ", ".join(f"{a:g} ({got.count(a)})" for a in sorted(set(got)))


def gain_db(done: dict) -> float:
    return float(np.median([d.after_db - d.before_db for d in done.values()]))
