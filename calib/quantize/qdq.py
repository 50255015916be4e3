"""Scales -> Q/DQ ONNX in TensorRT's explicit-quantization placement (calib.quantize.placement says where).

Activations get one per-tensor scale (symmetric int8, zero point 0) from the calibrated amax after TensorRT's scale
ties (calib.quantize.ties); weights of Conv/ConvTranspose/Gemm/MatMul get per-output-channel scales from their own absolute
maximum, stored as float behind a Q/DQ pair or, with int8_weights, as INT8 initializers behind a DequantizeLinear
(4x smaller files, the same values). A weight behind Constant/Identity/Cast/Reshape/Transpose nodes is folded into
an initializer first (calib.quantize.weights); a model below opset 13 is converted (calib.quantize.opset). Layers
can be excluded (kept in float) by node name, glob pattern on node or output name, or op type.
"""
from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from calib.quantize.model import node_name
from calib.quantize.opset import at_qdq_opset, mark_opset
from calib.quantize.placement import RESIDUAL_BRANCH, place
from calib.quantize.ties import tie_amax
from calib.quantize.weights import Folder, prune

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


def _weight_axis(node, index: int, w: np.ndarray) -> int:
    """The output-channel axis of weight input `index` of `node` (the axis that is not summed over)."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        name = "transB" if index == 1 else "transA"
        t = next((a.i for a in node.attribute if a.name == name), 0)
        return (0 if t else 1) if index == 1 else (1 if t else 0)
    return w.ndim - 1 if index == 1 else w.ndim - 2  # MatMul: B's columns, or A's rows when A is the constant


def quantized_inputs(model: onnx.ModelProto, exclude: Exclusions = Exclusions()) -> list[tuple[int, int, str]]:
    """(node index, input index, 'act'|'weight') for every input TensorRT would run in int8."""
    return [(s.node, s.input, s.kind) for s in place(model, exclude.excludes)]


def quantizable_layers(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes that get Q/DQ inputs, in graph order (an unnamed node goes by its first output)."""
    seen = []
    for ni, _, _ in quantized_inputs(model):
        name = node_name(model.graph.node[ni])
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


class WeightPairs:
    """The weight Q/DQ pairs of one model: per output channel, each (weight, axis) once.

    A weight that is a constant without being an initializer (behind Constant, Identity, Cast, Reshape or
    Transpose nodes: calib.quantize.weights) is folded: its value becomes an initializer behind the pair, and
    `finish` removes the nodes that computed it once nothing else reads them."""

    def __init__(self, model: onnx.ModelProto, per_channel: bool = True, int8: bool = False):
        self.folder = Folder(model)
        self.initializers = {t.name for t in model.graph.initializer}
        self.per_channel, self.int8 = per_channel, int8
        self.nodes: list = []
        self.inits: list = []
        self.unfolded: dict[str, str] = {}  # weight -> why it stays float
        self._done: dict[tuple, str] = {}
        self._made: set[str] = set()

    def dq(self, node, index: int, tensor: str) -> tuple[str, tuple] | None:
        """(the dequantized weight's name, the weight's shape) for input `index` of `node`; None when the weight
        cannot be folded (the reason kept in `unfolded`)."""
        try:
            w = self.folder.value(tensor)
        except Exception as exc:  # a Cast to a type numpy lacks, a Reshape that does not fit...
            self.unfolded[tensor] = f"calib could not fold it ({exc})"
            return None
        if w.dtype.kind != "f":
            self.unfolded[tensor] = f"a {w.dtype} constant"
            return None
        axis = _weight_axis(node, index, w) if self.per_channel and w.ndim > 1 else None
        key = (tensor, axis)
        if key not in self._done:
            tag = tensor if not any(k[0] == tensor for k in self._done) else f"{tensor}_axis{axis}"
            src = tensor
            if tensor not in self.initializers:
                self._made |= self.folder.chain(tensor)
                src = f"{tensor}_folded"
                if not self.int8 and not any(t.name == src for t in self.inits):
                    self.inits.append(numpy_helper.from_array(w, src))
            scale = weight_scales(w, axis) if axis is not None else weight_scales(w.reshape(1, -1), 0).reshape(())
            self._done[key] = _pair(src, tag, scale, axis, self.nodes, self.inits, weight=w if self.int8 else None)
        return self._done[key], tuple(w.shape)

    def finish(self, graph: onnx.GraphProto) -> None:
        """Remove the nodes of folded weights that nothing reads any more (call after rewiring)."""
        if self._made:
            prune(graph, self._made)


