"""ONNX model loading and the list of tensors that calibration needs."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, numpy_helper

from calib.errors import ModelError
from calib.io.files import per_file, sha256_file
from calib.quantize.layout import Layout

log = logging.getLogger(__name__)

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    sha256: str
    inputs: tuple[tuple[str, tuple, int], ...]  # (name, shape with None for dynamic, elem_type)
    outputs: tuple[str, ...]
    activations: tuple[str, ...]  # float graph inputs and node outputs, topological order
    op_types: dict  # tensor name -> producing op type ("Input" for graph inputs)
    layout: Layout = Layout()  # where each input's and output's samples are (calib.quantize.layout)
    overridden: tuple = ()  # (input, axis, the model's dim, the given dim): --input-shape past a fixed dimension

    @property
    def input_dims(self) -> dict:
        """Input name -> its shape as the file has it (None for a dynamic dimension)."""
        return {n: d for n, d, _ in self.inputs}


def load_model(path: str | Path) -> onnx.ModelProto:
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: model file not found")
    if path.stat().st_size == 0:
        raise ModelError(f"{path}: empty file, not an ONNX model")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and others
        raise ModelError(f"{path}: not a readable ONNX model ({exc.__class__.__name__}: {exc})") from None
    if not model.HasField("graph") or not (model.graph.node or model.graph.input):
        raise ModelError(f"{path}: not an ONNX model (no graph; protobuf reads almost any bytes as a message)")
    return initializers_not_inputs(model)


QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def initializers_not_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` itself, or for IR < 4 (where every initializer is listed as a graph input too, and ONNX Runtime
    feeds only the others) a copy whose graph inputs are the real ones, at the IR version its opsets need (at
    least 4): its initializers are weights, never data to feed, and what calib writes from it passes ONNX's
    checker (IR 3 wants every initializer, a Q/DQ scale included, among the inputs)."""
    if model.ir_version >= 4:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    lift_ir_version(m)
    init = {t.name for t in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in init]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


def lift_ir_version(model: onnx.ModelProto) -> None:
    """Raise `model`'s IR version to what its opsets need (the version converter leaves an old one)."""
    try:
        need = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except (TypeError, ValueError):  # an opset version this onnx does not know: left as it is
        return
    model.ir_version = max(model.ir_version, need, 4)


def check_fp32(model: onnx.ModelProto, label, allow_qdq: bool = False, hint: str = "--allow-qdq") -> None:
    """Refuse a model that holds Q/DQ nodes already where an FP32 model is to be quantized (it would be quantized a
    second time without a word), unless the user says so (`hint`: the flag or recipe key that does)."""
    n = sum(1 for node in model.graph.node if node.op_type in QDQ_OPS)
    if n and not allow_qdq:
        raise ModelError(f"{label}: holds {n} QuantizeLinear/DequantizeLinear nodes already (a Q/DQ model, not an "
                         f"FP32 one): give the FP32 model, or {hint} to quantize it again")


def _dims(value_info) -> tuple:
    shape = value_info.type.tensor_type.shape
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in shape.dim)


_LIGHT_MIN = 64  # float initializers with more values than this stand in for themselves as typed graph inputs


def light_model(model: onnx.ModelProto, dims=None) -> onnx.ModelProto:
    """The model for shape inference without its weights: float initializers with more than _LIGHT_MIN values
    become typed graph inputs. `dims` (input -> dims) sets those inputs' shapes; the graph's own value_info and
    output shapes, which may contradict them, are then left out."""
    dims = dims or {}
    g0 = model.graph
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = g0.name
    g.node.extend(g0.node)
    for vi in g0.input:
        if vi.name in dims:
            vi = onnx.helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(dims[vi.name]))
        g.input.append(vi)
    if dims:
        g.output.extend(onnx.helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None)
                        for o in g0.output)
    else:
        g.output.extend(g0.output)
        g.value_info.extend(g0.value_info)
    declared = {i.name for i in g0.input}
    for t in g0.initializer:
        size = 1
        for d in t.dims:
            size *= d
        if size > _LIGHT_MIN and t.data_type in FLOAT_TYPES:
            if t.name not in declared:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            g.initializer.append(t)
    return light


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference without copying the weights: large float initializers become typed graph inputs.

    Shape inference reads initializers' values only where they decide a shape (Reshape's shape, Pad's pads,
    Resize's scales...): integer or small tensors, which are kept. The weights of a model are neither, and
    onnx's inference serializes the whole model, so leaving them out makes it tens of times faster."""
    return onnx.shape_inference.infer_shapes(light_model(model))


