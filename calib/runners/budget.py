"""How many samples one ONNX Runtime run may hold within a memory budget.

A run that exposes every activation holds them all at once: in ONNX Runtime's arena and in the arrays handed out.
The bytes one sample's activations take come from ONNX shape inference (calib.quantize.shapes.sample_bytes),
before any data is read; the rest of the peak is what the process holds already, the model's weights in its
sessions and the batches read ahead. Measured on a 736x736 conv net on two cores (benchmarks/bench_memory.py): the
statistics pass costs about 0.5-0.95x a sample's activation bytes per sample of a run (the Relu outputs it derives
are not read), the evaluation about 2.8x (FP32's tensors are held while each INT8 simulation's are compared); the
process itself, its compiled kernels and four algorithms' histograms 0.4-0.6 GB besides. The costs below keep a
margin over those. An evaluation without the per-layer comparison (--no-layerwise) returns the graph outputs only:
a run then holds the tensors alive at once at its worst node (calib.quantize.shapes.live_bytes), not every
activation; measured on PP-OCRv4's text detector at 736x736 (56 MB alive of 877 MB of activations per sample) at
about 1.5x that per sample of a run, FP32 and four INT8 simulations (81 MB a sample)."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import onnx

from calib.io.memory import MB, Budget, rss_mb, size_text
from calib.quantize.model import ModelInfo
from calib.quantize.shapes import dims_text, sample_bytes

log = logging.getLogger(__name__)

READ_AHEAD = 4  # batches of input in flight: two queued by the reader, one being read, one in the model


@dataclass(frozen=True)
class Cost:
    """What a command's runs cost: bytes per byte of one sample's activations, per byte of weights (its
    sessions), and what its runtime holds besides (arena, kernels, statistics)."""

    per_activation: float
    per_weight: float
    overhead: int


PASS = Cost(per_activation=1.25, per_weight=2.0, overhead=500 * MB)
EVALUATION = Cost(per_activation=3.0, per_weight=2.0, overhead=500 * MB)
OUTPUTS_ONLY = Cost(per_activation=3.0, per_weight=2.0, overhead=500 * MB)  # per byte alive at once (live_bytes)


def held_now() -> int:
    mb = rss_mb()
    return int(mb * MB) if mb is not None else 200 * MB


def run_samples(budget: Budget, cost: Cost, sample_bytes: int, weights: int, input_bytes: int, batch: int,
                what: str, fixed: int | None = None, sessions: int = 1, now: int | None = None,
                hint: str = "") -> int:
    """Samples per run within `budget`: `sample_bytes` of activations and `input_bytes` of input per sample, data
    read `batch` samples at a time, `weights` bytes of weights in each of `sessions` sessions. With `fixed` (a
    model's fixed batch) every run holds exactly that many: the budget must hold one such run. A budget too small
    is a BudgetError, raised before any work (`hint`: another way out, added to its message). `now`: what the
    process holds already (default: its RSS now)."""
    held = (held_now() if now is None else now) + int(cost.per_weight * weights * sessions)
    held += READ_AHEAD * batch * input_bytes + cost.overhead
    per = int(cost.per_activation * sample_bytes)
    if fixed:
        budget.samples(held, per * fixed, what if fixed == 1 else f"{what} (a run of the fixed batch of {fixed})",
                       hint)
        return fixed
    n = budget.samples(held, per, what, hint)
    log.info("%s: runs of up to %d samples within %s (%s of activations per sample, %s held)", what, n,
             size_text(budget.limit), size_text(sample_bytes), size_text(held))
    return n


_ITEMSIZE = {onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.UINT8: 1,
             onnx.TensorProto.INT8: 1, onnx.TensorProto.INT64: 8}


def input_bytes(info: ModelInfo, batch: dict | None = None) -> int:
    """Bytes of one sample's inputs: from `batch` where given, else from the model's (known) input sizes."""
    if batch is not None:
        return sum(v[:1].nbytes for v in batch.values())
    lay = info.layout
    return sum(math.prod(int(d or 1) for d in lay.canonical_dims(n, dims)[1:]) * _ITEMSIZE.get(et, 4)
               for n, dims, et in info.inputs)


def describe(info: ModelInfo, batch: dict | None = None) -> str:
    dims = {n: (batch[n].shape if batch is not None and n in batch else info.layout.canonical_dims(n, d))
            for n, d, _ in info.inputs}
    return f"{info.path.name} ({', '.join(f'{n} {dims_text(d[1:])}' for n, d in dims.items())} per sample)"


def weight_bytes(info: ModelInfo) -> int:
    return info.path.stat().st_size if info.path.is_file() else 0


def pass_samples(proto: onnx.ModelProto, info: ModelInfo, budget: Budget, batch_size: int, fixed: int | None,
                 batch: dict | None = None) -> int | None:
    """Samples per run of the statistics pass within `budget`; None where the input sizes are known only from
    the first batch (then give that `batch`)."""
    dims = {k: v.shape for k, v in batch.items()} if batch is not None else None
    per = sample_bytes(proto, info, dims)
    if per is None:
        return None
    return run_samples(budget, PASS, per, weight_bytes(info), input_bytes(info, batch), batch_size,
                       f"the calibration pass of {describe(info, batch)}", fixed)


def evaluation_samples(model_path, info: ModelInfo, budget: Budget, batch_size: int, fixed: int | None,
                       sessions: int, batch: dict | None = None, layerwise: bool = True,
                       switch: str | None = None) -> int | None:
    """Samples per run of the evaluation (FP32 and `sessions` - 1 INT8 simulations; with `layerwise` every
    activation compared, else the graph outputs only) within `budget`; None where the input sizes are known only
    from the first batch (then give that `batch`). `switch`: what turns the per-layer comparison off where the
    caller has it (e.g. --no-layerwise), named with what that would need when the budget is too small."""
    from calib.quantize.model import load_model
    from calib.quantize.shapes import live_bytes

    dims = {k: v.shape for k, v in batch.items()} if batch is not None else None
    if dims is None and any(d is None for n, s, _ in info.inputs for d in info.layout.canonical_dims(n, s)[1:]):
        return None
    proto = load_model(model_path)
    alive = live_bytes(proto, info, dims)
    per = sample_bytes(proto, info, dims) if layerwise else alive
    if per is None:
        return None
    cost = EVALUATION if layerwise else OUTPUTS_ONLY
    hint = ""
    if layerwise and switch and alive is not None:
        need = held_now() + int(cost.per_weight * weight_bytes(info) * sessions) + cost.overhead + \
            READ_AHEAD * batch_size * input_bytes(info, batch) + int(OUTPUTS_ONLY.per_activation * alive) * (fixed or 1)
        hint = f"{switch} (the outputs compared, not every layer: about {size_text(need)})"
    return run_samples(budget, cost, per, weight_bytes(info), input_bytes(info, batch), batch_size,
                       f"the evaluation of {describe(info, batch)}", fixed, sessions, hint=hint)
