"""Control flow (If, Loop, Scan) before calibration: an If whose condition the constants decide is folded, and what
stays inside a body is counted.

calib calibrates the tensors of the main graph: ONNX Runtime cannot hand back a tensor of a subgraph, and a Q/DQ
pair inside a body is not placed. An If whose condition is computed from initializers, Constant nodes and inputs
fed one value for every sample (`--const sr=16000`) takes the same branch on every sample: `fold_ifs` inlines that
branch in place of the If (its nodes and tensors keep their names; the If's outputs keep theirs), so its layers
are calibrated and quantized like any other. What stays inside If/Loop/Scan bodies is said in one line
(`ControlFlow.describe`): how many nodes and what share of the model's multiply-adds stay float, and why.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from calib.quantize.outer_scope import subgraphs

log = logging.getLogger(__name__)

BODIES = ("If", "Loop", "Scan")


def _all_nodes(graph: onnx.GraphProto):
    for n in graph.node:
        yield n
        for g in subgraphs(n):
            yield from _all_nodes(g)


def has_control_flow(model: onnx.ModelProto) -> bool:
    return any(n.op_type in BODIES for n in model.graph.node)


def _condition(model: onnx.ModelProto, node, known: Mapping[str, np.ndarray]) -> bool | None:
    """The value of the If `node`'s condition when initializers, Constant nodes and the `known` inputs decide it;
    None when anything else feeds it (an input that varies, an op the reference evaluator lacks)."""
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    made = {o: n for n in g.node for o in n.output}
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {i.name for i in g.input}
    needed, feeds, used_inits, seen = [], {}, [], set()
    stack = [node.input[0]]
    while stack:
        t = stack.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        if t in inits:
            used_inits.append(inits[t])
        elif t in made:
            n = made[t]
            if n.op_type in BODIES or any(True for _ in subgraphs(n)):
                return None
            needed.append(n)
            stack.extend(n.input)
        elif t in graph_inputs and t in known:
            feeds[t] = np.asarray(known[t])
        else:
            return None  # a varying input, or a name from an outer scope
    order = {id(n): i for i, n in enumerate(g.node)}
    nodes = sorted({id(n): n for n in needed}.values(), key=lambda n: order[id(n)])
    sub = helper.make_graph(nodes, "condition", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(
        v.dtype), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(node.input[0], onnx.TensorProto.BOOL, None)], used_inits)
    m = helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)
    try:
        value = ReferenceEvaluator(m).run(None, feeds)[0]
    except Exception as exc:  # an op the reference evaluator lacks: the If stays
        log.debug("If %s: its condition could not be computed (%s)", node.name, exc)
        return None
    value = np.asarray(value)
    return bool(value.reshape(-1)[0]) if value.size == 1 else None


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    for n in _all_nodes(graph):
        for i, t in enumerate(n.input):
            if t == old:
                n.input[i] = new
        for i, t in enumerate(n.output):
            if t == old:
                n.output[i] = new
    for vi in graph.value_info:
        if vi.name == old:
            vi.name = new


def _inline(model: onnx.ModelProto, node, taken: bool) -> bool:
    """Replace the If `node` of the main graph by its taken branch; False (nothing changed) on a name clash."""
    g = model.graph
    name = "then_branch" if taken else "else_branch"
    branch = copy.deepcopy(next(a.g for a in node.attribute if a.name == name))
    outer = {t.name for t in g.initializer} | {i.name for i in g.input} | {o for n in g.node for o in n.output}
    inner = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output}
    if inner & outer:
        log.info("If %s: not folded (its branch's tensor names clash with the graph's: %s)", node.name,
                 sorted(inner & outer)[0])
        return False
    produced = {o: k for k, n in enumerate(branch.node) for o in n.output}
    extra = []
    for bo, io in zip(branch.output, node.output):
        if bo.name in produced and bo.name not in {b.name for b in branch.output if b is not bo}:
            _rename(branch, bo.name, io)
        else:  # an outer tensor or initializer returned as is, or one tensor returned twice
            extra.append(helper.make_node("Identity", [bo.name], [io], name=f"{node.name or 'If'}/{io}"))
    at = list(g.node).index(node)
    nodes = list(g.node)
    nodes[at:at + 1] = list(branch.node) + extra
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(branch.initializer)
    g.value_info.extend(branch.value_info)
    return True


def fold_ifs(model: onnx.ModelProto, known: Mapping[str, np.ndarray] | None = None) -> tuple[onnx.ModelProto, list]:
    """A copy of `model` with every If of its main graph whose condition the constants decide replaced by the
    branch it takes, and [(If node name, branch taken)]. `known`: input -> the value it is fed (as the model
    takes it) for every sample."""
    known = dict(known or {})
    folded: list[tuple[str, str]] = []
    if not has_control_flow(model):
        return model, folded
    model = copy.deepcopy(model)
    changed = True
    while changed:  # a branch inlined may hold an If that the same constants decide
        changed = False
        for node in list(model.graph.node):
            if node.op_type != "If":
                continue
            cond = _condition(model, node, known)
            if cond is not None and _inline(model, node, cond):
                folded.append((node.name or node.output[0], "then" if cond else "else"))
                changed = True
                break
    return model, folded


@dataclass(frozen=True)
class ControlFlow:
    """What stays inside If/Loop/Scan bodies of the main graph: nodes there, and their multiply-adds' share."""

    bodies: dict  # op type -> how many such nodes hold bodies
    nodes: int  # nodes inside bodies (nested ones counted)
    macs: float  # their multiply-adds (per sample, estimated)
    total_macs: float  # the whole model's

    @property
    def share(self) -> float:
        return self.macs / self.total_macs if self.total_macs > 0 else 0.0

    def describe(self) -> str:
        kinds = ", ".join(f"{v} {k}" for k, v in sorted(self.bodies.items()))
        share = f"{100 * self.share:.1f} % of the model's multiply-adds" if self.total_macs > 0 else \
            "no Conv, MatMul or Gemm"
        return (f"{self.nodes} nodes inside the bodies of {kinds} ({share}) stay float: ONNX Runtime cannot hand "
                "back a tensor of a subgraph, so calib neither calibrates nor quantizes them (an If whose "
                "condition --const fixes is folded; fix it with --const, or export the model without control flow)")


