"""Bias correction: INT8 shifts the mean of a quantized layer's output (weights rounded one way more than the
other, activations clipped); the shift per output channel, measured on the calibration samples against FP32, is
taken off the layer's bias (a bias is added where the layer has none). The FP32 model with the corrected biases
computes what the INT8 engine then computes on average: TensorRT builds it unchanged (its Q/DQ model, or its cache
beside it). A few rounds, because a corrected layer changes the shifts downstream of it."""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import numpy_helper

from calib.quantize.model import constant_value, initializers_not_inputs
from calib.runners.feed import fed
from calib.runners.onnxruntime import OrtRunner

log = logging.getLogger(__name__)
OPS = ("Conv", "ConvTranspose", "Gemm")
SUFFIX = ".bias_corrected"


def correctable(model: onnx.ModelProto, layers) -> list:
    """The nodes among `layers` whose output channels a bias can shift: Conv and ConvTranspose (channels on axis
    1) and Gemm without transposed C (the last axis), with constant weights."""
    want = set(layers)
    out = []
    for node in model.graph.node:
        if (node.name or node.output[0]) in want and node.op_type in OPS and len(node.input) > 1 \
                and constant_value(model, node.input[1]) is not None:
            out.append(node)
    return out


def _channels(model, node) -> int:
    w = constant_value(model, node.input[1])
    if node.op_type == "Conv":
        return int(w.shape[0])
    if node.op_type == "ConvTranspose":
        group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
        return int(w.shape[1]) * group
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    return int(w.shape[0] if trans_b else w.shape[1])


def _mean_shift(ref: np.ndarray, test: np.ndarray, op: str) -> np.ndarray:
    d = test.astype(np.float64) - ref.astype(np.float64)
    axis = 1 if op != "Gemm" else d.ndim - 1
    d = np.moveaxis(d, axis, 0)
    return d.reshape(d.shape[0], -1).mean(1)


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


def correct(model: onnx.ModelProto, make_int8, batches, layers, layout=None, rounds: int = 2):
    """(the FP32 model with corrected biases, {layer: largest shift corrected}) for the `layers` that can take
    one. `make_int8(model)` gives the simulated INT8 model of a model (the deployed engine's placement and
    scales); `batches` the calibration feeds (canonical layout, `layout` the model's)."""
    model = initializers_not_inputs(model)
    nodes = correctable(model, layers)
    if not nodes:
        return model, {}
    names = [n.output[0] for n in nodes]
    ref_run = fed(OrtRunner(model, expose=names, spin=False, lean=True, label="FP32"), layout)
    refs = [ref_run.run(b, names) for b in batches]
    del ref_run
    biases = _biases(model, nodes)
    done = {n.name or n.output[0]: 0.0 for n in nodes}
    for k in range(rounds):
        q = make_int8(with_biases(model, biases))
        run = fed(OrtRunner(q, expose=names, spin=False, lean=True, label="INT8 simulation"), layout)
        sums = {t: 0.0 for t in names}
        for b, ref in zip(batches, refs):
            got = run.run(b, names)
            for node in nodes:
                t = node.output[0]
                sums[t] = sums[t] + _mean_shift(ref[t], got[t], node.op_type) * len(next(iter(b.values())))
        total = sum(len(next(iter(b.values()))) for b in batches)
        for node in nodes:
            t = node.output[0]
            shift = sums[t] / max(total, 1)
            if shift.shape[0] != biases[t].shape[0]:
                continue  # a layout calib cannot read: left as it is
            biases[t] = (biases[t] - shift).astype(np.float32)
            done[node.name or t] = max(done[node.name or t], float(np.abs(shift).max()))
        log.info("bias correction round %d: largest shift %.3g", k + 1, max(done.values(), default=0.0))
    return with_biases(model, biases), done


def revert(corrected: onnx.ModelProto, original: onnx.ModelProto, layers) -> onnx.ModelProto:
    """`corrected` with the `layers` given back their uncorrected bias (from `original`, the model before the
    correction, node for node): a layer kept in float computes what FP32 computes."""
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
    keep = [t for t in m.graph.initializer if not t.name.endswith(SUFFIX) or t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    return m
