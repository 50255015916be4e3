"""What TensorRT chose per layer, from the engine inspector (detailed profiling verbosity).

In implicit INT8 TensorRT runs a layer in INT8 only where that is faster, and fuses layers: an engine layer is
named after the network layers it fused (' + ' between them). This module turns the inspector's JSON into one
precision per engine layer and per ONNX node, so the CPU simulation can be told which nodes TensorRT left in
float.
"""
from __future__ import annotations

import json
import re

from calib.errors import CalibError
from calib.runners.tensorrt import compat

MAX_ENGINE_JSON = 256 << 20  # an engine sidecar or inspector JSON larger than this is not one
_ORDER = {"int8": 0, "fp8": 0, "fp16": 1, "bf16": 1, "tf32": 2, "fp32": 2}


def format_precision(text: str) -> str | None:
    """'Thirty-two wide channel vectorized row major Int8 format' -> 'int8'; 'Row major linear FP32' -> 'fp32'."""
    t = text.lower()
    for key, value in (("int8", "int8"), ("fp8", "fp8"), ("bf16", "bf16"), ("fp16", "fp16"), ("half", "fp16"),
                       ("fp32", "fp32"), ("float", "fp32"), ("int32", None), ("bool", None), ("int64", None)):
        if key in t:
            return value
    return None


def has_format(tensor) -> bool:
    """Whether the inspector gave a tensor's format: TensorRT 8.6 writes 'N/A due to dynamic shapes' for every tensor
    of an engine with a shape range, with or without an execution context (measured on an H100)."""
    text = str(tensor.get("Format/Datatype", "")) if isinstance(tensor, dict) else ""
    return bool(text) and not text.startswith("N/A")


def int8_outputs(layer: dict) -> list[str] | None:
    """The names of the tensors an inspector layer writes in an INT8 format: every reader of such a tensor reads
    values rounded with its scale, a layer in float too (TensorRT 8.6 lets an INT8 layer write INT8 into a float
    layer, through a reformat). None where an output has no format: then which tensors are INT8 is not known."""
    outs = [t for t in layer.get("Outputs") or [] if isinstance(t, dict)]
    if not all(has_format(t) for t in outs):
        return None
    return [str(t["Name"]) for t in outs if "Name" in t and format_precision(str(t["Format/Datatype"])) == "int8"]


def _tensor_precisions(tensors) -> list[str]:
    out = []
    for t in tensors or []:
        if has_format(t):
            p = format_precision(str(t["Format/Datatype"]))
            if p:
                out.append(p)
    return out


# What a kernel computes in, from its name: checked against the formats of 8,389 layers of TensorRT 8.6 engines
# (H100 and H200, benchmarks/trt86-*; tests/test_tensorrt_inspect.py): none disagreed, 53 named no type
# ('..._i8i8_i8i32_f32...' reads INT8 and accumulates in INT32: the first match wins)
_KERNEL = (("int8", re.compile(r"i8[if]\d|_i8_|int8|imma", re.I)), ("fp16", re.compile(r"fp?16|hmma|half", re.I)),
           ("fp32", re.compile(r"fp?32|ffma|sgemm|float", re.I)))
_WEIGHTS = {"int8": "int8", "half": "fp16", "float": "fp32"}


def kernel_precision(layer: dict) -> str | None:
    """The precision of a layer's kernel, where the inspector gave no formats: its tactic's name, else its weights'
    type ('Weights': {'Type': 'Int8'}); None for a layer with neither (a pointwise, reformat or shuffle layer)."""
    tactic = str(layer.get("TacticName", ""))
    for precision, pattern in _KERNEL:
        if pattern.search(tactic):
            return precision
    weights = layer.get("Weights")
    return _WEIGHTS.get(str(weights.get("Type", "")).lower()) if isinstance(weights, dict) else None


def layer_precision(layer: dict) -> str:
    """The precision an engine layer computes in: its lowest float input precision (a conv fed INT8 runs an
    INT8 kernel even when it writes FP32), else its outputs' (a constant), else its kernel's (an engine with a
    shape range lists no formats on TensorRT 8.6), else '?': not known."""
    ins = _tensor_precisions(layer.get("Inputs"))
    outs = _tensor_precisions(layer.get("Outputs"))
    pool = ins or outs
    return min(pool, key=_ORDER.__getitem__) if pool else (kernel_precision(layer) or "?")


def check_layers(layers, where: str) -> list[dict]:
    """`layers` as calib records them ([{name, precision, fused: [names]}, ...]), checked field by field; a wrong
    type is a CalibError naming `where` and the layer."""
    if not isinstance(layers, list):
        raise CalibError(f"{where}: engine layers must be a list, got {type(layers).__name__}")
    for k, layer in enumerate(layers):
        if not isinstance(layer, dict):
            raise CalibError(f"{where}: engine layer {k} must be an object, got {type(layer).__name__}")
        fused = layer.get("fused")
        if not isinstance(fused, list) or not all(isinstance(f, str) for f in fused):
            raise CalibError(f"{where}: engine layer {k}: 'fused' must be a list of layer names, got {fused!r:.60}")
        if not isinstance(layer.get("name", ""), str):
            raise CalibError(f"{where}: engine layer {k}: 'name' must be a string, got {layer['name']!r:.60}")
        prec = layer.get("precision")
        if prec not in _ORDER and prec != "?":
            raise CalibError(f"{where}: engine layer {k}: 'precision' must be one of {', '.join(_ORDER)} or '?', "
                             f"got {prec!r:.60}")
        outs = layer.get("int8_outputs")
        if outs is not None and (not isinstance(outs, list) or not all(isinstance(o, str) for o in outs)):
            raise CalibError(f"{where}: engine layer {k}: 'int8_outputs' must be a list of tensor names, "
                             f"got {outs!r:.60}")
        layer.setdefault("name", " + ".join(fused))
    return layers


