"""Multiply-adds per layer, from ONNX shape inference at one sample: the predicted speed of a configuration
against FP16 is the share of the model's multiply-adds its INT8 layers keep (Conv, ConvTranspose, MatMul, Gemm
carry nearly all the work on the GPU; the rest is counted as nothing)."""
from __future__ import annotations

import logging
import math

import numpy as np
import onnx

from calib.quantize.model import ModelInfo, constant_value, light_model

log = logging.getLogger(__name__)


def _shapes(model: onnx.ModelProto, info: ModelInfo) -> dict:
    dims = {}
    for name, d, _ in info.inputs:
        ax = info.layout.axis(name)
        d = tuple(x if isinstance(x, int) and x > 0 else 1 for x in d)
        if ax is not None and len(d) > ax:
            d = d[:ax] + (1,) + d[ax + 1:]
        dims[name] = d
    try:
        g = onnx.shape_inference.infer_shapes(light_model(model, dims), data_prop=True).graph
    except Exception as exc:  # a model shape inference fails on: no prediction
        log.warning("shape inference failed (%s): no multiply-add count", exc)
        return {}
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(x.HasField("dim_value") for x in t.shape.dim):
            out[vi.name] = tuple(int(x.dim_value) for x in t.shape.dim)
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


def _shape(model, shapes: dict, name: str):
    if name in shapes:
        return shapes[name]
    v = constant_value(model, name)
    return tuple(np.shape(v)) if v is not None else None


def layer_macs(model: onnx.ModelProto, info: ModelInfo, layers) -> dict[str, int]:
    """layer (node name or first output) -> multiply-adds per sample, for the `layers` that are Conv,
    ConvTranspose, MatMul or Gemm and whose shapes inference knows; the others count 0."""
    shapes = _shapes(model, info)
    want = set(layers)
    out = {n: 0 for n in layers}
    for node in model.graph.node:
        name = node.name or node.output[0]
        if name not in want:
            continue
        y = _shape(model, shapes, node.output[0])
        w = _shape(model, shapes, node.input[1]) if len(node.input) > 1 else None
        a = _shape(model, shapes, node.input[0])
        if y is None or w is None:
            continue
        if node.op_type == "Conv":
            out[name] = math.prod(y) * math.prod(w[1:])  # out elements x (Cin/group x kernel)
        elif node.op_type == "ConvTranspose" and a is not None:
            out[name] = math.prod(a) * math.prod(w[1:])
        elif node.op_type in ("MatMul", "Gemm") and a is not None and len(a) >= 1:
            k = a[-1] if not (node.op_type == "Gemm" and _trans_a(node)) else a[0]
            out[name] = math.prod(y) * k
    return out


def _trans_a(node) -> bool:
    return any(a.name == "transA" and a.i for a in node.attribute)


def int8_share(macs: dict, float_layers) -> float | None:
    """The share of the counted multiply-adds left in INT8 with `float_layers` in float (None: none counted)."""
    total = sum(macs.values())
    if not total:
        return None
    return 1.0 - sum(macs.get(n, 0) for n in float_layers) / total
