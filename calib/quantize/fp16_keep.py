"""Which float layers of a Q/DQ model stay FP32 in its FP16+INT8 model (calib.quantize.fp16), and why.

- range: a float constant past FP16's largest value (a BatchNormalization variance), with the layers that read it;
  a layer whose output's absolute maximum over the calibration pass passes FP16's largest value (65504)
  divided by RANGE_MARGIN (data beyond the calibration set goes further), and the float layers that read such a
  tensor (they would read it rounded to infinity). The ranges are the pass's own maxima (calib run's ranges.json);
  a cache's amax, where no ranges are given, is clipped by its calibrator and is only a lower bound.
- reduction: Softmax, LogSoftmax and the normalizations (LayerNormalization, GroupNormalization,
  InstanceNormalization) and the reductions whose sum of squares or exponentials overflows FP16 (ReduceSumSquare,
  ReduceL2, ReduceLogSumExp).
- variance: a ReduceMean/ReduceSum of a square (Pow with exponent 2, or Mul of a tensor by itself), as a LayerNorm
  written out in elementary ops computes it, with the square and the Add/Sqrt/Reciprocal/Div that follow it.
- underflow: a float constant whose every nonzero value is below FP16's smallest normal (2**-14, about 6.1e-5), so
  that FP16 rounds it to 0 or to a subnormal, in a layer whose result it decides: an Add or Sub before a Log, Sqrt,
  Reciprocal, Pow (its base) or Div (its divisor), a Max or Clip lower bound; that layer and those readers. An audio
  front end's `log(mel + 1e-10)` in FP16 is log(0) = -inf on every silent frame.
- output precision: a float layer after the last INT8 layer on the way to an output (a detector's box decoding,
  scores) whose output reaches TAIL_LIMIT (2048) over the pass, where FP16's steps are 2 or more (box coordinates
  lose whole pixels), and the layers of that tail that read it. Below it FP16 holds: YOLOv3-tiny's decoding in FP16
  gave mAP50:95 vs FP32 0.908 against 0.909 with it in FP32 (178 images, p = 0.71).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from calib.quantize.model import constant_value, node_name
from calib.quantize.ties import Graph

FP16_MAX = 65504.0
FP16_TINY = 2.0 ** -14  # FP16's smallest normal: below it FP16 keeps a few bits (subnormal), below 2**-24 none
GUARDED = {"Log": 0, "Sqrt": 0, "Reciprocal": 0, "Pow": 0, "Div": 1}  # op -> the input an epsilon protects
RANGE_MARGIN = 2.0  # a tensor at half of FP16's range on calibration data is too close to it
TAIL_LIMIT = 2048.0  # from here on FP16's spacing is 2: an output's coordinates lose whole pixels
REDUCTIONS = ("Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
              "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "ReduceLogSum")
_SHAPE_OPS = ("Shape", "Size", "QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class Kept:
    node: str
    op: str
    rule: str  # range, reduction, variance, underflow, output-precision
    reason: str


def _square(model, node) -> bool:
    if node.op_type == "Mul":
        return len(node.input) == 2 and node.input[0] == node.input[1]
    if node.op_type == "Pow" and len(node.input) == 2:
        try:
            v = constant_value(model, node.input[1])
        except Exception:
            v = None
        return v is not None and v.size == 1 and float(v.reshape(-1)[0]) == 2.0
    return False


def _quantized_layers(g) -> set[int]:
    """Indices of the nodes that read an activation through a DequantizeLinear fed by a QuantizeLinear."""
    q_out = {n.output[0] for n in g.node if n.op_type == "QuantizeLinear"}
    dq_act = {n.output[0] for n in g.node if n.op_type == "DequantizeLinear" and n.input[0] in q_out}
    return {i for i, n in enumerate(g.node) if n.op_type not in _SHAPE_OPS and any(t in dq_act for t in n.input)}


def fp32_layers(qdq: onnx.ModelProto, ranges: dict | None = None, ranges_from: str = "the calibration pass",
                tail: bool = True) -> list[Kept]:
    """The layers of the Q/DQ model `qdq` that stay FP32, each with its rule and reason, in graph order."""
    g = qdq.graph
    graph = Graph.of(qdq)
    nodes, made, readers = graph.nodes, graph.producer, graph.consumers
    kept: dict[int, Kept] = {}

    def add(i: int, rule: str, reason: str) -> None:
        n = nodes[i]
        if i not in kept and n.op_type not in _SHAPE_OPS:
            kept[i] = Kept(node_name(n), n.op_type, rule, reason)

    limit = FP16_MAX / RANGE_MARGIN
    for t, amax in (ranges or {}).items():
        if amax is None or not float(amax) > limit:
            continue
        why = f"'{t}' reaches {float(amax):.6g} over {ranges_from} (FP16 ends at 65504)"
        if t in made:
            add(made[t], "range", why)
        for r in readers.get(t, []):
            add(r, "range", f"reads {why}")
    for t, (amax, maker) in _big_constants(qdq).items():
        why = f"constant '{t}' holds {amax:.6g} (FP16 ends at 65504)"
        if maker is not None:
            add(maker, "range", why)
        for r in readers.get(t, []):
            add(r, "range", f"reads {why}")
    for i, n in enumerate(nodes):
        if n.op_type in REDUCTIONS:
            add(i, "reduction", f"{n.op_type}: its sums overflow or lose precision in FP16")
    for i, n in enumerate(nodes):
        if n.op_type not in ("ReduceMean", "ReduceSum") or not n.input or n.input[0] not in made:
            continue
        sq = made[n.input[0]]
        if not _square(qdq, nodes[sq]):
            continue
        why = f"variance ({nodes[sq].op_type} -> {n.op_type}): squares overflow FP16"
        add(sq, "variance", why)
        add(i, "variance", why)
        frontier = [n.output[0]]
        while frontier:  # + eps, sqrt, 1/x or x / sigma: the normalization that reads the variance
            t = frontier.pop()
            for r in readers.get(t, []):
                if nodes[r].op_type in ("Add", "Sqrt", "Reciprocal", "Div"):
                    add(r, "variance", why)
                    if nodes[r].op_type != "Div":
                        frontier += list(nodes[r].output)
    for i, rule_why in _underflows(qdq, nodes).items():
        add(i, "underflow", rule_why)
        for t in nodes[i].output:
            for r in readers.get(t, []):
                if GUARDED.get(nodes[r].op_type) is not None and nodes[r].input[GUARDED[nodes[r].op_type]] == t:
                    add(r, "underflow", f"reads '{t}', {rule_why}")
    if tail:
        in_tail = set(_tail(g, nodes, readers))
        for i in sorted(in_tail):
            for t in nodes[i].output:
                amax = (ranges or {}).get(t)
                if amax is None or not float(amax) >= TAIL_LIMIT:
                    continue
                why = (f"'{t}' reaches {float(amax):.6g} over {ranges_from} after the last INT8 layer (FP16 steps of "
                       f"{_spacing(float(amax)):g} there)")
                add(i, "output-precision", why)
                for r in readers.get(t, []):
                    if r in in_tail:
                        add(r, "output-precision", f"reads {why}")
    return [kept[i] for i in sorted(kept)]


def _tiny(model: onnx.ModelProto, name: str) -> float | None:
    """The largest magnitude of the float constant `name` when it is nonzero and below FP16's smallest normal."""
    v = constant_value(model, name) if name else None
    if v is None or v.dtype.kind != "f" or not v.size:
        return None
    big = float(np.abs(v).max())
    return big if 0.0 < big < FP16_TINY else None


