"""Input shapes: the ones a user fixes (--input-shape NAME=DIMS, recipe `input_shapes`, like trtexec's --shapes),
the batch every run of a model with a fixed batch must have, and the activation bytes one sample costs, from ONNX
shape inference before any data is read."""
from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from calib.errors import ModelError
from calib.quantize.model import ModelInfo, light_model

log = logging.getLogger(__name__)

_BYTES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
          onnx.TensorProto.DOUBLE: 8}


MAX_DIM = (1 << 63) - 1  # ONNX stores a dimension as an int64


def _known(d) -> bool:
    return isinstance(d, int) and d > 0


def dims_text(dims: Sequence) -> str:
    return "x".join(str(d) if _known(d) else "?" for d in dims)


def fix_input_shapes(info: ModelInfo, shapes: Mapping[str, Sequence[int]], where: str = "input_shapes",
                     override: bool = False) -> ModelInfo:
    """`info` with the dynamic or placeholder (0, -1) input dimensions that `shapes` (input -> dims) fixes; an
    unknown input, a wrong rank or a dimension the model fixes otherwise is a ModelError naming `where` (the
    option the user typed). With `override`, a dimension the model fixes otherwise is taken and recorded in
    `overridden`: calib.runners.reshape then checks that the model holds and runs at it, and writes that model."""
    inputs = {n: (dims, et) for n, dims, et in info.inputs}
    out, overridden = [], []
    for name, want in shapes.items():
        want = tuple(int(d) for d in want)
        if name not in inputs:
            raise ModelError(f"{where} {name}={dims_text(want)}: the model has no input '{name}' "
                             f"(its inputs: {', '.join(inputs)})")
        have = inputs[name][0]
        if len(want) != len(have):
            raise ModelError(f"{where} {name}={dims_text(want)}: input '{name}' has {len(have)} dimensions "
                             f"({dims_text(have)}), {len(want)} given")
        if any(d < 1 for d in want):
            raise ModelError(f"{where} {name}={dims_text(want)}: every dimension must be >= 1")
        if any(d > MAX_DIM for d in want):
            raise ModelError(f"{where} {name}={dims_text(want)}: a dimension past {MAX_DIM} (ONNX's int64 limit)")
        for i, (h, w) in enumerate(zip(have, want)):
            if _known(h) and h != w and override:
                overridden.append((name, i, h, w))
            elif _known(h) and h != w:
                raise ModelError(f"{where} {name}={dims_text(want)}: dimension {i} of input '{name}' is fixed at "
                                 f"{h} by the model ({dims_text(have)})")
    for name, (dims, et) in inputs.items():
        fixed = tuple(shapes[name]) if name in shapes else tuple(d if _known(d) else None for d in dims)
        out.append((name, tuple(int(d) if d is not None else None for d in fixed), et))
    return dataclasses.replace(info, inputs=tuple(out), overridden=tuple(overridden))


def fixed_batch(info: ModelInfo) -> int | None:
    """The number of samples every run must hold: the inputs' batch dimension (the first, or the one
    info.layout names) where the model (or --input-shape) fixes it, the same for every input; None where the batch
    is free. Inputs without a batch axis (one value for every sample) do not count."""
    lay = info.layout
    firsts = {dims[lay.axis(n)] if dims and _known(dims[lay.axis(n)]) else None
              for n, dims, _ in info.inputs if lay.axis(n) is not None}
    if len(firsts) == 1:
        return firsts.pop()
    return None


