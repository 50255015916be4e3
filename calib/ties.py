"""Scale ties: the tensors whose INT8 scale TensorRT takes from another tensor's.

TensorRT's own EntropyCalibration2 caches (tests/golden/trt86-h200, and the YOLO captures) give
- the output of a layer that only moves or selects values (MaxPool, Resize/Upsample, Reshape, Flatten, Transpose,
  Squeeze/Unsqueeze, Slice, Split, Pad, Identity, ...) its input's scale;
- a Concat output the largest of its inputs' scales;
- an AveragePool / GlobalAveragePool output its own scale (averaging shrinks the range: golden MobileNetV2 and CNN).

`tie_amax` applies these rules to a {tensor: amax} table in topological order, so that a chain (Conv -> MaxPool ->
Reshape) carries one scale. Every cache calib writes and every Q/DQ model it makes go through it, so implicit and
explicit engines get the same scales.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx

# Ops whose output holds a subset (or a re-arrangement) of their first input's values: the scale carries over.
CARRIERS = frozenset({
    "MaxPool", "GlobalMaxPool", "Resize", "Upsample", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
    "Slice", "Split", "Pad", "Identity", "Expand", "Tile", "Gather", "DepthToSpace", "SpaceToDepth",
})
CONCAT = "Concat"


@dataclass(frozen=True)
class Graph:
    """Producer and consumer maps of an ONNX graph, and which tensors are constants."""
    nodes: tuple
    producer: dict  # tensor -> node index
    consumers: dict  # tensor -> [node index, ...]
    constants: frozenset  # initializers and Constant outputs

    @classmethod
    def of(cls, model: onnx.ModelProto) -> "Graph":
        g = model.graph
        producer, consumers = {}, {}
        consts = {t.name for t in g.initializer}
        for i, n in enumerate(g.node):
            for o in n.output:
                producer[o] = i
                if n.op_type == "Constant":
                    consts.add(o)
            for t in n.input:
                if t:
                    consumers.setdefault(t, []).append(i)
        return cls(tuple(g.node), producer, consumers, frozenset(consts))

    def node_of(self, tensor: str):
        i = self.producer.get(tensor)
        return None if i is None else self.nodes[i]

    def data_input(self, node) -> str | None:
        """The one non-constant input a carrier moves values from (the first input for all CARRIERS)."""
        return node.input[0] if node.input and node.input[0] and node.input[0] not in self.constants else None


def tie_sources(model: onnx.ModelProto) -> dict[str, tuple[str, ...]]:
    """tensor -> the tensors its scale is taken from (one for a carrier's output, all inputs for a Concat)."""
    g = Graph.of(model)
    out = {}
    for node in g.nodes:
        if node.op_type in CARRIERS:
            src = g.data_input(node)
            if src is not None:
                for y in node.output:
                    if y:
                        out[y] = (src,)
        elif node.op_type == CONCAT:
            srcs = tuple(i for i in node.input if i and i not in g.constants)
            if srcs and node.output:
                out[node.output[0]] = srcs
    return out


def tie_amax(model: onnx.ModelProto, amax: dict) -> dict:
    """A copy of `amax` with the tied tensors' values replaced (graph order, so chains resolve).

    A tensor whose sources are not all in `amax` keeps its own value (nothing to tie to)."""
    sources = tie_sources(model)
    out = dict(amax)
    for node in model.graph.node:
        for y in node.output:
            src = sources.get(y)
            if src is None or y not in out or not all(s in out for s in src):
                continue
            out[y] = max(out[s] for s in src)
    return out


def tied_count(before: dict, after: dict) -> int:
    return sum(1 for k in after if before.get(k) != after[k])
