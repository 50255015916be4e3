"""Where Q/DQ pairs go so that TensorRT fuses them and runs the model in INT8 (explicit quantization).

Rules, each checked on a real engine (benchmarks/RESULTS_QDQ.md) and on small graphs (tests/test_placement.py):
- Conv / ConvTranspose / Gemm / MatMul: the data input, and the weight (per output channel), whether an initializer
  or a constant behind Constant / Identity / Cast / Reshape / Transpose nodes (calib.quantize.weights). A bias
  stays float.
  MatMul with two activations (attention's Q*K^T and attention*V) gets both inputs quantized.
- Nothing between a Conv and the activation after it (Relu, Clip, LeakyRelu, Sigmoid*Mul as SiLU, ...): TensorRT
  fuses Conv + activation + the next layer's Q into one INT8 kernel with an INT8 output.
- AveragePool / GlobalAveragePool / MaxPool / GlobalMaxPool: their input (TensorRT runs pooling in INT8).
- A residual Add (one input made by a Conv, with or without its fusible activation, that nothing else reads): the
  other, residual input, so that Conv + Add (+ activation) fuses. When both inputs come from Convs, the residual is
  the one nearer to their common ancestor (the skip connection). An Add with no Conv-made input (a box decoder's
  x + w, an attention mask) gets nothing.
- Layers that only move values (MaxPool, Resize, Reshape, Transpose, Slice, Pad, ... see calib.quantize.ties.CARRIERS) and
  Concat: when their output is quantized, their inputs are quantized too, with the output's scale, so that the
  whole chain runs in INT8 with no re-quantization (Concat: one scale, the largest of its inputs', shared by all).
- By default (stem_output=True; False keeps it float): the output of a stem Conv (it reads a model input of at most
  4 channels) whose only reader is a LeakyRelu. TensorRT 8.6 does not fuse that LeakyRelu into a 3-channel Conv
  (YOLOv3-tiny's layer0, in the implicit and the explicit engine alike); with no scale between them the Conv writes
  FP16 with a slow i8-in/f16-out kernel and the LeakyRelu runs in FP16, where the implicit engine runs both in INT8.
  Quantizing it makes the Q/DQ engine as fast as the implicit one, at the implicit engine's accuracy (one more
  rounding: YOLOv3-tiny's box SQNR 41.7 -> 36.0 dB, the implicit engine's 36.1); the report shows both rows
  (benchmarks/RESULTS_QDQ.md).
- Everything else (Softmax, LayerNorm, Sigmoid/Exp of a detector head, its box decoding) stays in float.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from calib.quantize.model import node_name
from calib.quantize.ties import CARRIERS, CONCAT, Graph

WEIGHTED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
POOLING = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
BACKBONES = frozenset({"Conv", "ConvTranspose"})
# single-input layers TensorRT fuses into the Conv before them
FUSIBLE_ACT = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu",
                         "Selu", "Softplus", "BatchNormalization", "Mish", "Gelu"})


@dataclass(frozen=True)
class Site:
    node: int  # index of the consuming node
    input: int  # which of its inputs
    kind: str  # "act" | "weight"
    tensor: str  # the tensor quantized on that edge
    scale_of: str  # the tensor whose amax gives the scale (itself, or a Concat's output)
    group: tuple = ()  # Concat outputs whose largest amax the scale is (one scale for a whole Concat group)

    def scale_from(self) -> tuple:
        return self.group or (self.scale_of,)


def _backbone(g: Graph, tensor: str, depth: int = 4) -> int | None:
    """The Conv that makes `tensor` through fusible layers only (bias/scale constants, activations, SiLU)."""
    for _ in range(depth + 1):
        i = g.producer.get(tensor)
        if i is None:
            return None
        node = g.nodes[i]
        if node.op_type in BACKBONES:
            return i
        live = [t for t in node.input if t and t not in g.constants]
        if node.op_type in FUSIBLE_ACT or (node.op_type in ("Add", "Mul", "Div", "Sub") and len(live) == 1):
            tensor = live[0] if live else None
        elif node.op_type == "Mul" and len(live) == 2:  # SiLU: x * Sigmoid(x)
            a, b = live
            pa, pb = g.node_of(a), g.node_of(b)
            if pb is not None and pb.op_type in ("Sigmoid", "HardSigmoid") and pb.input[0] == a:
                tensor = a
            elif pa is not None and pa.op_type in ("Sigmoid", "HardSigmoid") and pa.input[0] == b:
                tensor = b
            else:
                return None
        else:
            return None
        if tensor is None:
            return None
    return None


def _distances(g: Graph, tensor: str, limit: int = 4096) -> dict[int, int]:
    """Node index -> fewest edges back from `tensor`'s producer (breadth first, bounded)."""
    start = g.producer.get(tensor)
    if start is None:
        return {}
    dist = {start: 0}
    frontier = [start]
    while frontier and len(dist) < limit:
        nxt = []
        for i in frontier:
            for t in g.nodes[i].input:
                j = g.producer.get(t)
                if j is not None and j not in dist:
                    dist[j] = dist[i] + 1
                    nxt.append(j)
        frontier = nxt
    return dist