def tensor_sizes(model: onnx.ModelProto, info: ModelInfo, dims: Mapping[str, tuple] | None) -> tuple[dict, int] | None:
    """(float tensor -> bytes for the inputs at `dims`, samples those dims hold) from ONNX shape inference; None
    where an input's size is not known (the batch dimension may be left free: the model's fixed batch, else 1).
    `dims` are canonical (samples first, as a batch holds them: info.layout turns them into the model's)."""
    lay = info.layout
    dims = {n: lay.model_dims(n, d) for n, d in dims.items()} if dims else info.input_dims
    batch = fixed_batch(info) or 1
    at, first = {}, {}
    for name, d in dims.items():
        d, ax = tuple(d), lay.axis(name)
        if ax is not None and len(d) > ax and not _known(d[ax]):
            d = d[:ax] + (batch,) + d[ax + 1:]
        if not all(_known(x) for x in d):
            return None
        at[name] = d
        if ax is not None:
            first[name] = d[ax] if len(d) > ax else 1
    light = light_model(model, at)
    try:
        g = onnx.shape_inference.infer_shapes(light, data_prop=True).graph
    except Exception as exc:  # a model shape inference fails on: counted from the inputs alone
        log.warning("shape inference failed (%s); activation sizes unknown", exc)
        g = light.graph
    sizes = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim):
            sizes[vi.name] = math.prod(int(d.dim_value) for d in t.shape.dim) * _BYTES.get(t.elem_type, 4)
    return sizes, max(first.values()) if first else 1


def sample_bytes(model: onnx.ModelProto, info: ModelInfo, dims: Mapping[str, tuple] | None = None) -> int | None:
    """Bytes of every float activation (graph inputs and node outputs, ModelInfo.activations) for one sample, from
    ONNX shape inference with the inputs at `dims` (default: info's, which must then be all known; the batch
    dimension may be left free). None where an input's size is not known. Tensors whose shape inference cannot
    tell count as the largest one it can."""
    got = tensor_sizes(model, info, dims)
    if got is None:
        return None
    sizes, per = got
    largest = max((sizes[n] for n in info.activations if n in sizes), default=0)
    total, unknown = 0, 0
    for name in info.activations:
        if name in sizes:
            total += sizes[name]
        else:
            unknown += 1
            total += largest
    if unknown:
        log.info("%s: %d of %d activations without a size from shape inference (each counted as the largest)",
                 info.path, unknown, len(info.activations))
    return max(1, total // max(1, per))


def live_bytes(model: onnx.ModelProto, info: ModelInfo, dims: Mapping[str, tuple] | None = None) -> int | None:
    """Bytes of the float tensors alive at once, at the worst node, in a run that returns only the graph outputs
    (each tensor held from the node that makes it to its last reader, the outputs to the end), for one sample;
    a tensor of unknown size counts as the largest known. None where an input's size is not known."""
    got = tensor_sizes(model, info, dims)
    if got is None:
        return None
    sizes, per = got
    largest = max((sizes[n] for n in info.activations if n in sizes), default=0)
    acts = set(info.activations)

    def size(name: str) -> int:
        return sizes.get(name, largest) if name in acts else 0

    from calib.quantize.liveness import peak_bytes

    given = [n for n, _, _ in info.inputs]  # the caller's arrays: held throughout
    known = {n: size(n) for n in set(acts) | set(sizes)}
    peak = peak_bytes(list(model.graph.node), known, given, [o.name for o in model.graph.output])
    return max(1, peak // max(1, per))


def activation_sizes(model: onnx.ModelProto, info: ModelInfo, dims: Mapping[str, tuple] | None = None
                     ) -> dict[str, int] | None:
    """Bytes of each float activation (ModelInfo.activations) for one sample, from ONNX shape inference with the
    inputs at `dims` (as sample_bytes). A tensor shape inference cannot size counts as its node's inputs: their sum
    for a Concat, the largest of them otherwise (a reshape, a split's part or an elementwise result is no larger),
    and as the largest activation where no input has a size. None where an input's size is not known."""
    got = tensor_sizes(model, info, dims)
    if got is None:
        return None
    sizes, per = dict(got[0]), got[1]
    largest = max((sizes[n] for n in info.activations if n in sizes), default=0)
    for node in model.graph.node:
        known = [sizes[x] for x in node.input if x in sizes]
        guess = (sum(known) if node.op_type == "Concat" else max(known)) if known else largest
        for o in node.output:
            sizes.setdefault(o, guess)
    return {n: sizes.get(n, largest) // max(1, per) for n in info.activations}