def parse_layers(info: str | dict | list, where: str = "engine inspector") -> list[dict]:
    """Inspector output (JSON text or parsed) -> [{name, type, precision, tactic, fused, int8_outputs}] in engine
    order (int8_outputs only where the inspector gives the tensors' formats: detailed verbosity)."""
    data = json.loads(info, strict=False) if isinstance(info, str) else info  # TensorRT leaves raw newlines in strings
    layers = data.get("Layers", []) if isinstance(data, dict) else data
    if not isinstance(layers, list):
        raise CalibError(f"{where}: 'Layers' must be a list, got {type(layers).__name__}")
    out = []
    for k, layer in enumerate(layers):
        if not isinstance(layer, (str, dict)) or not isinstance(layer.get("Name", "") if isinstance(layer, dict)
                                                                else layer, str):
            raise CalibError(f"{where}: inspector layer {k} must be a name or an object with a string 'Name', "
                             f"got {layer!r:.60}")
        if isinstance(layer, str):  # LAYER_NAMES_ONLY verbosity: names, nothing else
            out.append({"name": layer, "type": "?", "precision": "?", "tactic": "", "fused": split_fused(layer)})
            continue
        name = str(layer.get("Name", ""))
        row = {"name": name, "type": str(layer.get("LayerType", "?")), "precision": layer_precision(layer),
               "tactic": str(layer.get("TacticName", "")), "fused": split_fused(name)}
        stored = int8_outputs(layer) if isinstance(layer.get("Outputs"), list) else None
        if stored is not None:
            row["int8_outputs"] = stored
        out.append(row)
    return out


def inspector_layers(engine, trt, context=None) -> list[dict]:
    """parse_layers of a deserialized engine's inspector (empty where the TensorRT version has none); `context`: an
    execution context with its input shapes set (a runner's), which the inspector is pointed at, as TensorRT's
    documentation of IEngineInspector asks for concrete shapes.

    TensorRT 8.6 lists the tensors of an engine with a shape range without formats ('N/A due to dynamic shapes'),
    through a context too (an H100), so none is made for the inspection alone; the layers' precisions then come
    from their kernels (kernel_precision) or stay '?'. Read as FP32, YOLOv8n's INT8 engines (batch 1-8) had been
    'all FP32'."""
    if engine is None or not hasattr(engine, "create_engine_inspector"):
        return []
    inspector = engine.create_engine_inspector()
    if context is not None:
        compat.inspect_through(inspector, context)
    return parse_layers(inspector.get_engine_information(trt.LayerInformationFormat.JSON))


def split_fused(name: str) -> list[str]:
    """Network layer names inside an engine layer name: 'a + b', 'PWN(a, b)', 'a || b' (two layers reading the same
    input run as one: P-Net's two heads on an H100), 'Reformatting CopyNode for ...'."""
    if name.startswith("Reformatting CopyNode"):
        return []
    parts = []
    for piece in re.split(r" \+ | \|\| ", name):
        piece = piece.strip()
        m = re.fullmatch(r"PWN\((.*)\)", piece)
        if m:
            parts += [p.strip() for p in _split_top(m.group(1))]
        elif piece:
            parts.append(piece)
    return parts


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (PWN nests: 'PWN(PWN(a, b), c)')."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    res = []
    for p in out:
        m = re.fullmatch(r"\s*PWN\((.*)\)\s*", p)
        res += _split_top(m.group(1)) if m else [p]
    return res


def layer_nodes(layer: dict, known) -> list[str]:
    """The ONNX nodes (of the set `known`) an engine layer holds ('node_of_<name>': TensorRT's name for an unnamed
    ONNX node)."""
    parts = [p[len("node_of_"):] if p not in known and p.startswith("node_of_") else p for p in layer["fused"]]
    return [p for p in parts if p in known]


def node_precisions(layers: list[dict], node_names) -> dict:
    """ONNX node name -> the precision of the engine layer that holds it (nodes TensorRT folded away are absent)."""
    known = set(node_names)
    out = {}
    for layer in layers:
        if layer["precision"] == "?":
            continue
        for part in layer_nodes(layer, known):
            prev = out.get(part)
            if prev is None or _ORDER[layer["precision"]] < _ORDER[prev]:
                out[part] = layer["precision"]
    return out


def summary(layers: list[dict]) -> dict:
    """Count of engine layers per precision, reformat layers apart."""
    counts: dict = {}
    for layer in layers:
        key = "reformat" if layer["name"].startswith("Reformatting") else layer["precision"]
        counts[key] = counts.get(key, 0) + 1
    return counts


def counts_text(counts: dict) -> str:
    """{'int8': 60, 'fp32': 3} -> 'fp32 3, int8 60': a summary's counts as the logs and reports print them."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
