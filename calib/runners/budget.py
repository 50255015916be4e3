"""How many samples one ONNX Runtime run may hold within a memory budget, and the peak RSS that comes to.

The estimate of a command's peak is what the process holds when its runs are sized (its RSS then, freed memory
handed back first and the compiled kernels' loading thread finished), plus the runtime it has yet to load (the
compiled statistics and comparison kernels where they are not loaded yet, ONNX Runtime's sessions, the
histograms, the report), the weights each session keeps, the batches read ahead, and the activations of one run:
the bytes alive at once at its worst node (calib.quantize.liveness, from ONNX shape inference before any data is
read), not a flat sum of every activation. The sessions take and give back each tensor on its own (no memory
pattern: calib.runners.onnxruntime), as the liveness walk counts them.

- The statistics pass returns every activation it reads (the Relu outputs it derives are not read): those stay
  until the run ends, the others die after their last reader; the collector works on one tensor at a time.
- The evaluation with the per-layer comparison holds FP32's returned tensors while each INT8 simulation runs and
  returns the same tensors. Where one sample of that does not fit the budget, the activations are compared in
  groups of consecutive tensors, each group by its own sessions (each run returns only that group: the model runs
  once per group, and the memory is that of the largest group).
- The evaluation of the outputs only (--no-layerwise) holds the tensors alive at once in FP32's run and in a
  simulation's, and the outputs of both.
- Runners besides the simulations (the FP16+INT8 rows, calib.deploy.emulate) run one at a time, outputs only, on
  the whole batch or on the model's fixed batch at a time, and take their tensors from the simulations' arena:
  the arena holds the larger of such a run and the simulations' runs, not their sum; every runner's outputs of
  the batch are held besides.

A Q/DQ simulation holds one dequantized copy of a tensor beside it at a time: counted as the largest activation.
The constants were fitted on the models of tests/thirdparty and the zoo (benchmarks/bench_memory.py --models,
benchmarks/RESULTS_MEMORY.md) so that the estimate is at or above the measured peak, within 1.3x of it."""
from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import onnx

from calib.io.memory import MB, Budget, release, rss_mb, size_text
from calib.quantize.liveness import groups as tensor_groups
from calib.quantize.liveness import peak_bytes
from calib.quantize.model import ModelInfo
from calib.quantize.shapes import activation_sizes, dims_text
from calib.stats.histogram import DEFAULT_BINS, TRT_BINS

log = logging.getLogger(__name__)

MAX_GROUPS = 16  # past this many runs of the model per sample, a smaller input is the better way out
# the per-layer comparison plans within the budget less 1/RESERVE of it where a grouping allows: its peak varies
# between runs by more than the estimate's margin (layout-cdla at 800x608, 2 GB: 1.72-1.81 GB in eight runs, 2.02 once)
RESERVE = 8
# numba's import (69 MB) and its first kernel's set-up with its threads (65 MB), measured; counted where the
# kernels are not loaded when the runs are sized (calib.stats.warmup.loaded)
KERNELS = 135 * MB


@dataclass(frozen=True)
class Cost:
    """What a command's runs hold besides the tensors the liveness walk counts: bytes per byte of weights in each
    session (its initializers and their pre-packed copies), bytes each session holds whatever its weights and
    besides per node of the model's graph (its graph, kernels and allocation plan), the runtime the command loads
    once besides the compiled kernels (statistics, the report, a hook), the batches of input in flight, and ONNX
    Runtime's own buffers beside the tensors a graph names (layout copies, kernels' scratch, its arena's rounding),
    as a share of those tensors."""

    per_weight: float
    per_session: int
    overhead: int
    read_ahead: int
    scratch: float = 0.0
    per_node: int = 0


# Fitted on benchmarks/RESULTS_MEMORY.md's models (see there). The pass reads ahead on a thread: two batches
# queued by the reader, one being read, one in the model; its overhead here is besides its histograms
# (histogram_bytes). The evaluation reads in its loop: the batch in the model, and the next one's images and their
# stacked copy while it is read; its runs held 1-10 % more than the liveness walk counts (YOLOv8n and PP-LCNet 9 %,
# YOLOv3-tiny and MiniLM 1-3 %); its overhead is the report, the bootstrap's chunks and the per-sample sums. Its
# sessions, measured one by one (lean, every activation exposed; RSS after release): twice the weights and 3.6-4.5 MB
# on graphs of 13-122 nodes (MTCNN's P-Net, YOLOv3-tiny, CenterFace, PP-LCNet), 5-7 MB on 323-566 (YOLOv8n, MiniLM,
# PP-OCR's classifier), 9 MB on 1493 (PicoDet's layout-cdla): 4 MB and 4 KB a node (a flat 12 MB was 2-3x what a
# small graph's session holds: silero-vad's evaluation, 5 sessions of a 1.3 MB model, counted 73 MB for 31).
PASS = Cost(per_weight=2.0, per_session=0, overhead=40 * MB, read_ahead=4)
EVALUATION = Cost(per_weight=2.0, per_session=4 * MB, overhead=80 * MB, read_ahead=3, scratch=0.1, per_node=4 << 10)


