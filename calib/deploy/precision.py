"""The precision model of a deployed TensorRT engine: which ONNX nodes run in INT8, FP16 or FP32, fused into which
engine layers. The CPU simulation of the deployed configuration follows it (calib.deploy.simulate).

Two sources:
- the engine inspector, where an engine exists (an engine's JSON sidecar, or the inspector's own JSON): what the
  engine did, layer by layer (calib.runners.tensorrt.inspect reads it);
- rules, where no engine exists, checked against real TensorRT 8.6 engines (tests/test_precision.py holds each
  engine's hit rate):
  * implicit INT8 (int8 + fp16 builder flags, a calibration cache): every layer calib's Q/DQ placement quantizes
    (Conv/Gemm/MatMul, pooling, a residual Add fused into its Conv, value-moving layers and Concats between INT8
    layers) runs in INT8, with the activation after a Conv (Relu, Clip, LeakyRelu, SiLU, ...), a bias or scale (Add
    or Mul of a constant) and a residual Add fused into it. Not fused: LeakyRelu or HardSwish after the first Conv on
    a 3-channel input (TensorRT's first-layer kernel), HardSwish after a depthwise Conv (PP-LCNet's engine), a SiLU
    that feeds a residual Add (YOLOv8's bottleneck: SiLU and Add one layer beside the Conv); each runs as an INT8
    point-wise layer of its own. Point-wise layers between INT8 layers (an activation, a product
    of two such tensors, an Identity: a squeeze-excitation block) run in INT8 too. Every other layer runs in
    float: FP32 for element-wise and shape layers (a detector's decoding: the
    YOLOv3-tiny engine ran its 22 such layers in FP32 with FP16 allowed), FP16 for a Conv/Gemm/pooling left out
    of INT8. Measured exceptions the rules do not predict: TensorRT times tactics and may keep the last layers of
    a network in FP16 where that is faster (1 of 8 MobileNetV2 engines ran its 7x7 tail, 4 layers, in FP16);
    asked to keep layers in FP16 (layer precisions) it widens the FP16 region around them.
  * explicit Q/DQ (calib's placement): the nodes with quantized inputs, and the activations fused into them, run
    in INT8; the rest in float.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from calib.errors import CalibError
from calib.quantize.model import node_name
from calib.quantize.placement import BACKBONES, FUSIBLE_ACT, WEIGHTED, place
from calib.quantize.ties import Graph

INT8, FP16, FP32 = "int8", "fp16", "fp32"
MODES = ("implicit", "explicit")
COMPUTE = WEIGHTED | {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
SKIP = frozenset({"Constant", "Shape", "ConstantOfShape"})  # no engine layer of their own


@dataclass(frozen=True)
class PrecisionModel:
    mode: str  # implicit | explicit
    source: str  # inspector | rules
    nodes: dict  # ONNX node name -> int8 | fp16 | fp32
    layers: tuple = ()  # engine layers: tuples of the ONNX node names fused into each
    detail: str = ""  # where it came from: the file, or which rules
    notes: tuple = field(default=())
    # the ONNX tensors the engine stores in INT8 (every reader, float layers too, reads them rounded); None where
    # not known (rules, or an inspector without the tensors' formats): calib.deploy.simulate then guesses
    int8_tensors: frozenset | None = None

    def precision(self, node: str) -> str | None:
        return self.nodes.get(node)

    def float_nodes(self, candidates) -> tuple:
        """The nodes of `candidates` (e.g. the quantizable layers) that this engine runs in float."""
        return tuple(n for n in candidates if self.nodes.get(n, INT8) != INT8)

    def counts(self) -> dict:
        out: dict = {}
        for p in self.nodes.values():
            out[p] = out.get(p, 0) + 1
        return out

    def describe(self) -> str:
        from calib.runners.tensorrt.inspect import counts_text

        c = counts_text(self.counts())
        how = "the engine inspector" if self.source == "inspector" else "rules checked against TensorRT 8.6 engines"
        what = "implicit INT8 (calibration cache, int8 + fp16)" if self.mode == "implicit" else \
            "explicit quantization (Q/DQ model)"
        notes = "".join(f"; {n}" for n in self.notes)
        return f"{what}, precisions from {how}{' (' + self.detail + ')' if self.detail else ''}: ONNX nodes {c}{notes}"

    def to_json(self) -> dict:
        out = {"mode": self.mode, "source": self.source, "detail": self.detail, "counts": self.counts(),
               "float_nodes": sorted(n for n, p in self.nodes.items() if p != INT8)}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def _first_layer(g: Graph, model: onnx.ModelProto, i: int) -> bool:
    """A Conv on a network input with at most 4 channels: TensorRT 8.6 runs it with its 'first layer' INT8 kernel,
    which fused Relu/Clip (MobileNetV2) but not LeakyRelu (YOLOv3-tiny: layer0 and its LeakyRelu are two INT8
    engine layers) nor HardSwish (PP-LCNet)."""
    node = g.nodes[i]
    ins = {v.name: v for v in model.graph.input}
    if not node.input or node.input[0] not in ins:
        return False
    dims = ins[node.input[0]].type.tensor_type.shape.dim
    return len(dims) == 4 and dims[1].HasField("dim_value") and dims[1].dim_value <= 4


def _depthwise(model: onnx.ModelProto, node) -> bool:
    """A grouped Conv with one input channel per group (a depthwise Conv)."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    if group <= 1 or len(node.input) < 2:
        return False
    w = next((t for t in model.graph.initializer if t.name == node.input[1]), None)
    return w is not None and len(w.dims) == 4 and w.dims[1] == 1