def _shapes(model: onnx.ModelProto) -> dict[str, list]:
    from calib.quantize.model import infer_shapes

    try:
        inferred = infer_shapes(model)
    except Exception:  # shapes are for the estimate only
        inferred = model
    out = {}

    def walk(g):
        for vi in (*g.input, *g.output, *g.value_info):
            dims = vi.type.tensor_type.shape.dim
            out[vi.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in dims]
        for n in g.node:
            for s in subgraphs(n):
                walk(s)

    walk(inferred.graph)
    for t in model.graph.initializer:
        out[t.name] = list(t.dims)
    return out


def _macs(node, shapes: dict) -> float:
    """Multiply-adds of one Conv, ConvTranspose, MatMul or Gemm for one sample (batch dims taken as 1)."""
    def size(name):
        s = shapes.get(name)
        return None if s is None else float(np.prod(s)) if s else 1.0

    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1:
        w = size(node.input[1])
        y = shapes.get(node.output[0] if node.op_type == "Conv" else node.input[0])
        spatial = float(np.prod(y[2:])) if y and len(y) > 2 else 1.0
        return (w or 0.0) * spatial
    if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1:
        a, b = shapes.get(node.input[0]), shapes.get(node.input[1])
        if not a or not b:
            return size(node.input[1]) or 0.0
        trans_a = any(x.name == "transA" and x.i for x in node.attribute)
        trans_b = any(x.name == "transB" and x.i for x in node.attribute)
        k = a[-2] if trans_a and len(a) > 1 else a[-1]
        rows = float(np.prod(a)) / max(k, 1)
        n = (b[-2] if trans_b else b[-1]) if len(b) > 1 else 1
        return rows * k * n
    return 0.0


def control_flow(model: onnx.ModelProto) -> ControlFlow | None:
    """What stays inside the bodies of the main graph's If/Loop/Scan nodes; None when it has none."""
    if not has_control_flow(model):
        return None
    shapes = _shapes(model)
    bodies: dict[str, int] = {}
    inside, macs = 0, 0.0
    total = sum(_macs(n, shapes) for n in _all_nodes(model.graph))
    for n in model.graph.node:
        if n.op_type not in BODIES:
            continue
        bodies[n.op_type] = bodies.get(n.op_type, 0) + 1
        for g in subgraphs(n):
            for m in _all_nodes(g):
                inside += 1
                macs += _macs(m, shapes)
    return ControlFlow(bodies, inside, macs, total)