@dataclass(frozen=True)
class Plan:
    """Samples per run, the exposed tensors in groups each run by its own sessions (None: all at once), and the
    estimated peak RSS of the command."""

    samples: int
    groups: list | None = None
    estimate: int = 0


def held_now() -> int:
    """What the process holds now, the compiled kernels included where they are not loaded yet: its RSS once the
    kernels' loading thread has finished (its memory then in the RSS whole, never in part) and freed memory is
    handed back (set-up garbage such as a converted model's copies sits in the C heap until then, and the runs
    reuse it rather than adding to it)."""
    from calib.stats import warmup

    warmup.wait()
    release()
    mb = rss_mb()
    return (int(mb * MB) if mb is not None else 200 * MB) + (0 if warmup.loaded() else KERNELS)


def held_within(budget: Budget) -> int:
    """held_now() less what `budget` leaves outside (a GPU runtime's host memory: TensorRT 8.6 with CUDA and four
    YOLOv8n engines held 8.9 GB on an H100 host, where the default budget is 2 GB)."""
    return max(0, held_now() - budget.outside)


def beside_runtime(budget: Budget, before: int, what: str) -> Budget:
    """`budget` with what the process took since `before` (a held_now() taken before `what` was loaded) left
    outside it: the budget bounds calib's own runs, not a GPU runtime's libraries."""
    took = max(0, held_now() - before)
    log.info("%s hold %s of host memory besides calib's own; %s (%s) bounds the rest", what, size_text(took),
             budget.name, size_text(budget.limit))
    return replace(budget, outside=budget.outside + took)


def run_samples(budget: Budget, cost: Cost, per_sample: int, weights: int, input_bytes: int, batch: int,
                what: str, fixed: int | None = None, sessions: int = 1, now: int | None = None,
                hint: str = "", most: int | None = None) -> int:
    """Samples per run within `budget`: `per_sample` bytes of a run's activations per sample and `input_bytes` of
    input, data read `batch` samples at a time, `weights` bytes of weights in each of `sessions` sessions. With
    `fixed` (a model's fixed batch) every run holds exactly that many: the budget must hold one such run. A budget
    too small is a BudgetError, raised before any work (`hint`: another way out, added to its message). `now`:
    what the process holds already, the compiled kernels included (default: held_now()). `most`: no run larger
    (a fixed batch aside)."""
    return plan(budget, cost, per_sample, weights, input_bytes, batch, what, fixed, sessions, now, hint,
                most=most).samples


def fixed_bytes(cost: Cost, weights: int, input_bytes: int, batch: int, sessions: int, now: int | None,
                nodes: int = 0) -> int:
    """What a command holds besides its runs' activations (`now`: what the process holds, kernels included;
    `nodes`: the model's graph's)."""
    per = int(cost.per_weight * weights + cost.per_session + cost.per_node * nodes)
    return (held_now() if now is None else now) + per * sessions + cost.overhead + cost.read_ahead * batch * input_bytes