def _set_kernel_shape(node, shape: tuple) -> None:
    if node.op_type in ("Conv", "ConvTranspose") and not any(a.name == "kernel_shape" for a in node.attribute):
        # a Conv whose weights come out of a DequantizeLinear needs kernel_shape (TensorRT 8.6's parser)
        node.attribute.append(helper.make_attribute("kernel_shape", list(shape[2:])))


def insert_qdq(model: onnx.ModelProto, amax: dict, exclude: Exclusions = Exclusions(),
               per_channel: bool = True, weights: bool = True, activations: bool = True,
               int8_weights: bool = False, label: str | None = None,
               stem_output: bool = True, residual_branch: str = RESIDUAL_BRANCH) -> onnx.ModelProto:
    """A copy of `model` with Q/DQ pairs; `amax` maps activation tensor names to their amax.

    A model below opset 13 is converted first (calib.quantize.opset; `label` names it in errors); the copy's
    metadata says its opset. The amax table goes through TensorRT's scale ties first (calib.quantize.ties), so a
    cache and its Q/DQ model agree. weights=False or activations=False leaves that kind in float (to tell which
    of the two costs accuracy); stem_output: quantize a stem Conv's output before its LeakyRelu (the default:
    TensorRT 8.6's speed; False keeps it float, a little more accurate; calib.quantize.placement); residual_branch:
    "conv" (the default: TensorRT 8.6's speed) or "act" quantizes a residual Add's Conv branch before or after its
    activation, "float" leaves it float (placement)."""
    m = at_qdq_opset(model, label)
    if m is model:
        m = onnx.ModelProto()
        m.CopyFrom(model)
    g = m.graph
    amax = tie_amax(m, amax, qdq=True)
    pairs = WeightPairs(m, per_channel, int8_weights)
    new_nodes: list = []
    new_inits: list = []
    done: dict[tuple, str] = {}  # (tensor, scale source) -> dequantized name
    rewires = []
    missing, zero = set(), set()
    for site in place(m, exclude.excludes, stem_output=stem_output, residual_branch=residual_branch):
        if not (weights if site.kind == "weight" else activations):
            continue
        node = g.node[site.node]
        if site.kind == "weight":
            got = pairs.dq(node, site.input, site.tensor)
            if got is not None:
                rewires.append((site, *got))
            continue
        src = site.scale_from()
        key = (site.tensor, src)
        if key not in done:
            if any(t not in amax for t in src):
                missing.update(t for t in src if t not in amax)
                continue
            a = max(float(amax[t]) for t in src)
            tag = site.tensor if src == (site.tensor,) else f"{site.tensor}_as_{src[0]}"
            scale = activation_scale(a)
            if scale is None:  # zero on every calibration batch (TensorRT's cache line `name: 0`)
                zero.add(site.tensor)
                continue
            done[key] = _pair(site.tensor, tag, scale, None, new_nodes, new_inits)
        rewires.append((site, done[key], None))
    for site, new, shape in rewires:
        node = g.node[site.node]
        node.input[site.input] = new
        if shape is not None:
            _set_kernel_shape(node, shape)
    if missing:
        log.warning("no scale for %d tensors, left in float: %s", len(missing), ", ".join(sorted(missing)[:5]))
    if zero:
        log.warning("amax 0 (zero on every calibration batch) for %d tensors, left in float: %s", len(zero),
                    ", ".join(sorted(zero)[:5]))
    for t, why in pairs.unfolded.items():
        log.warning("weight %s left in float: %s", t, why)
    _order(g, new_nodes + pairs.nodes)
    g.initializer.extend(new_inits + pairs.inits)
    pairs.finish(g)
    if int8_weights:
        used = {i for n in g.node for i in n.input}
        keep = [t for t in g.initializer if t.name in used]
        del g.initializer[:]
        g.initializer.extend(keep)
    mark_opset(m)
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
