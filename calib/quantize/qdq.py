"""Scales -> Q/DQ ONNX in TensorRT's explicit-quantization placement (calib.quantize.placement says where).

Activations get one per-tensor scale (symmetric int8, zero point 0) from the calibrated amax after TensorRT's scale
ties (calib.quantize.ties); weights of Conv/ConvTranspose/Gemm/MatMul get per-output-channel scales from their own absolute
maximum, stored as float behind a Q/DQ pair or, with int8_weights, as INT8 initializers behind a DequantizeLinear
(4x smaller files, the same values). Layers can be excluded (kept in float) by node name, glob pattern on node or
output name, or op type.
"""
from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from calib.errors import ModelError
from calib.quantize.placement import place
from calib.quantize.ties import tie_amax

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Exclusions:
    names: tuple[str, ...] = ()  # node names or output tensor names, glob patterns allowed
    op_types: tuple[str, ...] = ()

    def excludes(self, node) -> bool:
        if node.op_type in self.op_types:
            return True
        keys = [node.name, *node.output]
        return any(fnmatch.fnmatchcase(k, pat) for pat in self.names for k in keys if k)


def _weight_axis(node, index: int, init: np.ndarray) -> int:
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return init.ndim - 1  # MatMul: output features are the last axis


def quantized_inputs(model: onnx.ModelProto, exclude: Exclusions = Exclusions()) -> list[tuple[int, int, str]]:
    """(node index, input index, 'act'|'weight') for every input TensorRT would run in int8."""
    return [(s.node, s.input, s.kind) for s in place(model, exclude.excludes)]


def quantizable_layers(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes that get Q/DQ inputs, in graph order (an unnamed node goes by its first output)."""
    seen = []
    for ni, _, _ in quantized_inputs(model):
        node = model.graph.node[ni]
        name = node.name or node.output[0]
        if name not in seen:
            seen.append(name)
    return seen


def _pair(name: str, tag: str, scale: np.ndarray, axis: int | None, nodes: list, inits: list,
          weight: np.ndarray | None = None) -> str:
    """Q/DQ (or, for an INT8 weight, DQ alone) of `name`; returns the dequantized tensor's name."""
    s_name, z_name = f"{tag}_scale", f"{tag}_zero_point"
    inits.append(numpy_helper.from_array(scale.astype(np.float32), s_name))
    inits.append(numpy_helper.from_array(np.zeros(scale.shape, np.int8), z_name))
    kw = {"axis": axis} if axis is not None else {}
    if weight is not None:
        shape = [1] * weight.ndim
        if axis is not None:
            shape[axis] = -1
        q = np.clip(np.rint(weight / scale.reshape(shape)), -127, 127).astype(np.int8)
        inits.append(numpy_helper.from_array(q, f"{tag}_int8"))
        src = f"{tag}_int8"
    else:
        nodes.append(helper.make_node("QuantizeLinear", [name, s_name, z_name], [f"{tag}_quantized"],
                                      name=f"{tag}_QuantizeLinear", **kw))
        src = f"{tag}_quantized"
    nodes.append(helper.make_node("DequantizeLinear", [src, s_name, z_name], [f"{tag}_dequantized"],
                                  name=f"{tag}_DequantizeLinear", **kw))
    return f"{tag}_dequantized"


def activation_scale(amax: float) -> np.ndarray | None:
    """The float32 scale amax / 127 of an activation; None where it is zero (a tensor zero on every calibration
    batch, or an amax so small that the scale underflows): that tensor stays float, no zero scale is written."""
    scale = np.array(amax / 127.0, np.float32)
    return scale if scale > 0 else None


def weight_scales(w: np.ndarray, axis: int) -> np.ndarray:
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red) if red else np.abs(w)
    scale = (amax / 127.0).astype(np.float32)
    return np.where(scale > 0, scale, 1.0).astype(np.float32)


def _weight_pair(node, ii: int, w: np.ndarray, per_channel: bool, int8: bool, name: str, nodes, inits) -> str:
    axis = _weight_axis(node, ii, w) if per_channel and w.ndim > 1 else None
    scale = weight_scales(w, axis) if axis is not None else weight_scales(w.reshape(1, -1), 0).reshape(())
    return _pair(name, name, scale, axis, nodes, inits, weight=w if int8 else None)


