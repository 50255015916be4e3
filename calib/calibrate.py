"""One streaming pass of the FP32 model over calibration data, then every requested algorithm."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from calib.algorithms import registry
from calib.data.arrays import as_source
from calib.data.feeding import laid_out
from calib.data.folding import fold_model, keep_derived
from calib.data.prefetch import prefetch
from calib.data.rebatch import FixedBatches, rows
from calib.errors import CalibError, DataError, called
from calib.io.fingerprint import fingerprint_update  # noqa: F401  (re-exported)
from calib.io.memory import Budget, release
from calib.io.nvtx import nvtx_range
from calib.io.progress import bar
from calib.runners.reshape import reshape_model
from calib.io.publish import publish
from calib.quantize import cache as cachefmt
from calib.quantize.model import ModelInfo, check_fp32, inspect_model, load_model, relu_bounds
from calib.quantize.opset import check_convertible
from calib.quantize.shapes import dims_text, fix_input_shapes, fixed_batch
from calib.quantize.ties import file_tie_sources, tie_amax, tie_sources
from calib.stats import warmup
from calib.stats.histogram import DEFAULT_BINS, HistogramCollector
from calib.version import __version__

log = logging.getLogger(__name__)

ALL_ALGORITHMS = ("minmax", "entropy", "percentile", "mse")
_NP_OF = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
          TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8, TensorProto.INT64: np.int64,
          TensorProto.INT32: np.int32}


def check_batch(batch: dict, info: ModelInfo, label: str, option_names=None) -> None:
    """Input name, rank, static dims and dtype of a (canonical) batch against the model, before any pass starts;
    an error names the input, what it got, what the model wants and the option that fixes it."""
    from calib.quantize.layout import fix_hint, shown

    lay = info.layout
    for name, shape, et in info.inputs:
        if name not in batch:
            raise DataError(f"{label}: no data for model input '{name}' (data gives {sorted(batch)}; "
                            f"{fix_hint(name, option_names)})")
        x = batch[name]
        want = _NP_OF.get(et)
        if want is not None and x.dtype != want:
            raise DataError(f"{label}: input '{name}' is {x.dtype}, the model wants {np.dtype(want).name}")
        # the batch dimension is not checked: runs follow the model's fixed batch (calib.data.rebatch)
        canon = lay.canonical_dims(name, shape)
        if len(canon) != x.ndim or any(d is not None and d > 0 and d != s for d, s in zip(canon[1:], x.shape[1:])):
            ax = lay.axis(name)
            got = lay.model_dims(name, x.shape) if x.ndim == len(canon) else x.shape
            where = "" if lay.identity else \
                " (one value for every sample)" if ax is None else f" (samples on axis {ax})"
            hint = f": {fix_hint(name, option_names)}" if len(info.inputs) > 1 or not lay.identity else ""
            raise DataError(f"{label}: input '{name}' has shape {list(got)}{where}, the model wants "
                            f"{shown(shape)}{hint}")


@dataclass
class CalibrationResult:
    info: ModelInfo
    stats: HistogramCollector
    amax: dict  # algorithm -> {tensor: amax}
    params: dict  # algorithm -> parameters used
    samples: int
    fingerprint: str
    seconds: dict = field(default_factory=dict)
    equalized: dict | None = None  # calib.equalize's summary, when the model was equalized first
    left_out: list = field(default_factory=list)  # samples left out for NaN/Inf (skip_nonfinite)

    def sidecar(self, algo: str, trt_version: str, carrier: str, extra: dict | None = None) -> cachefmt.Sidecar:
        return cachefmt.Sidecar(algorithm=algo, params=self.params[algo], amax=self.amax[algo],
                                model_sha256=self.info.sha256, data_fingerprint=self.fingerprint,
                                calib_version=__version__, trt_version=trt_version, carrier=carrier,
                                samples=self.samples, extra=extra or {})

    def write(self, out_dir: str | Path, trt_version: str = "8600", carrier: str = cachefmt.DEFAULT_CARRIER,
              extra: dict | None = None) -> dict:
        """Write <algo>.cache and <algo>.json for every algorithm, published as a whole into `out_dir`;
        returns algorithm -> cache path."""
        publish(out_dir, lambda stage: self.write_into(stage, trt_version, carrier, extra), "calibrate",
                inputs=[self.info.path])
        return {algo: Path(out_dir) / f"{algo}.cache" for algo in self.amax}

    def write_into(self, folder: Path, trt_version: str, carrier: str, extra: dict | None = None) -> None:
        """The caches and sidecars written straight into `folder` (a staging folder)."""
        for algo, amaxes in self.amax.items():
            p = cachefmt.write_cache(folder / f"{algo}.cache", amaxes, trt_version, carrier)
            cachefmt.write_sidecar(p, self.sidecar(algo, trt_version, carrier, extra))


def relu_outputs(model: str | Path | onnx.ModelProto, info: ModelInfo) -> dict[str, tuple[str, float]]:
    """Activations made by a Relu or Clip(0, hi) from another activation: output -> (input, hi).

    Their statistics follow from their input's (HistogramCollector.derive), so the pass does not read them."""
    model = model if isinstance(model, onnx.ModelProto) else load_model(model)
    acts = set(info.activations)
    out = {}
    for node in model.graph.node:
        bounds = relu_bounds(model, node)
        if bounds is None or not node.input or not node.output:
            continue
        x, y = node.input[0], node.output[0]
        if x in acts and y in acts and x not in out:
            out[y] = (x, bounds[1])
    return out


