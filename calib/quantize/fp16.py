"""The FP16+INT8 model for a strongly typed TensorRT build (10.x with --stronglyTyped, 11.x always).

A strongly typed network runs each layer in the type the ONNX model gives it, so the float layers of calib's Q/DQ
model (calib.quantize.qdq) must be FP16 in the file to run in FP16. `to_fp16` turns a Q/DQ model at opset >= 19
(FP16 Q/DQ scales) into that model:

- every float layer FP16 except the nodes in `keep` (calib.quantize.fp16_keep says which and why), the nodes whose
  ONNX schema has no FP16 type, custom-domain nodes (plugins) and nodes holding subgraphs: those stay FP32;
- a QuantizeLinear's scale has its input's type (opset 19: x and y_scale share T1); a DequantizeLinear's scale, so
  its output, has the type its reader runs in: one DequantizeLinear per reader type where readers differ, so that a
  quantized layer reads FP16 (or FP32 where kept) straight from its DequantizeLinear, as TensorRT fuses it;
- the scales are FP16 values in both types, so that Q and DQ of one tensor agree: activations rounded to the
  nearest FP16, weights up (no weight clips); weights behind a Q/DQ pair are stored in their layer's type;
- a Cast where a tensor's producer and reader run in different types (one per tensor and type), and at the model's
  inputs and outputs, which stay FP32 unless io_type is fp16;
- inputs fixed to float by their schema (Resize's scales, NonMaxSuppression's boxes) stay FP32.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from calib.errors import ModelError
from calib.quantize.model import elem_types, node_name
from calib.quantize.opset import FP16_QDQ_OPSET, mark_opset, model_opset
from calib.quantize.outer_scope import outer_reads, rename_reads

log = logging.getLogger(__name__)

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
FLOATS = (F32, F16)
TYPE_NAMES = {F32: "fp32", F16: "fp16"}
_F16_TYPE = "tensor(float16)"
_F16_MIN_NORMAL = float(np.finfo(np.float16).tiny)
_F16_MAX = float(np.finfo(np.float16).max)


@dataclass
class Fp16Result:
    model: onnx.ModelProto
    fp32_nodes: dict = field(default_factory=dict)  # node name -> why it stays FP32 (schema, plugin, subgraph)
    casts: int = 0


def _slot_types(node, n_in: int, n_out: int, opset: int):
    """(input slot kinds, output slot kinds, node has FP16) from the node's schema at the model's `opset`: per slot
    'var' (follows the node's type) or 'f32' (fixed to float); None where the op has no schema here."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:
        return None
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}

    def kinds(formal, n):
        out, ok = [], True
        for i in range(n):
            if not formal:
                out.append("var")
                continue
            f = formal[min(i, len(formal) - 1)]
            types = allowed.get(f.type_str, {f.type_str})
            if _F16_TYPE in types:
                out.append("var")
            elif "tensor(float)" in types:
                out.append("f32" if f.type_str not in allowed else "var")
                ok = ok and f.type_str not in allowed  # a type variable without FP16: the node stays FP32
            else:
                out.append("other")
        return out, ok

    ins, ok_in = kinds(schema.inputs, n_in)
    outs, ok_out = kinds(schema.outputs, n_out)
    return ins, outs, ok_in and ok_out


def _round_scale(scale: np.ndarray, up: bool) -> np.ndarray:
    """float32 scale values representable in FP16 (nearest, or the next one up), never zero or infinite."""
    s = np.asarray(scale, np.float32)
    with np.errstate(over="ignore"):  # past FP16 only where to_fp16 keeps the pair FP32 (_past_fp16): clipped here
        h = s.astype(np.float16)
    if up:
        low = h.astype(np.float32) < s
        h = np.where(low, np.nextafter(h, np.float16(np.inf)), h)
    tiny = np.float16(np.finfo(np.float16).smallest_subnormal)
    h = np.clip(h, tiny, np.finfo(np.float16).max).astype(np.float16)
    return h.astype(np.float32)


def _as(arr: np.ndarray, typ: int) -> np.ndarray:
    """`arr` stored as `typ`; a value past FP16 becomes inf there, as the layers kept FP32 for it never read it."""
    with np.errstate(over="ignore"):
        return arr.astype(np.float16 if typ == F16 else np.float32)


class Names:
    """Fresh tensor and node names: `base`, else `base_2`, `base_3`..., none of them taken."""

    def __init__(self, taken):
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


