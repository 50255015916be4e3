"""Layer filters checked against the model before any work: a pattern that matches nothing is an error naming it.

Two kinds of filters name layers of an ONNX model:
- `--exclude` (Q/DQ placement, per-layer float): a node/output name glob or `op:<OpType>` (calib.quantize.qdq.Exclusions);
- `--layer-precision PATTERN=PREC` (TensorRT builds): a layer name glob, `re:REGEX` or `op:<OpType>`, where
  TensorRT names a layer after its ONNX node, and `op:` also takes a TensorRT layer type in capitals
  (op:CONVOLUTION), which only the builder can check.

An exclusion that matches nodes none of which has a quantized input in the Q/DQ placement (a Sigmoid, a Concat:
they already run in float) would change nothing: that is refused too, saying what it matched.
"""
from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Sequence

import onnx

from calib.errors import CalibError

# TensorRT's LayerType names: `op:CONVOLUTION=fp16` is matched by the builder against the network's layers,
# which only TensorRT can list; such a pattern is left to the builder's own check.
TRT_LAYER_TYPES = frozenset((
    "CONVOLUTION", "FULLY_CONNECTED", "ACTIVATION", "POOLING", "LRN", "SCALE", "SOFTMAX", "DECONVOLUTION",
    "CONCATENATION", "ELEMENTWISE", "PLUGIN", "UNARY", "PADDING", "SHUFFLE", "REDUCE", "TOPK", "GATHER",
    "MATRIX_MULTIPLY", "RAGGED_SOFTMAX", "CONSTANT", "RNN_V2", "IDENTITY", "PLUGIN_V2", "SLICE", "SHAPE",
    "PARAMETRIC_RELU", "RESIZE", "TRIP_LIMIT", "RECURRENCE", "ITERATOR", "LOOP_OUTPUT", "SELECT", "FILL",
    "QUANTIZE", "DEQUANTIZE", "CONDITION", "CONDITIONAL_INPUT", "CONDITIONAL_OUTPUT", "SCATTER", "EINSUM",
    "ASSERTION", "ONE_HOT", "NON_ZERO", "GRID_SAMPLE", "NMS", "REVERSE_SEQUENCE", "NORMALIZATION", "CAST",
    "PLUGIN_V3", "SQUEEZE", "UNSQUEEZE", "CUMULATIVE", "DYNAMIC_QUANTIZE"))


def _nodes(model: onnx.ModelProto) -> list:
    return [n for n in model.graph.node if n.op_type != "Constant"]


def _keys(node) -> list[str]:
    return [k for k in (node.name, *node.output) if k]


def _near(word: str, choices: Iterable[str]) -> str:
    near = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _no_match(flag: str, pattern: str, model: onnx.ModelProto, label: str, what: str = "node") -> CalibError:
    nodes = _nodes(model)
    if pattern.startswith("op:"):
        ops = sorted({n.op_type for n in nodes})
        hint = _near(pattern[3:], ops) or f" (its op types: {', '.join(ops[:12])}{', ...' if len(ops) > 12 else ''})"
        return CalibError(f"{flag} '{pattern}' matches no {what} of {label}{hint}")
    hint = _near(pattern.removeprefix("re:"), [k for n in nodes for k in _keys(n)])
    names = "node or output name" if what == "node" else f"{what} (node or output name)"
    return CalibError(f"{flag} '{pattern}' matches no {names} of {label}{hint}")


def _shown(names: Sequence[str], k: int = 3) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def exclusion_matches(model: onnx.ModelProto, pattern: str) -> list[int]:
    """Indices of the nodes of `model` that one --exclude pattern keeps in float."""
    from calib.quantize.qdq import excluded_from

    ex = excluded_from([pattern])
    return [i for i, n in enumerate(model.graph.node) if n.op_type != "Constant" and ex.excludes(n)]