def _sample_name(source, k: int) -> str:
    index = getattr(source, "index", None)
    if index is not None and k < len(index):
        return f"sample {k} (row {index[k]})"
    return f"sample {k}"


def finite_samples(batch: dict, inputs, source, seen: int, label: str, skip: bool, dropped: list | None) -> dict:
    """The batch without samples holding NaN or Inf in a float input; without `skip`, such a sample is an error."""
    keep = None
    for name in inputs:
        x = batch.get(name)
        if x is None or x.dtype.kind != "f":
            continue
        ok = np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        if ok.all():
            continue
        if not skip:
            k = seen + int(np.argmin(ok))
            raise DataError(f"{label}: {_sample_name(source, k)}: tensor '{name}' holds NaN or Inf values "
                            "(skip_nonfinite: true in the data spec, or --skip-nonfinite, leaves such samples out)")
        keep = ok if keep is None else keep & ok
    if keep is None:
        return batch
    names = [_sample_name(source, seen + int(i)) for i in np.flatnonzero(~keep)]
    log.warning("%s: leaving out %d samples holding NaN or Inf: %s", label, len(names), ", ".join(names[:5]))
    if dropped is not None:
        dropped += names
    return {k: v[keep] for k, v in batch.items()}


def collect(model_path: str | Path, source, micro_batch: int | None = None, nbins: int = DEFAULT_BINS,
            label: str = "calibration data", info: ModelInfo | None = None, derive: bool = True,
            blocked: bool = True, skip_nonfinite: bool = False, dropped: list | None = None,
            give_back: bool = True, tensorrt_grid: bool = True, budget: Budget | None = None, option_names=None,
            allow_qdq: bool = False, pool=None):
    """Run the FP32 model over `source` once; returns (ModelInfo, HistogramCollector, samples, fingerprint).

    A sample holding NaN or Inf in an input is an error, or with `skip_nonfinite` left out (and its name added
    to `dropped`).

    micro_batch: samples per run of the model; default: as many as `budget` (default 2 GB) holds, from the
    activation bytes per sample that shape inference gives (calib.runners.budget). A model with a fixed batch
    runs exactly that many at a time, whatever the batches the source reads: samples carry over, and a remainder
    that cannot fill a run is left out with a warning. `option_names`: what the user calls the options (recipe key ->
    command-line flag), for the messages.
    derive: take the statistics of Relu/Clip(0, hi) outputs from their inputs' (not reading them again).
    blocked: read the tensors in ONNX Runtime's blocked layout where that holds the same values (no reorders).
    give_back: return the pass's memory to the system at the end (for work that follows in the same process; a
    command that ends after writing the caches saves the extra one-sample run).
    tensorrt_grid: also keep each tensor's histogram on TensorRT's own grid (its range from the first batch, which
    takes one more pass of the model over that batch when it is more than one run), for the entropy algorithm to
    match EntropyCalibration2.
    allow_qdq: calibrate a model that holds Q/DQ nodes already (refused by default: it is not an FP32 model).
    pool: a calib.scale pool whose workers count the batches after the first (calib.shards); the statistics are the
    same as this process's own pass."""
    from calib.runners.budget import pass_samples
    from calib.runners.feed import fed
    from calib.runners.onnxruntime import OrtRunner

    warmup.start()
    proto = load_model(model_path)
    check_fp32(proto, model_path, allow_qdq, "--allow-qdq (recipe: calibration.allow_qdq: true)")
    check_convertible(proto, str(model_path))  # its Q/DQ models need opset 13: refused now, not after the pass
    info = info or inspect_model(model_path, proto)
    cachefmt.check_tensor_names(info.activations, str(model_path))  # before the pass, not at the cache's writing
    file_tie_sources(model_path, proto)  # for compute_all, without loading the model again
    inputs = [n for n, _, _ in info.inputs]
    fixed = fixed_batch(info)
    budget = budget or Budget()
    derived = relu_outputs(proto, info) if derive else {}
    if micro_batch is None:  # before any data is read, where the input sizes are known
        micro_batch = pass_samples(proto, info, budget, getattr(source, "batch_size", 8), fixed, derived=derived,
                                   nbins=nbins)
    elif fixed:
        micro_batch = fixed
    digest = hashlib.sha256()

    def fingerprint(batch):  # in the reader thread, in the source's order
        for name in inputs:
            if name in batch:
                fingerprint_update(digest, name, batch[name])

    batches = prefetch(source, each=fingerprint)  # the first batches are read while the session is set up
    try:
        runner = fed(OrtRunner(proto, expose=[n for n in info.activations if n not in derived], spin=False,
                               lean=True, order_free=blocked, label=str(model_path), model_sha256=info.sha256),
                     info.layout)
    except BaseException:
        batches.close()
        raise
    shared = pool is not None and pool.size > 1
    model_bytes = proto.SerializeToString() if shared else None  # before the session owns the model
    if micro_batch is not None:
        proto = None  # the session holds what it needs
    exposed = set(runner.tensor_names())
    wanted = [n for n in info.activations if n in exposed and n not in derived]
    stats = HistogramCollector(nbins, signed=frozenset(x for x, _ in derived.values()))
    samples = 0
    tail = None  # the last micro-batch run
    total = len(source) if hasattr(source, "__len__") else None
    counts = {"seen": 0}

    def checked():
        for bi, batch in enumerate(batches):
            if bi == 0:
                check_batch(batch, info, label, option_names)
            read = rows(batch)
            batch = finite_samples(batch, inputs, source, counts["seen"], label, skip_nonfinite, dropped)
            counts["seen"] += read
            pbar.update(read)
            if rows(batch):
                yield batch, None, None

    warmup.settle()
    with nvtx_range("calib.calibrate"), bar("calibrate", total=total) as pbar, closing(batches):
        runs = FixedBatches(checked(), fixed) if fixed else checked()
        stream = iter(runs)  # one iterator: the pool's workers take what the first batch leaves
        for bi, (batch, _, _) in enumerate(stream):
            if micro_batch is None:  # input sizes known only now
                micro_batch = pass_samples(proto, info, budget, rows(batch), fixed, batch, derived, nbins)
                proto = None
            n = rows(batch)
            one_run = n <= micro_batch  # the first batch's outputs all at hand at once: no extra run for its ranges
            if bi == 0 and tensorrt_grid and not one_run:
                _first_batch_ranges(runner, batch, wanted, micro_batch, derived, stats)
            for lo in range(0, n, micro_batch):
                part = {k: v[lo:lo + micro_batch] for k, v in batch.items()}
                outs = runner.run(part, wanted)
                tail = part
                ranged: dict = {}
                if bi == 0 and tensorrt_grid and one_run:
                    _set_first_ranges(stats, _ranges(outs, wanted, ranged=ranged), derived)
                for name in wanted:
                    v = outs[name]
                    if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                        stats.update(name, v, ranged.get(name))
                del outs
            samples += n
            stats.first = False  # TensorRT sets its histogram ranges from the first batch alone
            if shared:  # the rest on the pool's workers, told the first batch's ranges
                stats, more = _shared_out(pool, stream, stats, model_bytes, info, derived, wanted, micro_batch,
                                          nbins, blocked, str(model_path))
                samples += more
                break
    if fixed:
        runs.check(label, ", ".join(f"'{n}' {dims_text(d)}" for n, d, _ in info.inputs),
                   called("calibration_data.limit", option_names))
    if give_back and tail is not None:
        # the pass's outputs lived in the shared arena, which keeps its regions: a one-sample run (its outputs are
        # all that stays in use) shrinks it, before the sessions of whatever runs next in this process
        runner.run({k: v[:fixed or 1] for k, v in tail.items()}, wanted[:1], release=True)
    del runner, tail
    if give_back:
        release()
    if samples == 0:
        seen = counts["seen"]
        raise DataError(f"{label}: no samples" + (f" ({seen} left out for NaN or Inf)" if seen else ""))
    for y, (x, hi) in derived.items():
        stats.derive(y, x, hi)
    for name, h in stats.hists.items():
        if h.nonfinite:
            log.warning("tensor '%s': %d NaN/Inf values (left out of its statistics)", name, h.nonfinite)
        if h.count == 0:
            raise DataError(f"tensor '{name}': every value is NaN or Inf; no scale can be computed")
    return info, stats, samples, digest.hexdigest()