def insert_qdq(model: onnx.ModelProto, amax: dict, exclude: Exclusions = Exclusions(),
               per_channel: bool = True, weights: bool = True, activations: bool = True,
               int8_weights: bool = False) -> onnx.ModelProto:
    """A copy of `model` with Q/DQ pairs; `amax` maps activation tensor names to their amax.

    The amax table goes through TensorRT's scale ties first (calib.quantize.ties), so a cache and its Q/DQ model agree.
    weights=False or activations=False leaves that kind in float (to tell which of the two costs accuracy)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise ModelError(f"{model.graph.name}: Q/DQ needs opset >= 13 (model has {opset}); "
                         "upgrade with onnx.version_converter")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    amax = tie_amax(m, amax, qdq=True)
    inits = {t.name: t for t in g.initializer}
    new_nodes: list = []
    new_inits: list = []
    done: dict[tuple, str] = {}  # (tensor, scale source) -> dequantized name
    rewires = []
    missing, zero = set(), set()
    for site in place(m, exclude.excludes):
        if not (weights if site.kind == "weight" else activations):
            continue
        node = g.node[site.node]
        src = site.scale_from()
        key = (site.tensor, src)
        if key not in done:
            if site.kind == "weight":
                w = numpy_helper.to_array(inits[site.tensor])
                done[key] = _weight_pair(node, site.input, w, per_channel, int8_weights, site.tensor,
                                         new_nodes, new_inits)
            else:
                if any(t not in amax for t in src):
                    missing.update(t for t in src if t not in amax)
                    continue
                scale = activation_scale(max(float(amax[t]) for t in src))
                if scale is None:  # zero on every calibration batch (TensorRT's cache line `name: 0`)
                    zero.add(site.tensor)
                    continue
                tag = site.tensor if src == (site.tensor,) else f"{site.tensor}_as_{src[0]}"
                done[key] = _pair(site.tensor, tag, scale, None, new_nodes, new_inits)
        rewires.append((site, done[key]))
    for site, new in rewires:
        node = g.node[site.node]
        node.input[site.input] = new
        if site.kind == "weight" and node.op_type in ("Conv", "ConvTranspose") and \
                not any(a.name == "kernel_shape" for a in node.attribute):
            # a Conv whose weights come out of a DequantizeLinear needs kernel_shape (TensorRT 8.6's parser)
            node.attribute.append(helper.make_attribute("kernel_shape", list(inits[site.tensor].dims[2:])))
    if missing:
        log.warning("no scale for %d tensors, left in float: %s", len(missing), ", ".join(sorted(missing)[:5]))
    if zero:
        log.warning("amax 0 (zero on every calibration batch) for %d tensors, left in float: %s", len(zero),
                    ", ".join(sorted(zero)[:5]))
    _order(g, new_nodes)
    g.initializer.extend(new_inits)
    if int8_weights:
        used = {i for n in g.node for i in n.input}
        keep = [t for t in g.initializer if t.name in used]
        del g.initializer[:]
        g.initializer.extend(keep)
    return m


def _order(g, new_nodes: list) -> None:
    """Keep a topological order: each Q/DQ chain right before its first consumer."""
    chains: dict[str, list] = {}
    for n in new_nodes:
        if n.op_type == "DequantizeLinear":
            chains[n.output[0]] = []
    by_out = {n.output[0]: n for n in new_nodes}
    for out in chains:
        dq = by_out[out]
        q = by_out.get(dq.input[0])
        chains[out] = [q, dq] if q is not None else [dq]
    ordered = []
    for node in g.node:
        for i in node.input:
            if i in chains and chains[i]:
                ordered += chains.pop(i)
        ordered.append(node)
    del g.node[:]
    g.node.extend(ordered)


def count_qdq(model: onnx.ModelProto) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "QuantizeLinear")


def excluded_from(patterns: Iterable[str]) -> Exclusions:
    """Patterns: 'op:Softmax' excludes an op type, anything else a node/output name glob."""
    names, ops = [], []
    for p in patterns:
        (ops if p.startswith("op:") else names).append(p[3:] if p.startswith("op:") else p)
    return Exclusions(tuple(names), tuple(ops))