def residual_input(g: Graph, node) -> int | None:
    """Which input of a two-input Add is the residual one to quantize (None: not a residual Add)."""
    if len(node.input) != 2 or any(t in g.constants or t not in g.producer for t in node.input):
        return None
    a, b = node.input
    ba, bb = _backbone(g, a), _backbone(g, b)
    if ba is None and bb is None:
        return None
    da, db = _distances(g, a), _distances(g, b)
    common = [(da[k] + db[k], k) for k in da.keys() & db.keys()]
    lca = min(common)[1] if common else None
    if ba is not None and bb is not None:
        if ba == bb:
            return None
        # the input further from the common ancestor is the Conv branch; the nearer one is the skip connection
        return 0 if (lca is None or da[lca] <= db[lca]) else 1
    conv_side, other = (0, 1) if ba is not None else (1, 0)
    if lca is not None and lca == (ba if ba is not None else bb):
        return None  # the Conv feeds both sides (ConvNeXt-like): not a residual join
    if len(g.consumers.get(node.input[conv_side], [])) != 1:
        return None  # the Conv's output is read elsewhere: no Conv + Add fusion to make
    return other


STEM_CHANNELS = 4


def stem_outputs(model: onnx.ModelProto, excluded=lambda node: False) -> list[str]:
    """The stem Conv outputs the default placement quantizes (stem_output=True), by tensor name."""
    return [s.tensor for s in _stem_outputs(model, Graph.of(model), excluded)]


def _stem_outputs(model: onnx.ModelProto, g: Graph, excluded) -> list[Site]:
    """The LeakyRelu input of a stem Conv (one reading a model input of <= 4 channels) that nothing else reads."""
    small = set()
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == 4 and dims[1].HasField("dim_value") and dims[1].dim_value <= STEM_CHANNELS:
            small.add(vi.name)
    out = []
    for ni, node in enumerate(g.nodes):
        if node.op_type != "Conv" or g.data_input(node) not in small or excluded(node):
            continue
        readers = g.consumers.get(node.output[0], [])
        if len(readers) == 1 and g.nodes[readers[0]].op_type == "LeakyRelu" and not excluded(g.nodes[readers[0]]):
            out.append(Site(readers[0], 0, "act", node.output[0], node.output[0]))
    return out


def _seeds(g: Graph, excluded) -> list[Site]:
    out = []
    for ni, node in enumerate(g.nodes):
        if excluded(node):
            continue
        if node.op_type in WEIGHTED:
            for ii, name in enumerate(node.input[:2]):
                if name:  # a constant (initializer, or one behind Constant/Identity/Cast/Reshape/Transpose)
                    out.append(Site(ni, ii, "weight" if name in g.constants else "act", name, name))
        elif node.op_type in POOLING and node.input and node.input[0] not in g.constants:
            out.append(Site(ni, 0, "act", node.input[0], node.input[0]))
        elif node.op_type == "Add":
            r = residual_input(g, node)
            if r is not None:
                out.append(Site(ni, r, "act", node.input[r], node.input[r]))
    return out


def _spread(g: Graph, sites: list[Site], excluded) -> list[Site]:
    """Quantize the inputs of value-moving layers and Concats whose output is quantized, with the same scale."""
    seen = {(s.node, s.input) for s in sites}
    out = list(sites)
    todo = [s for s in sites if s.kind == "act"]
    while todo:
        s = todo.pop()
        j = g.producer.get(s.tensor)
        if j is None:
            continue
        node = g.nodes[j]
        if excluded(node):
            continue
        if node.op_type in CARRIERS:
            ins = [0] if node.input and node.input[0] not in g.constants else []
        elif node.op_type == CONCAT:
            ins = [k for k, t in enumerate(node.input) if t and t not in g.constants]
        else:
            continue
        for k in ins:
            if (j, k) in seen:
                continue
            seen.add((j, k))
            new = Site(j, k, "act", node.input[k], s.scale_of if node.op_type in CARRIERS else node.output[0])
            out.append(new)
            todo.append(new)
    return out