def _shared_out(pool, runs, stats, model_bytes, info, derived, wanted, micro_batch, nbins, blocked, label):
    """The batches left in `runs` counted by the pool's workers, merged into `stats`; (stats, samples)."""
    from calib import shards

    shard = shards.Shard(model_bytes, info.layout, tuple(n for n in info.activations if n not in derived),
                         tuple(wanted), int(micro_batch), nbins, stats.signed, dict(stats.trt_first),
                         {k: tuple(v) for k, v in stats.trt_derived.items()}, blocked, label, info.sha256)
    count = [0]

    def rest():
        for batch, _, _ in runs:
            count[0] += rows(batch)
            yield batch

    parts = pool.fold(shards.start, shards.step, shards.end, pool.share(shard), rest())
    log.info("statistics pass: %d samples counted on %s", count[0], pool.label)
    return shards.merged(stats, parts), count[0]


def needs_tensorrt_grid(algorithms, params: dict | None = None) -> bool:
    """Whether the pass must keep TensorRT's own grid: only the entropy algorithm with grid "tensorrt" reads it."""
    if "entropy" not in algorithms:
        return False
    return registry.check_params("entropy", (params or {}).get("entropy", {})).get("grid") == "tensorrt"


def _ranges(outs: dict, wanted: list, ranges: dict | None = None, ranged: dict | None = None) -> dict:
    """tensor -> (absmax, max) over the float outputs of one run, merged into `ranges`; `ranged` gets each
    output's range_stats (for the collector's first update of it, which then need not read it for its range)."""
    from calib.stats.histogram import chunks_for
    from calib.stats.kernels import range_stats

    ranges = {} if ranges is None else ranges
    for name in wanted:
        v = outs[name]
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
            flat = np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
            mn, mx, am, bad = range_stats(flat, chunks_for(flat.size))
            if ranged is not None:
                ranged[name] = (mn, mx, am, bad)
            if mn <= mx:
                a, t = ranges.get(name, (0.0, -np.inf))
                ranges[name] = (max(a, float(am)), max(t, float(mx)))
    return ranges


