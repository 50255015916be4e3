"""Statistics capture without ONNX Runtime's layout reorders.

On x86 ONNX Runtime runs convolutions in a blocked channel layout (NCHWc, its `com.microsoft.nchwc` ops) and
converts to plain NCHW only where a plain op or a graph output needs it. Exposing every activation as an output
therefore adds a ReorderOutput after each convolution, runs the activation (Clip, Relu, Add ...) in NCHW and a
ReorderInput back: on MobileNetV2 those reorders cost more than the convolutions themselves.

Statistics do not depend on the order of the values, only on which values there are. `unblock` takes the graph
ONNX Runtime optimized and returns tensors in the blocked layout where that layout holds exactly the same values:
channels a multiple of 16 (the largest block, so there are no padding channels), element-wise ops with scalar
side inputs or operands of one shape, run on the blocked tensors. The values come back permuted, so this is for
order-free statistics only, never for a comparison element by element.
"""
from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

from calib.quantize.model import infer_shapes

NCHWC = "com.microsoft.nchwc"
BLOCK = 16  # the widest NCHWc block ONNX Runtime uses (AVX-512); a multiple of it is a multiple of 8 too
UNARY = {"Clip", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Softplus",
         "Abs", "Neg", "Exp", "Erf", "Identity"}
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"}


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _scalars(graph) -> set[str]:
    out = {t.name for t in graph.initializer if numpy_helper.to_array(t).size == 1}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            if numpy_helper.to_array(n.attribute[0].t).size == 1:
                out.add(n.output[0])
    return out


def shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """Tensor name -> dims (int or symbolic name) from shape inference on the original model; unknown left out."""
    try:
        g = infer_shapes(model).graph
    except Exception:
        return {}
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
            if None not in dims:
                out[vi.name] = dims
    return out


def unblock(optimized: onnx.ModelProto, wanted: list[str], shapes: dict[str, tuple]) -> tuple[onnx.ModelProto, dict]:
    """Rewrite ONNX Runtime's optimized graph so that `wanted` come out without reorders where that is exact.

    `shapes` are the original model's tensor shapes (for element-wise ops with two operands). Returns the new
    model and {wanted name: output name}; names without a blocked twin map to themselves."""
    g = optimized.graph
    scalars = _scalars(g)
    blocked: dict[str, str] = {}  # plain NCHW tensor -> its twin in the blocked layout
    alias: dict[str, str] = {}  # output of a dropped ReorderInput -> the blocked tensor that replaces it
    nodes = []
    for node in g.node:
        node = _renamed(node, alias)
        if node.domain == NCHWC and node.op_type == "ReorderOutput":
            if _attr(node, "channels_last", 0) == 0 and _attr(node, "channels", 0) % BLOCK == 0:
                blocked[node.output[0]] = node.input[0]
        elif node.domain == NCHWC and node.op_type == "ReorderInput":
            src = node.input[0]
            if _attr(node, "channels_last", 0) == 0 and src in blocked:
                alias[node.output[0]] = blocked[src]
                continue
        elif node.domain in ("", "ai.onnx") and len(node.output) == 1 and _twin_ok(node, blocked, scalars, shapes):
            twin = onnx.NodeProto()
            twin.CopyFrom(node)
            twin.name = (node.name or node.output[0]) + "__blocked"
            del twin.input[:]
            twin.input.extend(blocked.get(i, i) for i in node.input)
            twin.output[0] = node.output[0] + "__blocked"
            blocked[node.output[0]] = twin.output[0]
            nodes.append(twin)
        nodes.append(node)
    names = {w: blocked.get(w, w) for w in wanted}
    outputs = list(dict.fromkeys([o.name for o in g.output if o.name not in names] + list(names.values())))
    nodes = _live(nodes, set(outputs))
    m = onnx.ModelProto()
    m.CopyFrom(optimized)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    del m.graph.output[:]
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs)
    return m, names


def _renamed(node, alias: dict) -> onnx.NodeProto:
    if not any(i in alias for i in node.input):
        return node
    n = onnx.NodeProto()
    n.CopyFrom(node)
    del n.input[:]
    n.input.extend(alias.get(i, i) for i in node.input)
    return n


def _twin_ok(node, blocked: dict, scalars: set, shapes: dict) -> bool:
    """Can this element-wise op run on the blocked twins of its inputs with the same values coming out?"""
    tensors = [i for i in node.input if i and i not in scalars]
    if not tensors or any(i not in blocked for i in tensors):
        return False
    if node.op_type in UNARY:
        return len(tensors) == 1 and tensors[0] == node.input[0]
    if node.op_type in BINARY:
        dims = {shapes.get(i) for i in tensors}
        return len(tensors) == 1 or (len(dims) == 1 and None not in dims)
    return False


def _live(nodes: list, needed: set) -> list:
    """The nodes some output in `needed` depends on, in their order."""
    keep = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    return keep[::-1]
