"""The model at an input shape it fixes otherwise: `--input-shape` past a placeholder dimension.

Exporters often fix an input at a placeholder size (a batch of 10, a 32x32 image) that the graph does not depend
on. calib takes the given shape when the graph still holds there: ONNX's strict shape inference at the new shape,
then an ONNX Runtime session run once on zeros at it. The model at that shape (the inputs' new dimensions, the
outputs' and intermediate shapes left to inference) is written once (a scratch folder, or the output folder as
<stem>.reshaped.onnx) and everything that follows, the caches, the Q/DQ models and the report, is for it; the log
names the dimensions it overrode. A graph that does not hold (a Reshape to a constant size, a weight of the old
width) is refused in one line that names the flag, the dimension and what failed.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx

from calib.errors import ModelError
from calib.quantize.shapes import dims_text

log = logging.getLogger(__name__)
_SAID: set = set()


def _first(exc: Exception) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines and len(lines[-1]) < 300 else lines[0][:300]) if lines else type(exc).__name__


def _at_shape(model: onnx.ModelProto, dims: dict) -> onnx.ModelProto:
    """A copy of `model` with the inputs in `dims` at those dimensions and no shapes past them but the ones
    inference gives (value_info dropped; the outputs keep their rank, their dims from inference)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for vi in g.input:
        if vi.name in dims:
            shape = vi.type.tensor_type.shape
            for d, v in zip(shape.dim, dims[vi.name]):
                d.Clear()
                if v is not None:
                    d.dim_value = int(v)
    del g.value_info[:]
    for o in g.output:
        if o.type.tensor_type.HasField("shape"):
            for d in o.type.tensor_type.shape.dim:
                d.Clear()
    return m


def _infer(m: onnx.ModelProto, what: str) -> None:
    """Strict shape inference at the new shape (weights left out); the outputs take the dims it gives."""
    from calib.quantize.model import light_model

    try:
        g = onnx.shape_inference.infer_shapes(light_model(m), check_type=True, strict_mode=True,
                                              data_prop=True).graph
    except Exception as exc:
        raise ModelError(f"{what}: ONNX shape inference fails there: {_first(exc)}") from None
    got = {vi.name: vi for vi in g.output}
    for o in m.graph.output:
        if o.name in got and got[o.name].type.tensor_type.HasField("shape"):
            o.type.tensor_type.shape.CopyFrom(got[o.name].type.tensor_type.shape)


def _run_once(m: onnx.ModelProto, info, what: str) -> None:
    """One ONNX Runtime run on zeros at the new shape (free dimensions at 1)."""
    import onnxruntime as ort
    from onnx import helper

    feeds = {}
    for name, dims, et in info.inputs:
        shape = [d if d else 1 for d in dims]
        feeds[name] = np.zeros(shape, helper.tensor_dtype_to_np_dtype(et))
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as exc:
        raise ModelError(f"{what}: ONNX Runtime fails there: {_first(exc)}") from None


def overrides_text(info) -> str:
    """"input 'x' dimension 0 (10 -> 1), dimension 2 (32 -> 64)"."""
    per: dict = {}
    for name, axis, old, new in info.overridden:
        per.setdefault(name, []).append(f"dimension {axis} ({old} -> {new})")
    return "; ".join(f"input '{n}' " + ", ".join(v) for n, v in per.items())


def reshape_model(model, info, where: str = "--input-shape", folder: str | Path | None = None):
    """(model path, info) at the shapes `info` holds: `model` and `info` themselves where no fixed dimension is
    overridden (info.overridden, from fix_input_shapes(..., override=True)), else the model at those shapes,
    checked and written to `folder` (default: a scratch folder), with its info."""
    from calib.quantize.model import derived_model, inspect_model, load_model

    if not info.overridden:
        return model, info
    have = inspect_model(model).input_dims
    if all(have[n][axis] == new for n, axis, _, new in info.overridden):  # at that shape already
        return model, info

    dims = {n: d for n, d, _ in info.inputs if n in {o[0] for o in info.overridden}}
    given = ", ".join(f"{n}={dims_text(d)}" for n, d in dims.items())
    name, axis, old, _ = info.overridden[0]
    what = (f"{where} {given}: dimension {axis} of input '{name}' is fixed at {old} by the model, and the model "
            "does not run at the given shape")
    m = _at_shape(load_model(model), dims)
    _infer(m, what)
    _run_once(m, info, what)
    path, reshaped = derived_model(model, m, info, "reshaped", folder)
    line = (f"{model}: {where} overrides what the model fixes: {overrides_text(info)} (the graph checks and runs "
            f"there); the caches and Q/DQ models are for the model at {given}")
    if line not in _SAID:
        _SAID.add(line)
        log.warning("%s", line)
    return path, reshaped