def check_exclusions(model: onnx.ModelProto, patterns: Iterable[str], label: str, flag: str = "--exclude"):
    """The Exclusions of `patterns` if each one keeps at least one quantized node in float; else a CalibError
    naming the pattern: it matches no node, or only nodes without a quantized input (float already)."""
    from calib.quantize.qdq import excluded_from, quantized_inputs

    patterns = list(patterns)
    if not patterns:
        return excluded_from(())
    placed = set(quantized_inputs(model))
    for p in patterns:
        if p in ("op:", ""):
            raise CalibError(f"{flag} '{p}': expected a node/output name glob or op:<OpType>")
        hits = exclusion_matches(model, p)
        if not hits:
            raise _no_match(flag, p, model, label)
        if set(quantized_inputs(model, excluded_from([p]))) == placed:  # the placement is the same without it
            g = model.graph.node
            what = _shown([f"{g[i].name or g[i].output[0]} ({g[i].op_type})" for i in hits])
            raise CalibError(f"{flag} '{p}' matches {len(hits)} node{'s' if len(hits) > 1 else ''} ({what}) with "
                             "no quantized input in the Q/DQ placement: they run in float already, so it changes "
                             "nothing; exclude the Conv/MatMul/pooling/Add layers feeding them instead")
    return excluded_from(patterns)


def excluded_layers(model: onnx.ModelProto, exclude) -> list[str]:
    """Names of the nodes that `exclude` (calib.quantize.qdq.Exclusions) keeps in float although the Q/DQ placement
    quantizes an input of theirs: the layers to ask TensorRT for in FP16 (as TensorRT names a layer after its
    node)."""
    from calib.quantize.qdq import quantized_inputs

    placed = {i for i, _, _ in quantized_inputs(model)}
    return [n.name for i, n in enumerate(model.graph.node) if i in placed and n.name and exclude.excludes(n)]


def layer_pattern_matches(model: onnx.ModelProto, pattern: str) -> int | None:
    """How many nodes of `model` a --layer-precision PATTERN names (None: a TensorRT layer type, which only the
    builder can check)."""
    match = _layer_matcher(pattern)
    return None if match is None else sum(1 for n in _nodes(model) if match(n))


def _layer_matcher(pattern: str):
    """node -> whether a --layer-precision PATTERN names it (None: a TensorRT layer type, no ONNX node's)."""
    if pattern.startswith("op:"):
        want = pattern[3:]
        if want in TRT_LAYER_TYPES:  # written as TensorRT writes them (op:Softmax is the ONNX op type)
            return None
        return lambda n: n.op_type == want
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error as exc:
            raise CalibError(f"layer precision pattern '{pattern}': not a regular expression ({exc})") from None
        return lambda n: any(rx.search(k) for k in _keys(n))
    return lambda n: any(fnmatch.fnmatchcase(k, pattern) for k in _keys(n))


def pinned_to_float(rules: Iterable[str]):
    """node -> whether a PATTERN=fp16|fp32 rule (checked already: check_layer_precisions) asks it in float."""
    matchers = []
    for item in rules:
        pattern, _, prec = str(item).rpartition("=")
        match = _layer_matcher(pattern.strip())
        if match is not None and prec.strip().lower() in ("fp16", "fp32"):
            matchers.append(match)
    return lambda node: any(m(node) for m in matchers)


def check_layer_precisions(model: onnx.ModelProto, rules: Iterable[str], label: str,
                           flag: str = "--layer-precision") -> None:
    """Each PATTERN=PREC names at least one layer of `model`, checked without TensorRT (no GPU needed)."""
    for item in rules:
        pattern, sep, prec = str(item).rpartition("=")
        pattern = pattern.strip()
        if not sep or not pattern:
            raise CalibError(f"{flag} '{item}': expected PATTERN=PRECISION (e.g. op:Softmax=fp32)")
        if layer_pattern_matches(model, pattern) == 0:
            raise _no_match(f"{flag} pattern", pattern, model, label, "layer")