def _unfused(g: Graph, model: onnx.ModelProto, i: int) -> frozenset:
    """The activations TensorRT 8.6's INT8 kernel for Conv i does not fuse (each then runs as an INT8 point-wise
    layer of its own, reading the Conv's output rounded): LeakyRelu and HardSwish after the first-layer kernel,
    HardSwish after a depthwise Conv (PP-LCNet on an H100, level 3: its 13 depthwise Convs and its stem Conv each
    wrote INT8 into a HardSwish layer; its 1x1 Convs fused theirs)."""
    if _first_layer(g, model, i):
        return frozenset({"LeakyRelu", "HardSwish"})
    return frozenset({"HardSwish"}) if _depthwise(model, g.nodes[i]) else frozenset()


def _silu(g: Graph, t: str, cons: list[int]) -> list[int] | None:
    """[Sigmoid, Mul] where the two readers of `t` compute t * sigmoid(t), the Sigmoid read by that Mul only."""
    sig = [j for j in cons if g.nodes[j].op_type == "Sigmoid"]
    mul = [j for j in cons if g.nodes[j].op_type == "Mul"]
    if len(sig) != 1 or len(mul) != 1:
        return None
    s_out = g.nodes[sig[0]].output[0]
    if g.consumers.get(s_out, []) != mul or sorted(g.nodes[mul[0]].input) != sorted([t, s_out]):
        return None
    return [sig[0], mul[0]]


def _residual_after(g: Graph, i: int, int8: set) -> int | None:
    """The residual Add (two tensors, quantized by the placement) that node i's output alone feeds, else None."""
    cons = g.consumers.get(g.nodes[i].output[0], [])
    if len(cons) != 1 or g.nodes[cons[0]].op_type != "Add" or cons[0] not in int8:
        return None
    return cons[0] if len([t for t in g.nodes[cons[0]].input if t and t not in g.constants]) == 2 else None


def _silu_residual(g: Graph, conv: int, int8: set) -> list[int]:
    """[Sigmoid, Mul, Add, its activations] behind Conv `conv` where its SiLU feeds a residual Add: TensorRT 8.6 ran
    them as one INT8 point-wise layer beside the Conv (YOLOv8n's bottlenecks on an H100), the Conv writing INT8."""
    t = g.nodes[conv].output[0]
    silu = _silu(g, t, g.consumers.get(t, []))
    add = _residual_after(g, silu[-1], int8) if silu else None
    return [] if add is None else silu + [add] + _fused_followers(g, add, int8)