class _Writer:
    """Builds the FP16 graph node by node, keeping per tensor its variants by type."""

    def __init__(self, g: onnx.GraphProto):
        self.inits = {t.name: t for t in g.initializer}
        self.nodes: list = []
        self.new_inits: list = []
        self.variant: dict[str, dict[int, str]] = {}  # tensor -> type -> name of that tensor in that type
        self.casts = 0
        self.past_fp16: set[str] = set()  # tensors whose Q/DQ scale FP16 cannot hold: their pair stays FP32
        self.weight_q: set[str] = set()  # outputs of QuantizeLinear nodes that quantize a weight
        self.names = Names({t for n in g.node for t in list(n.input) + list(n.output)} | set(self.inits)
                           | {i.name for i in g.input})
        self.fresh = self.names.fresh

    def produced(self, name: str, typ: int) -> None:
        self.variant.setdefault(name, {})[typ] = name

    def init_as(self, name: str, typ: int, scale: str | None = None) -> str:
        """The float initializer `name` in type `typ` (a converted copy where needed); scale: 'act'/'weight' rounds
        a Q/DQ scale to FP16 values in either type."""
        have = self.variant.setdefault(name, {})
        if typ in have:
            return have[typ]
        t = self.inits[name]
        arr = numpy_helper.to_array(t)
        if scale is not None:
            arr = _round_scale(arr, up=scale == "weight")
        if typ == t.data_type and scale is None:
            have[typ] = name
            return name
        new = self.fresh(f"{name}_{TYPE_NAMES[typ]}")
        self.new_inits.append(numpy_helper.from_array(_as(arr, typ), new))
        have[typ] = new
        return new

    def scale_past_fp16(self, name: str) -> bool:
        """Whether the Q/DQ scale initializer `name` holds a value past FP16's largest (65504)."""
        arr = numpy_helper.to_array(self.inits[name])
        return bool(arr.size) and float(np.max(np.abs(arr))) > _F16_MAX

    def get(self, name: str, typ: int) -> str:
        """`name` in type `typ`: itself, an initializer copy, or a Cast (made once, right here)."""
        if not name:
            return name
        have = self.variant.get(name, {})
        if typ in have:
            return have[typ]
        if name in self.inits:
            return self.init_as(name, typ)
        if not have:
            raise ModelError(f"tensor '{name}' is read before it is made (the graph is not in topological order)")
        new = self.fresh(f"{name}_{TYPE_NAMES[typ]}")
        self.nodes.append(helper.make_node("Cast", [next(iter(have.values()))], [new], to=typ,
                                           name=self.fresh(f"{name}_cast_{TYPE_NAMES[typ]}")))
        self.casts += 1
        have[typ] = new
        return new


def _has_subgraph(node) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _readers(g) -> dict[str, list]:
    out: dict[str, list] = {}
    for n in g.node:
        for k, t in enumerate(n.input):
            if t:
                out.setdefault(t, []).append((n, k))
    return out