def node_name(node) -> str:
    """A node's name, or its first output's where it has none (as calib names layers everywhere)."""
    return node.name or node.output[0]


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type that the graph declares or shape inference gives (weights left out)."""
    try:
        inferred = infer_shapes(model)
    except Exception as exc:
        log.warning("shape inference failed (%s); tensor types come from the graph only", exc)
        inferred = model
    g = inferred.graph
    types = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


_INFOS: dict = {}  # the commands inspect one model several times


def derived_model(source: str | Path, model: onnx.ModelProto, info: ModelInfo, suffix: str,
                  folder: str | Path | None = None) -> tuple[Path, ModelInfo]:
    """A model made from `source` (folded, reshaped) written as `<stem>.<suffix>.onnx` into `folder` (default: a
    scratch folder, one per model's bytes), and `info` with the facts of the written file (path, sha256, outputs,
    activations, op types); the inputs, their shapes and layout stay `info`'s."""
    import dataclasses
    import hashlib

    from calib.io.files import atomic_write_bytes, scratch_dir

    data = model.SerializeToString()
    folder = folder or scratch_dir(hashlib.sha256(data).hexdigest()[:16])
    path = Path(folder) / f"{Path(source).stem}.{suffix}.onnx"
    atomic_write_bytes(path, data)
    new = inspect_model(path, model)
    return path, dataclasses.replace(info, path=new.path, sha256=new.sha256, outputs=new.outputs,
                                     activations=new.activations, op_types=new.op_types)


def inspect_model(path: str | Path, model: onnx.ModelProto | None = None) -> ModelInfo:
    """What calibration needs to know of the model at `path` (`model`: the same file, loaded already)."""
    path = Path(path)
    return per_file(_INFOS, path, lambda: _inspect(path, model if model is not None else load_model(path)))


def _inspect(path: Path, model: onnx.ModelProto) -> ModelInfo:
    g = model.graph
    init = {t.name for t in g.initializer}
    types = elem_types(model)
    inputs = tuple(
        (vi.name, _dims(vi), vi.type.tensor_type.elem_type) for vi in g.input if vi.name not in init
    )
    if not inputs:
        raise ModelError(f"{path}: the model has no inputs (nothing to calibrate on)")
    acts: list[str] = []
    ops: dict[str, str] = {}
    for name, _, et in inputs:
        if et in FLOAT_TYPES:
            acts.append(name)
            ops[name] = "Input"
    for node in g.node:
        if node.op_type == "Constant":
            continue
        for out in node.output:
            if out and types.get(out, TensorProto.FLOAT) in FLOAT_TYPES and out not in ops:
                acts.append(out)
                ops[out] = node.op_type
    return ModelInfo(
        path=path,
        sha256=sha256_file(path),
        inputs=inputs,
        outputs=tuple(o.name for o in g.output),
        activations=tuple(acts),
        op_types=ops,
    )


def output_names(model: onnx.ModelProto, names: list[str]) -> list[str]:
    """The graph outputs of with_outputs(model, names), without making the copy."""
    present = {o.name for o in model.graph.output}
    return [o.name for o in model.graph.output] + [n for n in names if n not in present]


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of `model` whose graph outputs also include `names` (types left to the runtime)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    present = {o.name for o in m.graph.output}
    for n in names:
        if n not in present:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    return m


def node_attr(node, name, default=None):
    """An attribute's value, or `default`."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def constant_value(model: onnx.ModelProto, name: str):
    """The value of an initializer or Constant output, or None (not a constant, or no name)."""
    if not name:
        return None
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            return numpy_helper.to_array(n.attribute[0].t)
    return None


def relu_bounds(model: onnx.ModelProto, node) -> tuple[float, float] | None:
    """(0, hi) for Relu (hi = inf) or a Clip with constant bounds 0 and hi > 0; otherwise None."""
    if node.op_type == "Relu":
        return 0.0, float("inf")
    if node.op_type != "Clip":
        return None
    if len(node.input) > 1:  # opset >= 11: min/max as inputs
        bounds = []
        for i, default in ((1, -float("inf")), (2, float("inf"))):
            name = node.input[i] if len(node.input) > i else ""
            value = constant_value(model, name)
            if name and value is None:
                return None  # bounds computed at run time
            bounds.append(float(value) if value is not None else default)
        lo, hi = bounds
    else:
        lo, hi = float(node_attr(node, "min", -3.4e38)), float(node_attr(node, "max", 3.4e38))
    return (lo, hi) if lo == 0.0 and hi > 0 else None