def _set_first_ranges(stats, ranges: dict, derived: dict) -> None:
    """Tell the collector each tensor's first-batch absmax, and each Relu/Clip output's (from its input's max)."""
    stats.trt_first = {name: a for name, (a, _) in ranges.items()}
    for y, (x, hi) in derived.items():
        stats.trt_derived.setdefault(x, []).append((y, hi))
        stats.trt_first[y] = min(max(ranges.get(x, (0.0, 0.0))[1], 0.0), hi)


def _first_batch_ranges(runner, batch: dict, wanted: list, micro_batch: int, derived: dict, stats) -> None:
    """Each tensor's absmax (and max) over the first batch, where TensorRT sets its histogram ranges: one more run
    of the model over that batch, when it takes more than one run."""
    ranges: dict = {}
    n = int(next(iter(batch.values())).shape[0])
    for lo in range(0, n, micro_batch):
        outs = runner.run({k: v[lo:lo + micro_batch] for k, v in batch.items()}, wanted)
        _ranges(outs, wanted, ranges)
        del outs
    _set_first_ranges(stats, ranges, derived)


def compute_all(stats: HistogramCollector, tensors, algorithms, params: dict | None = None,
                model: str | Path | onnx.ModelProto | None = None):
    """algorithm -> {tensor: amax}; with `model`, after TensorRT's scale ties (calib.quantize.ties), as every cache has them."""
    params = params or {}
    sources = None
    if model is not None:
        sources = tie_sources(model) if isinstance(model, onnx.ModelProto) else file_tie_sources(model)
    amax, used, secs = {}, {}, {}
    for algo in algorithms:
        p = registry.check_params(algo, params.get(algo, {}))
        fn = registry.get(algo)
        t0 = time.perf_counter()
        amax[algo] = {t: fn(stats.histogram(t), **p) for t in tensors if t in stats.hists}
        if sources is not None:
            amax[algo] = tie_amax(None, amax[algo], sources=sources)
        secs[algo] = time.perf_counter() - t0
        used[algo] = p
    return amax, used, secs