def to_fp16(qdq: onnx.ModelProto, keep: dict[str, str] | None = None, io_type: str = "fp32") -> Fp16Result:
    """The FP16+INT8 model of the Q/DQ model `qdq` (opset >= 19); `keep`: node name -> why it stays FP32."""
    opset = model_opset(qdq)
    if opset < FP16_QDQ_OPSET:
        raise ModelError(f"the FP16+INT8 model needs opset {FP16_QDQ_OPSET} (FP16 Q/DQ scales); this one is at "
                         f"{opset}")
    if io_type not in ("fp32", "fp16"):
        raise ModelError(f"io type '{io_type}': fp32 or fp16")
    keep = dict(keep or {})
    g0 = qdq.graph
    types = elem_types(qdq)
    for t in g0.initializer:
        types[t.name] = t.data_type
    readers = _readers(g0)
    w = _Writer(g0)
    io = F16 if io_type == "fp16" else F32
    fp32_nodes: dict[str, str] = {}

    def is_float(t: str) -> bool:
        return bool(t) and types.get(t) in FLOATS

    # each node's type: FP16 unless kept, schema-less, plugin or with a subgraph
    prec: dict[int, int] = {}
    slots: dict[int, tuple] = {}
    for i, n in enumerate(g0.node):
        key = node_name(n)
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx"):
            continue
        st = _slot_types(n, len(n.input), len(n.output), opset) if n.domain in ("", "ai.onnx") else None
        why = keep.get(key)
        if why is None and n.domain not in ("", "ai.onnx"):
            why = f"custom op {n.domain}::{n.op_type} (a plugin's types are its own)"
        elif why is None and _has_subgraph(n):
            why = f"{n.op_type} holds a subgraph"
        elif why is None and (st is None or not st[2]):
            if any(is_float(t) for t in list(n.input) + list(n.output)):
                why = f"{n.op_type} has no FP16 type in ONNX"
        if why is not None:
            fp32_nodes[key] = why
        prec[i] = F32 if why is not None else F16
        slots[i] = st

    # a DequantizeLinear runs in the type of its readers (one copy per type); a QuantizeLinear in its input's
    def reader_type(n, k) -> int:
        j = index[id(n)]
        if n.op_type == "QuantizeLinear":
            return q_type(n)
        st = slots.get(j)
        if st is not None and k < len(st[0]) and st[0][k] == "f32":
            return F32
        return prec.get(j, F32)

    index = {id(n): i for i, n in enumerate(g0.node)}
    dq_of = {n.output[0]: n for n in g0.node if n.op_type == "DequantizeLinear"}
    made: dict[str, int] = {}  # tensor -> the type its producer writes

    def q_type(n) -> int:
        x = n.input[0]
        if x in w.inits:  # a weight: the type of the layer that reads its DequantizeLinear
            dq_readers = [reader_type(r, k) for d in readers.get(n.output[0], []) if d[0].op_type == "DequantizeLinear"
                          for r, k in readers.get(d[0].output[0], [])]
            return F16 if F16 in dq_readers else F32
        if x in made:
            return made[x]
        return io if any(x == i.name for i in g0.input) else F32

    for gi in g0.input:
        if is_float(gi.name):
            made[gi.name] = io
            w.produced(gi.name, io)
    subnormal: list[str] = []
    for i, n in enumerate(g0.node):
        if n.op_type == "DequantizeLinear":
            continue  # written where read, in the reader's type
        if n.op_type == "QuantizeLinear":
            typ = q_type(n)
            is_weight = n.input[0] in w.inits
            if w.scale_past_fp16(n.input[1]):  # the pair stays FP32 with the cache's own scale
                typ = F32
                w.past_fp16.add(n.input[0])
                s = w.init_as(n.input[1], F32)
            else:
                s = w.init_as(n.input[1], typ, "weight" if is_weight else "act")
            x = w.get(n.input[0], typ)
            if numpy_helper.to_array(w.inits[n.input[1]]).min() < _F16_MIN_NORMAL:
                subnormal.append(n.input[0])
            q = onnx.NodeProto()
            q.CopyFrom(n)
            q.input[0], q.input[1] = x, s
            w.nodes.append(q)
            if is_weight:
                w.weight_q.add(n.output[0])
            continue
        node = onnx.NodeProto()
        node.CopyFrom(n)
        typ = prec[i]
        st = slots[i]
        for k, t in enumerate(n.input):
            if not t:
                continue
            if t in dq_of:
                node.input[k] = _dq(w, dq_of[t], reader_type(n, k))
                continue
            if not is_float(t):
                continue
            if n.op_type in ("Cast", "Shape", "Size", "CastLike") and k == 0:
                if t not in w.inits:
                    node.input[k] = w.get(t, made.get(t, F32))
                continue
            want = F32 if (st is not None and k < len(st[0]) and st[0][k] == "f32") else typ
            node.input[k] = w.get(t, want)
        if _has_subgraph(n):  # its bodies read outer tensors by name: in FP32, as the node runs
            reads = {t: (_dq(w, dq_of[t], F32) if t in dq_of else w.get(t, F32))
                     for t in outer_reads(n) if t in dq_of or is_float(t)}
            rename_reads(node, {k: v for k, v in reads.items() if k != v})
        if n.op_type == "Cast":
            to = next(a for a in node.attribute if a.name == "to")
            if to.i == F32 and typ == F16:
                to.i = F16
        for a in node.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type in FLOATS:
                arr = numpy_helper.to_array(a.t)
                a.t.CopyFrom(numpy_helper.from_array(_as(arr, typ), a.t.name))
        w.nodes.append(node)
        for k, t in enumerate(n.output):
            if not is_float(t):
                continue
            if n.op_type == "Cast":
                out_t = next(a.i for a in node.attribute if a.name == "to")
            elif st is not None and k < len(st[1]) and st[1][k] == "f32":
                out_t = F32
            else:
                out_t = typ
            made[t] = out_t
            w.produced(t, out_t)
    outputs = []
    for o in g0.output:
        if not is_float(o.name):
            outputs.append(o)
            continue
        have = made.get(o.name, F32)
        if have != io:
            # the producer writes `o` in its type under another name; the model's output is the Cast
            inner = w.fresh(f"{o.name}_{TYPE_NAMES[have]}")
            _rename(w.nodes, o.name, inner)
            w.nodes.append(helper.make_node("Cast", [inner], [o.name], to=io, name=w.fresh(f"{o.name}_cast_output")))
            w.casts += 1
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(o)
        vi.type.tensor_type.elem_type = io
        outputs.append(vi)
    m = onnx.ModelProto()
    m.CopyFrom(qdq)
    g = m.graph
    del g.node[:]
    g.node.extend(w.nodes)
    used = {t for n in g.node for t in (*n.input, *outer_reads(n))}  # a body reads initializers by name too
    keep_inits = [t for t in g0.initializer if t.name in used] + [t for t in w.new_inits if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_inits)
    del g.value_info[:]
    _inputs_after_initializers(g, {t.name for t in g0.initializer})
    for gi in g.input:
        if is_float(gi.name) and gi.name not in _inits_of(g):
            gi.type.tensor_type.elem_type = io
    del g.output[:]
    g.output.extend(outputs)
    mark_opset(m)
    if w.past_fp16:
        log.warning("%d Q/DQ scales past FP16's largest value (%g) stay FP32, their Q/DQ pairs FP32: %s",
                    len(w.past_fp16), _F16_MAX, ", ".join(sorted(w.past_fp16)[:5])
                    + (f" and {len(w.past_fp16) - 5} more" if len(w.past_fp16) > 5 else ""))
    if subnormal:
        log.warning("%d Q/DQ scales below FP16's smallest normal (%.3g) lose precision in FP16: %s",
                    len(set(subnormal)), _F16_MIN_NORMAL, ", ".join(sorted(set(subnormal))[:5]))
    return Fp16Result(m, fp32_nodes, w.casts)