def _fused_followers(g: Graph, start: int, int8: set, stop: frozenset = frozenset()) -> list[int]:
    """Nodes TensorRT fuses after an INT8 Conv: a chain of single-consumer activations, a bias or scale (an Add or
    Mul of a constant), and a residual Add whose other input the placement quantized, followed by its activation
    (`stop`: activations this Conv's kernel does not fuse, see _unfused)."""
    out, i = [], start
    while True:
        outs = [t for t in g.nodes[i].output if t]
        cons = g.consumers.get(outs[0], []) if outs else []
        silu = _silu(g, outs[0], cons) if len(cons) == 2 and "Sigmoid" not in stop else None
        if silu and _residual_after(g, silu[-1], int8) is not None:  # YOLOv8's bottleneck: the Conv alone, its
            return out  # SiLU and the residual Add an INT8 point-wise layer of their own (_silu_residual)
        if silu:  # x * sigmoid(x): YOLOv8's activation, one point-wise layer with its Conv
            out += silu
            i = silu[-1]
            continue
        if len(cons) != 1:
            return out
        j = cons[0]
        node = g.nodes[j]
        if node.op_type in stop:
            return out
        variable = [t for t in node.input if t and t not in g.constants]
        add = node.op_type == "Add" and (j in int8 or len(variable) == 1)  # a residual Add, or a bias
        if node.op_type in FUSIBLE_ACT or node.op_type == "Mul" or add:  # Mul: a scale, or x * gate
            out.append(j)
            i = j
            continue
        return out


POINTWISE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish"})


def _pointwise_between(g: Graph, int8: set, owner: dict) -> list[list[int]]:
    """Point-wise layers between INT8 layers, which TensorRT 8.6 runs in INT8 too (reading and writing INT8):
    an activation, a product of two such tensors, an Identity (a no-op layer of its own), when every tensor it reads
    comes from an INT8 layer and what it writes reaches one (PP-LCNet's squeeze-excitation: Relu, HardSigmoid * x,
    its Identities). A chain of them with one reader each is one engine layer (HardSigmoid + Mul); a decoding tail
    that reaches no INT8 layer stays in float."""
    cand = {i for i, n in enumerate(g.nodes) if i not in owner and i not in int8 and
            (n.op_type in POINTWISE or n.op_type == "Identity" or
             (n.op_type == "Mul" and len([t for t in n.input if t and t not in g.constants]) == 2))}
    on = set(cand)
    in8 = lambda i: i in on or i in owner or i in int8  # noqa: E731
    changed = True
    while changed:  # the largest set that holds: INT8 in and INT8 out
        changed = False
        for i in sorted(on):
            n = g.nodes[i]
            srcs = [g.producer.get(t) for t in n.input if t and t not in g.constants]
            readers = [c for o in n.output if o for c in g.consumers.get(o, [])]
            if not srcs or any(p is None or not in8(p) for p in srcs) or not any(in8(c) for c in readers):
                on.discard(i)
                changed = True
    groups, seen = [], set()
    for i in sorted(on):
        if i in seen:
            continue
        group = [i]
        seen.add(i)
        while g.nodes[group[-1]].op_type != "Identity":
            cons = g.consumers.get(g.nodes[group[-1]].output[0], [])
            if len(cons) != 1 or cons[0] not in on or cons[0] in seen or g.nodes[cons[0]].op_type == "Identity":
                break
            group.append(cons[0])
            seen.add(cons[0])
        groups.append(group)
    return groups


