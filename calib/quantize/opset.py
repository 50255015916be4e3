"""The opset a Q/DQ model needs, and the in-memory conversion of a model below it.

QuantizeLinear / DequantizeLinear take a per-channel `axis` from opset 13 on (ONNX Runtime refuses it before:
"Unrecognized attribute: axis for operator QuantizeLinear"; at opset 9 there is no QuantizeLinear at all). A model
below opset 13 is converted with onnx.version_converter, as ONNX Runtime's quantizer and ModelOpt do, in memory:
the user's file, and so its sha256 in every cache sidecar, stays what it was.

The converter renames what it replaces (opset 9's Upsample becomes an unnamed Resize with an output called
`_v_10`): the tensor and node names of the original are put back, so that a cache made for the original file
(keyed by tensor name) and a precision model (keyed by node name) apply to the converted graph as they are.
An op the converter cannot carry to opset 13 (ImageScaler, Crop: experimental ops dropped from ONNX) is refused,
by name, before any work.
"""
from __future__ import annotations

import logging

import onnx
from onnx import version_converter

from calib.errors import ModelError
from calib.quantize.model import initializers_not_inputs, lift_ir_version

log = logging.getLogger(__name__)

QDQ_OPSET = 13  # the first opset with QuantizeLinear's per-channel axis
FP16_QDQ_OPSET = 19  # the first with FP16 scales (QuantizeLinear's scale typed as its input, DequantizeLinear's output
# as its scale), as TensorRT 10/11's ONNX parser reads them for a strongly typed network
OPSET_KEY = "calib.opset"  # metadata of a Q/DQ model: its opset
SOURCE_OPSET_KEY = "calib.converted_from_opset"  # and, when converted, the original's
_TEMP = "calib_unnamed_node_"


def model_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain (ai.onnx) opset version (0 when it imports none)."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _label(model: onnx.ModelProto, label: str | None) -> str:
    return label or model.graph.name or "model"


def _unconvertible(model: onnx.ModelProto, opset: int = QDQ_OPSET):
    """The first default-domain node whose op has no version at `opset`, or None."""
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, opset, ""):
            return node
    return None


def _blocking_op(model: onnx.ModelProto, exc: Exception) -> str:
    """The op named in a version_converter error (its messages glue the op to the versions: 'ImageScaler913')."""
    text = str(exc)
    ops = sorted({n.op_type for n in model.graph.node}, key=len, reverse=True)
    hit = next((op for op in ops if op in text), None)
    if hit:
        return f"op {hit}"
    first = text.strip().splitlines()[0] if text.strip() else exc.__class__.__name__
    return f"the converter says: {first}"


_NEEDS = {QDQ_OPSET: "QuantizeLinear's per-channel axis", FP16_QDQ_OPSET: "FP16 Q/DQ scales"}


def _refusal(model: onnx.ModelProto, label: str | None, what: str, target: int = QDQ_OPSET) -> ModelError:
    opset = model_opset(model)
    return ModelError(f"{_label(model, label)}: opset {opset} cannot be converted to opset {target}, which Q/DQ "
                      f"needs ({_NEEDS.get(target, 'Q/DQ')}): {what}; re-export the model at opset "
                      f"{target} or later")


def at_qdq_opset(model: onnx.ModelProto, label: str | None = None, target: int = QDQ_OPSET) -> onnx.ModelProto:
    """`model` itself at opset >= `target` (13; 19 for an FP16+INT8 model); below it, a converted copy with the
    original's tensor and node names.

    A ModelError names the op that blocks the conversion."""
    model = initializers_not_inputs(model)
    opset = model_opset(model)
    if opset >= target:
        return model
    node = _unconvertible(model, target)
    if node is not None:
        name = f" ('{node.name}')" if node.name else ""
        raise _refusal(model, label, f"op {node.op_type}{name} has no opset {target} version", target)
    named = onnx.ModelProto()
    named.CopyFrom(model)
    temp = _name_nodes(named.graph)
    try:
        converted = version_converter.convert_version(named, target)
    except Exception as exc:  # the C++ converter raises RuntimeError / ValidationError
        raise _refusal(model, label, _blocking_op(model, exc), target) from None
    _restore_names(named.graph, converted.graph, temp)
    lift_ir_version(converted)
    _check_names(model, converted, label)
    if not any(p.key == SOURCE_OPSET_KEY for p in converted.metadata_props):
        converted.metadata_props.add(key=SOURCE_OPSET_KEY, value=str(opset))
    log.info("%s: converted in memory from opset %d to %d for Q/DQ", _label(model, label), opset, target)
    return converted