def _inits_of(g: onnx.GraphProto) -> dict[str, int]:
    return {t.name: t.data_type for t in g.initializer}


def _inputs_after_initializers(g: onnx.GraphProto, old_inits: set) -> None:
    """An old exporter's initializers listed as graph inputs (IR < 4 style): the entry of one dropped here (unused,
    or replaced by a converted copy) goes with it, else ONNX Runtime would ask for it as data; a kept one's entry
    takes the initializer's type."""
    kept = _inits_of(g)
    inputs = [i for i in g.input if i.name not in old_inits or i.name in kept]
    for i in inputs:
        if i.name in kept:
            i.type.tensor_type.elem_type = kept[i.name]
    del g.input[:]
    g.input.extend(inputs)


def _rename(nodes, old: str, new: str) -> None:
    for n in nodes:
        for k, t in enumerate(n.output):
            if t == old:
                n.output[k] = new
        for k, t in enumerate(n.input):
            if t == old:
                n.input[k] = new


def _dq(w: _Writer, dq, typ: int) -> str:
    """The output of DequantizeLinear `dq` in type `typ` (its scale in that type), written once per type."""
    have = w.variant.setdefault(dq.output[0], {})
    if typ in have:
        return have[typ]
    x = dq.input[0]  # a Q's output or an INT8 weight initializer
    is_weight = x in w.weight_q or x in w.inits
    if w.scale_past_fp16(dq.input[1]) and typ != F32:  # an FP32 pair; an FP16 reader reads it through a Cast
        _dq(w, dq, F32)
        return w.get(dq.output[0], typ)
    scale = w.init_as(dq.input[1], typ, None if w.scale_past_fp16(dq.input[1]) else
                      "weight" if is_weight else "act")
    node = onnx.NodeProto()
    node.CopyFrom(dq)
    node.input[1] = scale
    if have:  # another type's copy has the original name
        node.output[0] = w.fresh(f"{dq.output[0]}_{TYPE_NAMES[typ]}")
        node.name = w.fresh(f"{dq.name}_{TYPE_NAMES[typ]}")
    w.nodes.append(node)
    have[typ] = node.output[0]
    return node.output[0]
