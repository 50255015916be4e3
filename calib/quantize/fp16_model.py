"""One call from an FP32 model and its scales to the FP16+INT8 model: opset 19, Q/DQ, the FP32 layers, FP16.

Used by `calib cache convert --float-type fp16`, `calib cache migrate`, `calib run` (calibration.float_type) and
`calib evaluate --float-type fp16`.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx

from calib.errors import CalibError
from calib.quantize.fp16 import Fp16Result, to_fp16
from calib.quantize.fp16_keep import Kept, fp32_layers
from calib.quantize.opset import FP16_QDQ_OPSET, at_qdq_opset
from calib.quantize.placement import RESIDUAL_BRANCH
from calib.quantize.qdq import Exclusions, insert_qdq

log = logging.getLogger(__name__)


@dataclass
class Fp16Model:
    model: onnx.ModelProto
    kept: list[Kept]  # the FP32 layers calib's statistics ask for
    fixed: dict  # node -> why it is FP32 whatever the statistics (no FP16 in ONNX, plugin, subgraph)
    casts: int
    ranges_from: str

    def fp32_table(self) -> list[dict]:
        rows = [asdict(k) for k in self.kept]
        rows += [{"node": n, "op": "", "rule": "type", "reason": why} for n, why in self.fixed.items()
                 if n not in {k.node for k in self.kept}]
        return rows

    def entry(self, algorithm: str, io_type: str, file: str | None = None) -> dict:
        """What a report says of this model (calib.evaluate.report.fp16_blocks)."""
        return {"file": file, "algorithm": algorithm, "io_type": io_type, "casts": self.casts,
                "fp32_layers": self.fp32_table(), "ranges_from": self.ranges_from, "text": self.describe()}

    def describe(self) -> str:
        rules: dict[str, int] = {}
        for r in self.fp32_table():
            rules[r["rule"]] = rules.get(r["rule"], 0) + 1
        kept = ", ".join(f"{v} {k}" for k, v in sorted(rules.items())) or "none"
        return f"float layers FP16, FP32 kept: {kept}; {self.casts} casts"


def make_fp16_model(model: onnx.ModelProto, amax: dict, ranges: dict | None = None, ranges_from: str | None = None,
                    exclude: Exclusions = Exclusions(), int8_weights: bool = False, io_type: str = "fp32",
                    stem_output: bool = True, label: str | None = None, tail: bool = True,
                    fp32: tuple = (), residual_branch: str = RESIDUAL_BRANCH) -> Fp16Model:
    """The FP16+INT8 model of `model` with activation amax `amax`. `ranges`: tensor -> absolute maximum over the
    calibration pass (None: the amax table stands in, a lower bound); layers in `exclude` stay float (FP16); the
    nodes named in `fp32` stay FP32 (a fallback that keeps layers in FP32)."""
    m19 = at_qdq_opset(model, label, FP16_QDQ_OPSET)
    q = insert_qdq(m19, amax, exclude, int8_weights=int8_weights, label=label, stem_output=stem_output,
                   residual_branch=residual_branch)
    if ranges is None:
        ranges, ranges_from = dict(amax), ranges_from or "the cache's amax (clipped by its calibrator: a lower bound)"
    else:
        ranges = at_least(ranges, amax)
    kept = fp32_layers(q, ranges, ranges_from or "the calibration pass", tail=tail)
    if io_type == "fp16":
        _warn_io_past_fp16(q, ranges, label)
    keep = {n: "kept in FP32 (asked)" for n in fp32}
    keep.update({k.node: f"{k.rule}: {k.reason}" for k in kept})
    res: Fp16Result = to_fp16(q, keep, io_type)
    check(res.model, label, q)
    fixed = {n: why for n, why in res.fp32_nodes.items() if n not in {k.node for k in kept}}
    return Fp16Model(res.model, kept, fixed, res.casts, ranges_from or "the calibration pass")


FP16_MAX = 65504.0


def _warn_io_past_fp16(model: onnx.ModelProto, ranges: dict, label: str | None) -> None:
    """One warning naming the float inputs and outputs whose range FP16 cannot hold: with io_type fp16 they would
    read or return inf."""
    io = [v.name for v in (*model.graph.input, *model.graph.output)]
    over = [f"'{t}' reaches {ranges[t]:.3g}" for t in dict.fromkeys(io) if ranges.get(t, 0.0) > FP16_MAX]
    if over:
        log.warning("%s: --io-type fp16 (io_type): %s, past FP16's largest value (65504): it would read inf there; "
                    "keep the inputs and outputs fp32", label or "model", ", ".join(over))


def check(model: onnx.ModelProto, label: str | None = None, source: onnx.ModelProto | None = None) -> None:
    """onnx.checker and a strict type inference over the model (weights left out): a type clash is calib's bug.
    A checker complaint that the Q/DQ model `source` it was made from has as well (an output declared without a
    shape...) is the user's model's, not this conversion's: left to TensorRT's parser."""
    from calib.quantize.model import light_model

    def first(exc) -> str:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        same = False
        if source is not None:
            try:
                onnx.checker.check_model(source)
            except Exception as exc0:
                same = first(exc0) == first(exc)
        if not same:
            raise CalibError(f"{label or 'model'}: the FP16+INT8 model fails ONNX's checks: {first(exc)}") from None
    try:
        onnx.shape_inference.infer_shapes(light_model(model), check_type=True, strict_mode=True)
    except Exception as exc:
        raise CalibError(f"{label or 'model'}: the FP16+INT8 model fails ONNX's type checks: {first(exc)}") from None


def read_ranges(path: str | Path, model: onnx.ModelProto | None = None, label: str = "the model") -> dict:
    """ranges.json as `calib run` writes it: {"absmax": {tensor: value}} (or a plain {tensor: value}). Every value a
    finite number >= 0 (not true/false), and, given the `model`, at least one tensor of it named: a CalibError
    naming the file and the tensor otherwise."""
    from calib.io.reading import read_json

    data = read_json(path, 256 << 20, "--ranges file")
    table = data.get("absmax", data) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise CalibError(f"{path}: --ranges: expected {{\"absmax\": {{tensor: number}}}} as calib run writes it")
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise CalibError(f"{path}: --ranges: tensor '{k}': {json.dumps(v)[:40]} is not a number (expected "
                             "{\"absmax\": {tensor: number}} as calib run writes it)")
        if not math.isfinite(v) or v < 0:
            raise CalibError(f"{path}: --ranges: tensor '{k}': {v!r} is not an absolute maximum (a finite number "
                             ">= 0)")
    out = {str(k): float(v) for k, v in table.items()}
    if model is not None:
        names = {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
        if not names & set(out):
            raise CalibError(f"{path}: --ranges names none of the tensors of {label} ({len(out)} entries): the "
                             "ranges of another model?")
    return out


def at_least(ranges: dict, amax: dict) -> dict:
    """`ranges` raised to the cache's own amax where that is larger, and the amax where ranges lack a tensor: a
    range below what the cache itself says would send a layer the cache shows past FP16 to FP16."""
    out = dict(ranges)
    for t, a in amax.items():
        out[t] = max(out.get(t, 0.0), float(a))
    return out


def ranges_json(absmax: dict, samples: int) -> str:
    return json.dumps({"what": "absolute maximum of every float tensor over the calibration pass",
                       "samples": samples, "absmax": absmax}, indent=1, sort_keys=False)
