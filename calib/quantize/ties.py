"""Scale ties: the tensors whose INT8 scale TensorRT takes from another tensor's.

In a calibration cache (TensorRT 8.6's own EntropyCalibration2 caches: tests/golden/trt86-h200, the topology probe
in tests/golden/trt86-h200-entropy, the YOLOv3-tiny capture in benchmarks/trt86-h200/yolo):
- the output of a layer that only moves values (MaxPool, a nearest Resize/Upsample, Reshape, Flatten, Transpose,
  Squeeze/Unsqueeze, Slice, Pad, Identity, ...) has its input's scale;
- a Concat, a Split and a linear Resize output keep their own (YOLOv3-tiny's route Concat: inputs 5.23 and 7.66,
  output 7.68), as does an AveragePool / GlobalAveragePool output (averaging shrinks the range).

In a Q/DQ model (`qdq=True`) TensorRT fuses a Concat in INT8 only when its inputs and output share one scale: there
the Concat output takes the largest of its inputs', and Split and every Resize carry their input's, so that a
Resize -> Concat -> Conv chain runs in INT8 with no re-quantization.

`tie_amax` applies the rules to a {tensor: amax} table in topological order, so that a chain (Conv -> MaxPool ->
Reshape) carries one scale. Every cache calib writes goes through the cache rules, every Q/DQ model through both.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from calib.io.files import per_file
from calib.quantize.model import load_model
from calib.quantize.weights import constant_tensors

# Ops whose output holds a subset (or a re-arrangement) of their first input's values: the scale carries over.
CARRIERS = frozenset({
    "MaxPool", "GlobalMaxPool", "Resize", "Upsample", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
    "Slice", "Split", "Pad", "Identity", "Expand", "Tile", "Gather", "DepthToSpace", "SpaceToDepth",
})
CONCAT = "Concat"
OWN_IN_CACHE = frozenset({"Split"})  # carriers whose output keeps its own value in TensorRT's cache
RESIZE = frozenset({"Resize", "Upsample"})


def _nearest(node) -> bool:
    mode = next((a.s for a in node.attribute if a.name == "mode"), b"nearest")
    return mode in (b"nearest", "nearest")


@dataclass(frozen=True)
class Graph:
    """Producer and consumer maps of an ONNX graph, and which tensors are constants."""
    nodes: tuple
    producer: dict  # tensor -> node index
    consumers: dict  # tensor -> [node index, ...]
    constants: frozenset  # initializers, Constant outputs and what Identity/Cast/Reshape/Transpose make of them

    @classmethod
    def of(cls, model: onnx.ModelProto) -> "Graph":
        g = model.graph
        producer, consumers = {}, {}
        for i, n in enumerate(g.node):
            for o in n.output:
                producer[o] = i
            for t in n.input:
                if t:
                    consumers.setdefault(t, []).append(i)
        consts = constant_tensors(g.node, (t.name for t in g.initializer))
        return cls(tuple(g.node), producer, consumers, frozenset(consts))

    def node_of(self, tensor: str):
        i = self.producer.get(tensor)
        return None if i is None else self.nodes[i]

    def data_input(self, node) -> str | None:
        """The one non-constant input a carrier moves values from (the first input for all CARRIERS)."""
        return node.input[0] if node.input and node.input[0] and node.input[0] not in self.constants else None


def tie_sources(model: onnx.ModelProto, qdq: bool = False) -> dict[str, tuple[str, ...]]:
    """tensor -> the tensors its scale is taken from (one for a carrier's output, all inputs for a Concat in a
    Q/DQ model)."""
    g = Graph.of(model)
    out = {}
    for node in g.nodes:
        own = not qdq and (node.op_type in OWN_IN_CACHE or (node.op_type in RESIZE and not _nearest(node)))
        if node.op_type in CARRIERS and not own:
            src = g.data_input(node)
            if src is not None:
                for y in node.output:
                    if y:
                        out[y] = (src,)
        elif node.op_type == CONCAT and qdq:
            srcs = tuple(i for i in node.input if i and i not in g.constants)
            if srcs and node.output:
                out[node.output[0]] = srcs
    return out


_FILES: dict = {}  # the cache rules' tie_sources of model files, worked out once per process


def file_tie_sources(path: str | Path, model: onnx.ModelProto | None = None) -> dict[str, tuple[str, ...]]:
    """tie_sources (the cache's rules) of the model file at `path` (`model`: the same file, loaded already)."""
    return per_file(_FILES, path, lambda: tie_sources(model if model is not None else load_model(path)))


def tie_amax(model: onnx.ModelProto | None, amax: dict, qdq: bool = False, sources: dict | None = None) -> dict:
    """A copy of `amax` with the tied tensors' values replaced (graph order, so chains resolve): the cache's rules,
    or with `qdq` the Q/DQ model's (one scale per Concat). `sources`: tie_sources of the model, worked out before.

    A tensor whose sources are not all in `amax` keeps its own value (nothing to tie to)."""
    sources = tie_sources(model, qdq) if sources is None else sources
    out = dict(amax)
    for y, src in sources.items():  # graph order: tie_sources walks the nodes in order
        if y in out and all(s in out for s in src):
            out[y] = max(out[s] for s in src)
    return out


def tied_count(before: dict, after: dict) -> int:
    return sum(1 for k in after if before.get(k) != after[k])