def _groups(g: Graph, sites: list[Site]) -> list[Site]:
    """One scale for every tensor joined to a quantized Concat through value-moving layers.

    A tensor that feeds a Concat and also another quantized layer (YOLOv8's C2f: a Split output read by a residual
    Add and by the Concat) then gets one Q/DQ, not two with different scales and a re-quantization between them."""
    parent: dict[str, str] = {}

    def find(t):
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    acts = [s for s in sites if s.kind == "act"]
    quantized = {s.tensor for s in acts}
    for s in acts:
        union(s.tensor, s.scale_of)
    for node in g.nodes:  # a value-moving layer with both sides quantized: one scale across it
        if node.op_type in CARRIERS and node.input and node.input[0] in quantized:
            for y in node.output:
                if y in quantized:
                    union(node.input[0], y)
    members: dict[str, set] = {}
    for t in quantized | {s.scale_of for s in acts}:
        members.setdefault(find(t), set()).add(t)
    concats = {root: ts for root, ts in members.items()
               if any(g.producer.get(t) is not None and g.nodes[g.producer[t]].op_type == CONCAT for t in ts)}
    out = []
    for s in sites:
        group = concats.get(find(s.tensor)) if s.kind == "act" else None
        out.append(Site(s.node, s.input, s.kind, s.tensor, s.scale_of, tuple(sorted(group))) if group else s)
    return out


RESIDUAL_BRANCHES = ("float", "conv", "act")
# the default: on an H100 (TensorRT 8.6, level 3) YOLOv8n-320's Q/DQ engine ran 1.02-1.07x the implicit one with it,
# 0.95-0.99x with the branch float (benchmarks/RESULTS_QDQ.md)
RESIDUAL_BRANCH = "conv"


def _residual_branches(g: Graph, excluded, where: str) -> list[Site]:
    """For a residual Add whose Conv branch reaches it through an activation (YOLOv8's bottleneck: Conv -> SiLU ->
    Add), which TensorRT 8.6 does not fuse into the Conv: where="conv" quantizes the Conv's output (the Conv writes
    INT8, activation + Add run as one INT8 pointwise layer: what the implicit engine does); where="act" the
    activation's output (Conv + activation fuse and write INT8, the Add runs alone in INT8: ModelOpt's placement)."""
    out = []
    for ni, node in enumerate(g.nodes):
        if node.op_type != "Add" or excluded(node):
            continue
        r = residual_input(g, node)
        if r is None:
            continue
        branch = node.input[1 - r]
        conv = _backbone(g, branch)
        if conv is None or g.nodes[conv].output[0] == branch or excluded(g.nodes[conv]):
            continue  # no activation between: TensorRT fuses Conv + Add already
        if where == "act":
            out.append(Site(ni, 1 - r, "act", branch, branch))
            continue
        t = g.nodes[conv].output[0]
        for j in g.consumers.get(t, []):
            out += [Site(j, k, "act", t, t) for k, x in enumerate(g.nodes[j].input) if x == t]
    return out


def residual_adds(model: onnx.ModelProto, excluded=lambda node: False) -> list[str]:
    """The residual Adds whose Conv branch reaches them through an activation (the ones --residual-branch places
    a pair for), by node name."""
    g = Graph.of(model)
    return list(dict.fromkeys(node_name(g.nodes[s.node]) for s in _residual_branches(g, excluded, "act")))


def place(model: onnx.ModelProto, excluded=lambda node: False, stem_output: bool = True,
          residual_branch: str = RESIDUAL_BRANCH) -> list[Site]:
    """Every edge TensorRT should see quantized, in graph order. residual_branch: "conv" (the default), "act" or
    "float": see _residual_branches."""
    if residual_branch not in RESIDUAL_BRANCHES:
        raise ValueError(f"residual_branch '{residual_branch}' is not one of {', '.join(RESIDUAL_BRANCHES)}")
    g = Graph.of(model)
    seeds = _seeds(g, excluded) + (_stem_outputs(model, g, excluded) if stem_output else [])
    if residual_branch != "float":
        seeds += _residual_branches(g, excluded, residual_branch)
    sites = _groups(g, _spread(g, seeds, excluded))
    return sorted(sites, key=lambda s: (s.node, s.input))