def calibrate(model: str | Path, data, algorithms=ALL_ALGORITHMS, params: dict | None = None,
              batch_size: int = 8, preprocess: str = "none", out: str | Path | None = None,
              trt_version: str = "8600", carrier: str = cachefmt.DEFAULT_CARRIER,
              micro_batch: int | None = None, skip_nonfinite: bool = False, equalize: bool = False,
              give_back: bool = True, input_shapes: dict | None = None, memory_budget: Budget | None = None,
              option_names=None, allow_qdq: bool = False, batch_axes: dict | None = None,
              consts: dict | None = None, pool=None) -> CalibrationResult:
    """Calibrate `model` on `data` (a Source, an ndarray, a dict of arrays per input, or a .npy/.npz path) with
    every algorithm.

    Returns a CalibrationResult; with `out`, also writes <algo>.cache and <algo>.json there, published as a whole
    (calib.io.publish: the previous contents stay until every file is written). With `equalize`, cross-layer
    equalization first: the caches are then for OUT/<model>.equalized.onnx (written too; needs `out`).
    give_back: the pass's memory returned to the system at its end (calib.calibrate.collect).
    input_shapes: input -> dims fixing dynamic dimensions (like trtexec's --shapes); memory_budget: the peak the
    pass keeps within (default 2 GB; micro_batch overrides its plan); option_names: recipe key -> the flag the user
    typed, for the messages.
    allow_qdq: calibrate a model that holds Q/DQ nodes already (refused by default).
    batch_axes: input or output -> the axis that carries its samples (None: none; default: from the model, see
    calib.quantize.layout); consts: input -> a value fed with every sample (a number, nested lists, an array or a
    .npy path; calib.data.feeding); pool: a calib.scale pool sharing out the statistics pass (the same caches)."""
    algorithms = [algorithms] if isinstance(algorithms, str) else list(algorithms)
    if not algorithms:
        raise CalibError("no calibration algorithm given")
    for a in algorithms:
        registry.check_params(a, (params or {}).get(a, {}))  # before the pass, not after it
    if batch_size < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    if equalize and out is None:
        raise CalibError("equalize writes the equalized model: give an output folder")
    warmup.start()
    info = fix_input_shapes(inspect_model(model), input_shapes or {}, called("input_shapes", option_names), True)
    given, given_sha = model, info.sha256
    model, info = reshape_model(model, info, called("input_shapes", option_names))
    info = laid_out(model, info, batch_axes, consts, called("inputs.batch_axis", option_names))
    model, info = fold_model(model, info, consts, called("inputs.const", option_names))
    label = str(data) if isinstance(data, (str, Path)) else getattr(data, "label", "calibration data")
    inputs = [given] + ([data] if isinstance(data, (str, Path)) else [])  # never replaced in `out`
    data = as_source(data, info, batch_size, preprocess, consts, option_names)

    def run(stage: Path | None) -> CalibrationResult:
        nonlocal model, info
        equalized = None
        derived = None
        if stage is not None:  # the caches are for the folded model: written beside them
            derived = keep_derived(model, given, stage)
        if equalize:
            from calib.equalize import equalize_file

            target = stage / f"{Path(model).stem}.equalized.onnx"
            equalized = equalize_file(model, data, target)
            model, info = target, dataclasses.replace(fix_input_shapes(inspect_model(target), input_shapes or {}),
                                                      layout=info.layout)
        t0 = time.perf_counter()
        dropped: list = []
        info2, stats, samples, fp = collect(model, data, micro_batch=micro_batch, label=label, info=info,
                                            skip_nonfinite=skip_nonfinite, dropped=dropped, give_back=give_back,
                                            allow_qdq=allow_qdq,
                                            tensorrt_grid=needs_tensorrt_grid(algorithms, params),
                                            budget=memory_budget, option_names=option_names, pool=pool)
        t_pass = time.perf_counter() - t0
        amax, used, secs = compute_all(stats, info2.activations, algorithms, params, model=model)
        secs["pass"] = t_pass
        log.info("statistics pass: %d samples, %d tensors, %.1f s", samples, len(stats.hists), t_pass)
        result = CalibrationResult(info2, stats, amax, used, samples, fp, secs, equalized, dropped)
        if stage is not None:
            extra = {"nonfinite_samples_left_out": len(dropped)} if dropped else {}
            if derived or equalize:  # the caches are for calib's copy of the model: which, made of what
                from calib.quantize.derived import derived_from

                extra["derived_from"] = derived_from(given, given_sha, Path(model).name,
                                                     input_shapes if derived else None, consts if derived else None,
                                                     equalized=equalize)
            result.write_into(stage, trt_version, carrier, extra or None)
        return result

    if out is None:
        return run(None)
    box = []
    publish(out, lambda stage: box.append(run(stage)), "calibrate", inputs=inputs)
    return box[0]
