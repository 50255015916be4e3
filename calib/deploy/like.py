"""A Q/DQ placement that follows an engine TensorRT already built: the nodes that engine ran in FP16 or FP32 get no
Q/DQ, so the explicit engine keeps the same float layers (TensorRT 8.6-10 users build the implicit INT8 engine once,
read which layers TensorRT found faster in FP16, and carry that choice to the Q/DQ model that TensorRT 10/11 need).

The engine is read from its inspector layers: an engine sidecar (<engine>.json, written by `calib build`), the
engine file itself (its sidecar is read), or a JSON list of inspector layers."""
from __future__ import annotations

from pathlib import Path

import onnx

from calib.errors import CalibError
from calib.io.reading import read_json
from calib.runners.tensorrt.inspect import MAX_ENGINE_JSON, check_layers

FLOAT = ("fp16", "fp32")


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def engine_layers(path) -> list[dict]:
    """The inspector layers recorded for an engine: from its sidecar, a sidecar itself, or a list of layers."""
    p = Path(path)
    side = p if p.suffix == ".json" else p.with_suffix(p.suffix + ".json")
    if not side.exists():
        raise CalibError(f"{p}: no engine sidecar {side.name} with the engine's layers (written by calib build)")
    data = read_json(side, MAX_ENGINE_JSON, "engine sidecar")
    layers = data.get("layers") if isinstance(data, dict) else data
    if not isinstance(layers, list):
        raise CalibError(f"{side}: holds no engine inspector layers (a 'layers' list with 'fused' names)")
    return check_layers(layers, str(side))


def float_nodes(model: onnx.ModelProto, layers: list[dict], label: str = "engine") -> list[str]:
    """Names of the nodes of `model` that the engine's `layers` ran in FP16/FP32 and that calib's placement would
    quantize (the others are float already); a CalibError when the layers name none of the model's nodes."""
    from calib.quantize.qdq import excluded_from, quantized_inputs
    from calib.runners.tensorrt.inspect import node_precisions

    names = [n.name for n in model.graph.node if n.name]
    prec = node_precisions(layers, names)
    if not prec:
        raise CalibError(f"{label}: its layers name none of the model's nodes (an engine of another model?)")
    placed = {model.graph.node[i].name for i, _, _ in quantized_inputs(model, excluded_from(()))}
    return [n for n in names if prec.get(n) in FLOAT and n in placed]


def exclusions_like(model: onnx.ModelProto, path) -> list[str]:
    """--exclude patterns (exact node names) for the nodes the engine at `path` ran in float."""
    return [_glob_escape(n) for n in float_nodes(model, engine_layers(path), str(path))]