def plan(budget: Budget, cost: Cost, per_sample: int, weights: int, input_bytes: int, batch: int, what: str,
         fixed: int | None = None, sessions: int = 1, now: int | None = None, hint: str = "",
         groups: list | None = None, nodes: int = 0, shared: int = 0, most: int | None = None) -> Plan:
    """run_samples, with the estimated peak of the command (logged, with `extra` estimate for tools). `shared`:
    the bytes of another run that takes its tensors from the same arena as these runs, one at a time (an FP16+INT8
    row's): the arena holds the larger of it and these runs' activations, not both."""
    now = held_within(budget) if now is None else now
    held = fixed_bytes(cost, weights, input_bytes, batch, sessions, now, nodes)
    room = max(1, (budget.limit - held) // max(1, per_sample))
    run = fixed or max(1, min(room, batch, most or batch))
    estimate = held + max(per_sample * run, shared)
    fits = estimate <= budget.limit  # else the refusal says what one needs: this line for tools only (debug)
    log.log(logging.INFO if fits else logging.DEBUG,
            "%s: estimated peak %s (%s held, %s of activations per sample%s)", what, size_text(estimate),
             size_text(held), size_text(per_sample), f", {len(groups)} groups of tensors" if groups else "",
             extra={"estimate": estimate, "parts": {"now": now, "held": held,
                                                    "per_sample": per_sample, "run": run, "shared": shared,
                                                    "sessions": sessions, "nodes": nodes,
                                                    "groups": len(groups) if groups else 1}})
    if shared:  # the other runs' own run must fit beside what is held, whatever these runs take
        budget.samples(held, shared, f"{what} (the other runners' run)", hint)
    if fixed:
        budget.samples(held, per_sample * fixed, what if fixed == 1 else f"{what} (a run of the fixed batch of "
                       f"{fixed})", hint)
        return Plan(fixed, groups, estimate)
    n = budget.samples(held, per_sample, what, hint)
    n = min(n, most) if most else n
    log.info("%s: runs of up to %d samples within %s", what, n, size_text(budget.limit))
    return Plan(n, groups, estimate)


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


def _given(info: ModelInfo) -> list[str]:
    return [n for n, _, _ in info.inputs]


def pass_bytes(proto: onnx.ModelProto, info: ModelInfo, sizes: dict, read: Collection[str]) -> int:
    """One sample's bytes at the worst moment of a statistics-pass run returning the tensors `read`: those alive at
    once at its worst node, and the collector's work on the largest tensor."""
    peak = peak_bytes(list(proto.graph.node), sizes, _given(info), read)
    return peak + max(sizes.values(), default=0)


def layerwise_bytes(proto: onnx.ModelProto, info: ModelInfo, sizes: dict, group: Sequence[str]) -> int:
    """One sample's bytes at the worst moment of the per-layer comparison of `group`: FP32's returned tensors held
    while a simulation runs returning the same ones (and one dequantized copy)."""
    kept = set(group) | set(info.outputs)
    held = sum(sizes.get(n, 0) for n in kept if n not in _given(info))
    return held + peak_bytes(list(proto.graph.node), sizes, _given(info), kept) + max(sizes.values(), default=0)


def _output_bytes(info: ModelInfo, sizes: dict) -> int:
    return sum(sizes.get(n, 0) for n in info.outputs)


def outputs_bytes(proto: onnx.ModelProto, info: ModelInfo, sizes: dict) -> int:
    """One sample's bytes at the worst moment of an evaluation of the outputs only: FP32's outputs held while a
    simulation runs (and one dequantized copy)."""
    outs = sum(sizes.get(n, 0) for n in info.outputs)
    return outs + peak_bytes(list(proto.graph.node), sizes, _given(info), info.outputs) + max(sizes.values(),
                                                                                                default=0)


def histogram_bytes(tensors: int, signed: int, nbins: int = DEFAULT_BINS) -> int:
    """What the pass's statistics keep (calib.stats.histogram): per tensor `nbins` int64 counts and TensorRT's own
    grid, and for each of `signed` tensors (a derived Relu's input) the counts of its negative values besides."""
    return 8 * (tensors * (nbins + TRT_BINS) + signed * nbins)


def _with_scratch(per_sample: int) -> int:
    """An evaluation run's bytes per sample with ONNX Runtime's own buffers (EVALUATION.scratch)."""
    return int(per_sample * (1.0 + EVALUATION.scratch))


def pass_samples(proto: onnx.ModelProto, info: ModelInfo, budget: Budget, batch_size: int, fixed: int | None,
                 batch: dict | None = None, derived: Mapping[str, tuple] | None = None,
                 nbins: int = DEFAULT_BINS) -> int | None:
    """Samples per run of the statistics pass within `budget` (`derived`: activations the pass does not read ->
    (the input they follow from, ...), calib.calibrate.relu_outputs; `nbins`: the histograms' bins); None where
    the input sizes are known only from the first batch (then give that `batch`)."""
    dims = {k: v.shape for k, v in batch.items()} if batch is not None else None
    sizes = activation_sizes(proto, info, dims)
    if sizes is None:
        return None
    derived = derived or {}
    per = pass_bytes(proto, info, sizes, [n for n in info.activations if n not in derived])
    stats = histogram_bytes(len(info.activations), len({v[0] for v in derived.values()}), nbins)
    return run_samples(budget, replace(PASS, overhead=PASS.overhead + stats), per, weight_bytes(info),
                       input_bytes(info, batch), batch_size, f"the calibration pass of {describe(info, batch)}", fixed,
                       most=PASS_RUN_MAX)


# The statistics pass runs at most this many samples at a time (a model's fixed batch aside): larger runs buy no time
# on the CPU and hold more. MobileNetV2 at batch 32 (benchmarks/RESULTS.md): runs of 32 4.97 s and 1580 MB, of 16
# 4.86 s and 1006 MB, of 8 5.05 s and 718 MB (1024 samples: 14.7, 14.8, 16.7 s).
PASS_RUN_MAX = 16


def evaluation_plan(model_path, info: ModelInfo, budget: Budget, batch_size: int, fixed: int | None,
                    sessions: int, batch: dict | None = None, layerwise: bool = True,
                    switch: str | None = None, engines: int = 0) -> Plan | None:
    """Samples per run of the evaluation (FP32 and `sessions` - 1 INT8 simulations; with `layerwise` every
    activation compared, in as few groups of tensors as one run's samples fit in) within `budget`; None where the
    input sizes are known only from the first batch (then give that `batch`). `switch`: what turns the per-layer
    comparison off where the caller has it (e.g. --no-layerwise), named with what that needs when even the
    smallest groups do not fit. `engines`: how many runners besides (made already, so their sessions are in what
    the process holds) run on each batch, outputs only, one at a time (a whole batch per run, or the model's fixed
    batch)."""
    from calib.quantize.model import load_model

    dims = {k: v.shape for k, v in batch.items()} if batch is not None else None
    if dims is None and any(d is None for n, s, _ in info.inputs for d in info.layout.canonical_dims(n, s)[1:]):
        return None
    now = held_within(budget)  # before the model is loaded here: that copy is gone when the runs start
    proto = load_model(model_path)
    sizes = activation_sizes(proto, info, dims)
    if sizes is None:
        return None
    what = f"the evaluation of {describe(info, batch)}"
    weights, inputs = weight_bytes(info), input_bytes(info, batch)
    nodes, shared = len(proto.graph.node), 0
    if engines:  # every engine's outputs of the batch, held to its end; and one engine's run at a time, on the whole
        # batch or, where the model's batch is fixed, on that many samples at a time (Fp16Runner.run), in the arena
        # the simulations' runs take theirs from (calib.runners.onnxruntime.lean_options): the larger of the two
        now += engines * _output_bytes(info, sizes) * batch_size
        shared = _with_scratch(outputs_bytes(proto, info, sizes)) * (fixed or batch_size)
    if not layerwise:
        return plan(budget, EVALUATION, _with_scratch(outputs_bytes(proto, info, sizes)), weights, inputs,
                    batch_size, what, fixed, sessions, now, nodes=nodes, shared=shared)
    names = list(info.activations)
    total = sum(sizes.get(n, 0) for n in names)
    one = fixed or 1
    within = budget.limit - budget.limit // RESERVE
    chosen = fallback = None  # the fewest groups within the reserve; else the fewest within the budget
    for k in range(1, MAX_GROUPS + 1):
        parts = tensor_groups(names, sizes, -(-total // k)) if k > 1 else [names]
        per = _with_scratch(max(layerwise_bytes(proto, info, sizes, g) for g in parts))
        held = fixed_bytes(EVALUATION, weights, inputs, batch_size, sessions * len(parts), now, nodes)
        need = held + max(per * one, shared)
        if need <= within:
            chosen = (parts, per, held, within)
            break
        if fallback is None and need <= budget.limit:
            fallback = (parts, per, held, budget.limit)
    parts, per, held, limit = chosen or fallback or (parts, per, held, budget.limit)  # the last: plan says why
    hint = ""
    if switch:
        need = fixed_bytes(EVALUATION, weights, inputs, batch_size, sessions, now, nodes) + \
            max(_with_scratch(outputs_bytes(proto, info, sizes)) * one, shared)
        hint = f"{switch} (the outputs compared, not every layer: about {size_text(need)})"
    return plan(budget, EVALUATION, per, weights, inputs, batch_size, what, fixed, sessions * len(parts), now, hint,
                parts if len(parts) > 1 else None, nodes, shared, most=max(1, (limit - held) // max(1, per)))
