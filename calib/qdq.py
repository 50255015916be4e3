"""Scales -> Q/DQ ONNX in TensorRT's explicit-quantization placement.

QuantizeLinear/DequantizeLinear pairs (symmetric int8, zero point 0) go on the activation inputs of Conv,
ConvTranspose, Gemm, MatMul and pooling layers, and on the residual input of an Add that joins two branches
(the input not produced by a Conv, so that TensorRT can fuse the Conv + Add). Weights of Conv/ConvTranspose/
Gemm/MatMul get per-output-channel scales from their own absolute maximum. Layers can be excluded (kept in
float) by node name, glob pattern on node or output name, or op type.
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

log = logging.getLogger(__name__)

WEIGHTED = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
POOLING = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}


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
    g = model.graph
    inits = {t.name for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    out = []
    for ni, node in enumerate(g.node):
        if exclude.excludes(node):
            continue
        if node.op_type in WEIGHTED:
            for ii, name in enumerate(node.input[:2]):  # data and weight; a bias stays in float
                if not name:
                    continue
                out.append((ni, ii, "weight" if name in inits else "act"))
        elif node.op_type in POOLING:
            out.append((ni, 0, "act"))
        elif node.op_type == "Add" and len(node.input) == 2 and not any(i in inits for i in node.input):
            from_conv = [producer.get(i) is not None and producer[i].op_type in ("Conv", "ConvTranspose")
                         for i in node.input]
            pick = 1 if from_conv[0] and not from_conv[1] else 0 if from_conv[1] and not from_conv[0] else 1
            out.append((ni, pick, "act"))
    return out


def _qdq_pair(name: str, scale: np.ndarray, axis: int | None, nodes: list, inits: list) -> str:
    s_name, z_name = f"{name}_scale", f"{name}_zero_point"
    inits.append(numpy_helper.from_array(scale.astype(np.float32), s_name))
    inits.append(numpy_helper.from_array(np.zeros(scale.shape, np.int8), z_name))
    kw = {"axis": axis} if axis is not None else {}
    nodes.append(helper.make_node("QuantizeLinear", [name, s_name, z_name], [f"{name}_quantized"],
                                  name=f"{name}_QuantizeLinear", **kw))
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_quantized", s_name, z_name],
                                  [f"{name}_dequantized"], name=f"{name}_DequantizeLinear", **kw))
    return f"{name}_dequantized"


def weight_scales(w: np.ndarray, axis: int) -> np.ndarray:
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red) if red else np.abs(w)
    return np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)


def insert_qdq(model: onnx.ModelProto, amax: dict, exclude: Exclusions = Exclusions(),
               per_channel: bool = True, weights: bool = True, activations: bool = True) -> onnx.ModelProto:
    """A copy of `model` with Q/DQ pairs; `amax` maps activation tensor names to their amax.

    weights=False or activations=False leaves that kind in float (to tell which of the two costs accuracy)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise ModelError(f"{model.graph.name}: Q/DQ needs opset >= 13 (model has {opset}); "
                         "upgrade with onnx.version_converter")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    new_nodes: list = []
    new_inits: list = []
    done: dict[str, str] = {}
    rewires = []
    missing = set()
    for ni, ii, kind in quantized_inputs(m, exclude):
        if not (weights if kind == "weight" else activations):
            continue
        node = g.node[ni]
        name = node.input[ii]
        if name not in done:
            if kind == "weight":
                w = numpy_helper.to_array(inits[name])
                axis = _weight_axis(node, ii, w) if per_channel and w.ndim > 1 else None
                scale = weight_scales(w, axis) if axis is not None else np.array(
                    max(float(np.abs(w).max()), 1e-12) / 127.0, np.float32)
                done[name] = _qdq_pair(name, scale, axis, new_nodes, new_inits)
            else:
                a = amax.get(name)
                if a is None:
                    missing.add(name)
                    continue
                scale = np.array(max(float(a), 1e-12) / 127.0, np.float32)
                done[name] = _qdq_pair(name, scale, None, new_nodes, new_inits)
        rewires.append((ni, ii, done[name]))
    for ni, ii, new in rewires:
        node = g.node[ni]
        node.input[ii] = new
        if ii == 1 and node.op_type in ("Conv", "ConvTranspose") and node.input[1] in done.values() and \
                not any(a.name == "kernel_shape" for a in node.attribute):
            # a Conv whose weights come out of a DequantizeLinear needs kernel_shape (TensorRT 8.6's parser)
            w = inits[next(k for k, v in done.items() if v == new)]
            node.attribute.append(helper.make_attribute("kernel_shape", list(w.dims[2:])))
    if missing:
        log.warning("no scale for %d tensors, left in float: %s", len(missing), ", ".join(sorted(missing)[:5]))
    # keep a topological order: each Q/DQ pair right before its first consumer
    pairs = {new_nodes[k].output[0].removesuffix("_quantized"): (new_nodes[k], new_nodes[k + 1])
             for k in range(0, len(new_nodes), 2)}
    ordered = []
    placed = set()
    for ni, node in enumerate(g.node):
        for i in node.input:
            src = i.removesuffix("_dequantized") if i.endswith("_dequantized") else None
            if src in pairs and src not in placed:
                ordered += pairs[src]
                placed.add(src)
        ordered.append(node)
    del g.node[:]
    g.node.extend(ordered)
    g.initializer.extend(new_inits)
    return m


def count_qdq(model: onnx.ModelProto) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "QuantizeLinear")


def excluded_from(patterns: Iterable[str]) -> Exclusions:
    """Patterns: 'op:Softmax' excludes an op type, anything else a node/output name glob."""
    names, ops = [], []
    for p in patterns:
        (ops if p.startswith("op:") else names).append(p[3:] if p.startswith("op:") else p)
    return Exclusions(tuple(names), tuple(ops))