def _underflows(model: onnx.ModelProto, nodes) -> dict[int, str]:
    """Layers whose result an epsilon that FP16 flushes decides: node index -> why."""
    out: dict[int, str] = {}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            readers.setdefault(t, []).append(i)

    def what(eps: float) -> str:
        return "0" if eps < 2.0 ** -25 else "a subnormal"

    for i, n in enumerate(nodes):
        if n.op_type in ("Add", "Sub"):
            guards = [nodes[r].op_type for r in readers.get(n.output[0], [])
                      if GUARDED.get(nodes[r].op_type) is not None
                      and nodes[r].input[GUARDED[nodes[r].op_type]] == n.output[0]]
            if not guards:
                continue
            for t in n.input:
                eps = _tiny(model, t)
                if eps is not None:
                    out[i] = (f"constant '{t}' ({eps:.3g}) is {what(eps)} in FP16 before a {guards[0]} "
                              f"(FP16's smallest normal is {FP16_TINY:.3g})")
                    break
        elif n.op_type in ("Max", "Clip"):
            bounds = list(n.input[1:]) if n.op_type == "Max" else list(n.input[1:2])
            for t in bounds:
                eps = _tiny(model, t)
                if eps is not None:
                    out[i] = (f"its bound '{t}' ({eps:.3g}) is {what(eps)} in FP16 (its smallest normal is "
                              f"{FP16_TINY:.3g})")
                    break
            low = next((a.f for a in n.attribute if a.name == "min"), None) if n.op_type == "Clip" else None
            if i not in out and low is not None and 0.0 < abs(low) < FP16_TINY:
                out[i] = f"its min {low:.3g} is {what(abs(low))} in FP16 (its smallest normal is {FP16_TINY:.3g})"
    return out


def _spacing(x: float) -> float:
    """FP16's distance between neighbours at magnitude x (normal range)."""
    import math

    return 2.0 ** (math.floor(math.log2(x)) - 10)


def _big_constants(model: onnx.ModelProto) -> dict[str, tuple[float, int | None]]:
    """Float constants (initializers, Constant/ConstantOfShape values) with a finite value past FP16's largest: their
    largest magnitude and the node that makes them (None for an initializer). PP-OCRv4's detector has a
    BatchNormalization variance of 9.8e7, which FP16 makes infinite."""
    found = {}

    def check(name, tensor, maker):
        if tensor.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            return
        v = numpy_helper.to_array(tensor)
        v = np.abs(v[np.isfinite(v)])
        if v.size and float(v.max()) > FP16_MAX:
            found[name] = (float(v.max()), maker)

    for t in model.graph.initializer:
        check(t.name, t, None)
    for i, n in enumerate(model.graph.node):
        if n.op_type in ("Constant", "ConstantOfShape"):
            value = next((a.t for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                         None)
            if value is not None:
                check(n.output[0], value, i)
    return found


def _tail(g, nodes, readers) -> list[int]:
    """Float layers from which no INT8 layer can be reached and a model output can, in a model with INT8 layers."""
    quant = _quantized_layers(g)
    if not quant:
        return []
    outputs = {o.name for o in g.output}
    feeds_int8: set[int] = set()
    feeds_out: set[int] = set()
    for i in range(len(nodes) - 1, -1, -1):  # reverse topological order
        n = nodes[i]
        nexts = [r for t in n.output for r in readers.get(t, [])]
        if any(r in quant or r in feeds_int8 for r in nexts):
            feeds_int8.add(i)
        if any(t in outputs for t in n.output) or any(r in feeds_out for r in nexts):
            feeds_out.add(i)
    return [i for i in range(len(nodes)) if i in feeds_out and i not in feeds_int8 and i not in quant
            and nodes[i].op_type not in _SHAPE_OPS]