def check_convertible(model: onnx.ModelProto, label: str | None = None) -> None:
    """Refuse, before any statistics pass, a model whose Q/DQ models could not be made (opset < 13 that the
    converter cannot carry)."""
    if model_opset(model) < QDQ_OPSET:
        at_qdq_opset(model, label)


def mark_opset(qdq: onnx.ModelProto) -> None:
    """Write `qdq`'s opset into its metadata (beside the original's, which at_qdq_opset wrote when it converted)."""
    keep = [p for p in qdq.metadata_props if p.key != OPSET_KEY]
    del qdq.metadata_props[:]
    qdq.metadata_props.extend(keep)
    qdq.metadata_props.add(key=OPSET_KEY, value=str(model_opset(qdq)))


def describe_opset(qdq: onnx.ModelProto) -> str:
    """'opset 13' or 'opset 13, converted from 11', from a Q/DQ model's metadata."""
    props = {p.key: p.value for p in qdq.metadata_props}
    text = f"opset {props.get(OPSET_KEY, model_opset(qdq))}"
    return text + (f", converted from {props[SOURCE_OPSET_KEY]}" if SOURCE_OPSET_KEY in props else "")


def _name_nodes(graph: onnx.GraphProto) -> set[str]:
    """Give every unnamed node a unique temporary name (the names that say which node became which)."""
    used = {n.name for n in graph.node}
    temp = set()
    for i, node in enumerate(graph.node):
        if not node.name:
            name = f"{_TEMP}{i}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)
            temp.add(name)
    return temp


def _restore_names(before: onnx.GraphProto, after: onnx.GraphProto, temp: set[str]) -> None:
    """Put back the tensor names the converter replaced (read through a consumer that kept its name) and the
    node names it dropped (on the node that now makes the first output); then unname the temporary names."""
    by_name = {n.name: n for n in after.node if n.name}
    present = {t for n in after.node for t in n.output} | {i.name for i in after.input} | \
        {t.name for t in after.initializer}
    originals = {t for n in before.node for t in n.output} | {i.name for i in before.input}
    readers: dict[str, list] = {}
    for node in before.node:
        for k, t in enumerate(node.input):
            readers.setdefault(t, []).append((node.name, k))
    rename = {}
    for node in before.node:
        for t in node.output:
            if not t or t in present:
                continue
            for reader, k in readers.get(t, []):
                twin = by_name.get(reader)
                if twin is not None and k < len(twin.input) and twin.input[k] not in originals:
                    rename[twin.input[k]] = t
                    break
    for node in after.node:
        for k, t in enumerate(node.input):
            node.input[k] = rename.get(t, t)
        for k, t in enumerate(node.output):
            node.output[k] = rename.get(t, t)
    for vi in list(after.output) + list(after.value_info):
        vi.name = rename.get(vi.name, vi.name)
    maker = {t: n for n in after.node for t in n.output}
    for node in before.node:
        if node.name not in by_name and node.output and node.output[0] in maker:
            twin = maker[node.output[0]]
            if not twin.name or twin.name not in {n.name for n in before.node}:
                twin.name = node.name
    for node in after.node:
        if node.name in temp:
            node.name = ""


def _check_names(model: onnx.ModelProto, converted: onnx.ModelProto, label: str | None) -> None:
    have = {t for n in converted.graph.node for t in n.output}
    used = {t for n in model.graph.node for t in n.input} | {o.name for o in model.graph.output}
    lost = [t for n in model.graph.node if n.op_type != "Constant" for t in n.output
            if t and t in used and t not in have]
    if lost:
        raise ModelError(f"{_label(model, label)}: converting opset {model_opset(model)} to {QDQ_OPSET} lost "
                         f"tensor '{lost[0]}' ({len(lost)} in all), which caches made for the model name; "
                         f"re-export the model at opset {QDQ_OPSET} or later")
