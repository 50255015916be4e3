"""How many of a Q/DQ model's weighted layers have their weight quantized, and a refusal of the ones that don't.

A layer whose activation input gets Q/DQ but whose weight stays float cannot run in INT8 in TensorRT's explicit
mode: it runs in float behind a needless quantization of its input. A writer says the counts and refuses such
a layer unless asked to accept it.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from calib.errors import ModelError
from calib.quantize.ties import Graph

LAYERS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


@dataclass(frozen=True)
class WeightCoverage:
    layers: int  # Conv, ConvTranspose, Gemm, and MatMul with a constant input
    quantized: int  # of those, with their weight behind a DequantizeLinear
    float_weights: tuple = ()  # (layer, weight tensor, why): activation quantized, weight float

    def describe(self) -> str:
        left = f", {len(self.float_weights)} with a Q/DQ input left with a float weight" if self.float_weights else ""
        return f"{self.quantized} of {self.layers} layer weights quantized{left}"


def _source(g: Graph, tensor: str) -> str:
    """The tensor behind a chain of Q/DQ nodes."""
    node = g.node_of(tensor)
    while node is not None and node.op_type in _QDQ:
        tensor = node.input[0]
        node = g.node_of(tensor)
    return tensor


def _why(g: Graph, tensor: str) -> str:
    node = g.node_of(tensor)
    if tensor in g.constants:
        return f"its weight '{tensor}' is a constant left without Q/DQ"
    if node is None:
        return f"its weight '{tensor}' is a graph input"
    what = f"{node.op_type} '{node.name}'" if node.name else node.op_type
    return f"its weight '{tensor}' is made by {what}, which calib does not fold into a constant"


def weight_coverage(qdq: onnx.ModelProto) -> WeightCoverage:
    """Count the weighted layers of a Q/DQ model and the weights it quantized."""
    g = Graph.of(qdq)
    layers, quantized, floats = 0, 0, []
    for node in g.nodes:
        if node.op_type not in LAYERS or len(node.input) < 2:
            continue
        src = [_source(g, t) for t in node.input[:2]]
        if node.op_type == "MatMul":
            w = 1 if src[1] in g.constants else 0 if src[0] in g.constants else None
            if w is None:
                continue  # two activations (attention): no weight
        else:
            w = 1
        layers += 1
        dq = [g.node_of(t) is not None and g.node_of(t).op_type == "DequantizeLinear" for t in node.input[:2]]
        if dq[w]:
            quantized += 1
        elif dq[1 - w]:
            floats.append((node.name or node.output[0], src[w], _why(g, src[w])))
    return WeightCoverage(layers, quantized, tuple(floats))


def check_float_weights(cov: WeightCoverage, label: str, accept: bool, option: str) -> None:
    """A ModelError when a layer gets Q/DQ on its input but keeps a float weight, unless `accept`; `option`
    names the flag or recipe key that accepts it."""
    if not cov.float_weights or accept:
        return
    layer, _, why = cov.float_weights[0]
    n = len(cov.float_weights)
    more = f" (and {n - 1} more)" if n > 1 else ""
    raise ModelError(f"{label}: layer '{layer}'{more} gets Q/DQ on its input but keeps a float weight: {why}; "
                     f"TensorRT cannot run it in INT8 ({cov.describe()}); {option} writes the model anyway")