def _rules(model: onnx.ModelProto, mode: str, exclude=lambda node: False) -> PrecisionModel:
    g = Graph.of(model)
    sites = place(model, exclude)
    int8 = {s.node for s in sites if s.kind == "act"}
    layers, owner = [], {}
    for i, node in enumerate(g.nodes):  # Conv + activation (+ residual Add + activation): one INT8 layer
        if i in int8 and node.op_type in BACKBONES and i not in owner:
            stop = _unfused(g, model, i)
            group = [i] + _fused_followers(g, i, int8, stop)
            for j in group:
                owner[j] = len(layers)
            layers.append(group)
            cons = g.consumers.get(g.nodes[group[-1]].output[0], [])
            follow = _silu_residual(g, group[-1], int8)
            if stop and len(cons) == 1 and g.nodes[cons[0]].op_type in stop:  # the activation it did not fuse:
                follow = [cons[0]] + _fused_followers(g, cons[0], int8)  # an INT8 point-wise layer of its own
            if follow:
                for j in follow:
                    owner[j] = len(layers)
                layers.append(follow)
    for group in _pointwise_between(g, int8, owner):
        for j in group:
            owner[j] = len(layers)
        layers.append(group)
    fused = set(owner)
    for i, node in enumerate(g.nodes):
        if i not in owner and node.op_type not in SKIP:
            owner[i] = len(layers)
            layers.append([i])
    prec = {}
    for i, node in enumerate(g.nodes):
        if node.op_type in SKIP:
            continue
        if i in int8 or i in fused:
            prec[node_name(node)] = INT8
        elif node.op_type in COMPUTE:
            prec[node_name(node)] = FP16
        else:
            prec[node_name(node)] = FP32
    names = tuple(tuple(node_name(g.nodes[j]) for j in grp) for grp in layers)
    detail = "implicit-INT8 rules, TensorRT 8.6" if mode == "implicit" else "calib's Q/DQ placement"
    return PrecisionModel(mode, "rules", prec, names, detail)


def implicit_rules(model: onnx.ModelProto, exclude=lambda node: False) -> PrecisionModel:
    """The rules' prediction for an implicit INT8 build (int8 + fp16 flags, a calibration cache; nodes asked in
    float with `exclude` run in float, and so do the layers that were INT8 only to feed them)."""
    return _rules(model, "implicit", exclude)


def explicit_rules(model: onnx.ModelProto, exclude=lambda node: False) -> PrecisionModel:
    """The rules' prediction for calib's Q/DQ model (nodes left out with `exclude` stay in float)."""
    return _rules(model, "explicit", exclude)


def read_engine_layers(path: str | Path) -> list[dict]:
    """Engine layers from an engine's JSON sidecar ({"layers": [...]}, calib.runners.tensorrt.builder; an engine
    file is read through its sidecar), or from the inspector's own JSON ({"Layers": [...]}, detailed or names
    only)."""
    from calib.io.reading import read_json
    from calib.runners.tensorrt.inspect import MAX_ENGINE_JSON, check_layers, parse_layers

    p = Path(path)
    if p.suffix != ".json" and Path(f"{p}.json").is_file():  # an engine file: its sidecar (calib build writes it)
        p = Path(f"{p}.json")
    data = read_json(p, MAX_ENGINE_JSON, "engine sidecar or inspector JSON", strict=False)
    if isinstance(data, dict) and isinstance(data.get("layers"), list):
        return check_layers(data["layers"], str(p))
    if isinstance(data, dict) and isinstance(data.get("Layers"), list) or isinstance(data, list):
        return parse_layers(data, str(p))
    raise CalibError(f"{p}: no engine layers (expected 'layers' of an engine sidecar or 'Layers' of the "
                     "engine inspector)")


def from_inspector(layers: list[dict], model: onnx.ModelProto, mode: str = "implicit",
                   detail: str = "", fallback: PrecisionModel | None = None) -> PrecisionModel:
    """What an engine ran, per ONNX node, from its inspector layers ({name, precision, fused} each, and
    int8_outputs where the inspector gave the tensors' formats: then the tensors it stores in INT8 are known).

    `fallback` (the rules' prediction): the precision of a node whose engine layer gives none ('?': TensorRT 8.6
    lists no formats for an engine with a shape range, and a pointwise layer has no kernel name to read instead);
    without it such a node counts as float, as a node TensorRT folded away does."""
    from calib.runners.tensorrt.inspect import layer_nodes, node_precisions

    names = [node_name(n) for n in model.graph.node if n.op_type not in SKIP]
    known = set(names)
    prec = node_precisions(layers, names)
    held = [(layer, layer_nodes(layer, known)) for layer in layers]
    guessed = 0
    if fallback is not None:
        for layer, parts in held:
            for part in parts:
                if layer["precision"] == "?" and part not in prec and part in fallback.nodes:
                    prec[part] = fallback.nodes[part]
                    guessed += 1
    g = Graph.of(model)
    for node in g.nodes:  # a Concat TensorRT removed by copying its inputs into its output ('<input> copy' layers):
        # INT8 when what it joins is (its inputs rounded with their own scales, then copied at the Concat's)
        if node.op_type == "Concat" and node_name(node) not in prec:
            made = [g.producer.get(t) for t in node.input if t and t not in g.constants]
            if made and all(i is not None and prec.get(node_name(g.nodes[i])) == INT8 for i in made):
                prec[node_name(node)] = INT8
    groups = [tuple(dict.fromkeys(parts)) for _, parts in held if parts]
    grouped = {n for grp in groups for n in grp}
    groups += [(n,) for n in prec if n not in grouped]
    stored = None
    if layers and all("int8_outputs" in layer for layer in layers):
        tensors = {t for node in model.graph.node for t in node.output}
        stored = frozenset(t for layer in layers for t in layer["int8_outputs"] if t in tensors)
    notes = (f"the rules ({fallback.detail}) give the {guessed} nodes whose engine layers list no precision",) \
        if guessed else ()
    return PrecisionModel(mode, "inspector", prec, tuple(groups), detail, notes=notes, int8_tensors=stored)


def hit_rate(predicted: PrecisionModel, actual: PrecisionModel, nodes=None) -> dict:
    """How often `predicted` matches what an engine did, on the nodes the engine reports (or `nodes`):
    int8 vs float (what the simulation needs) and the exact precision; the misses by name."""
    pool = [n for n in (nodes if nodes is not None else actual.nodes) if n in actual.nodes and n in predicted.nodes]
    is8 = lambda p: p == INT8  # noqa: E731
    side = [n for n in pool if is8(predicted.nodes[n]) == is8(actual.nodes[n])]
    exact = [n for n in pool if predicted.nodes[n] == actual.nodes[n]]
    keep = set(pool)
    groups = lambda pm: {g for g in (tuple(x for x in grp if x in keep) for grp in pm.layers)  # noqa: E731
                         if g and all(pm.nodes.get(x) == INT8 for x in g)}
    act, pred = groups(actual), groups(predicted)
    return {"nodes": len(pool), "int8_vs_float": len(side), "exact": len(exact),
            "misses": sorted(n for n in pool if n not in side),
            "int8_layers": len(act), "fusions": len(act & pred), "fusion_misses": sorted(act - pred)}


def float_input_writers(model: onnx.ModelProto, nodes) -> list[str]:
    """The nodes writing an input of the nodes kept in float (`nodes`), themselves not among them: TensorRT lets
    an INT8 writer write INT8 into a float layer, which then computes on quantized values, unless the writer's
    output type is float (trtexec --layerOutputTypes; calib build types them itself)."""
    floats = set(nodes)
    writer = {o: n for n in model.graph.node for o in n.output}
    out = []
    for n in model.graph.node:
        if node_name(n) not in floats:
            continue
        for i in n.input:
            w = writer.get(i)
            if w is not None and w.op_type not in ("Constant", "Shape") and node_name(w) not in floats \
                    and node_name(w) not in out:
                out.append(node_name(w))
    return out
