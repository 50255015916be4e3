"""`calib build` and `calib bench` as functions: an engine file from an ONNX model and a cache (or TensorRT's own
calibrator over an array, or a Q/DQ model), and the latency of an engine file."""
from __future__ import annotations

import logging
import shlex
from pathlib import Path

import numpy as np

from calib.errors import CalibError
from calib.quantize.cache import check_model_hash, read_cache, validate_against
from calib.quantize.model import inspect_model
from calib.runners.tensorrt import compat
from calib.runners.tensorrt.builder import BuildSpec, build, is_qdq, write_engine
from calib.runners.tensorrt.calibrators import cache_calibrator, make_calibrator, sample_shapes
from calib.runners.tensorrt.profiles import calibration_batch

log = logging.getLogger(__name__)

CALIB_ALGORITHM = {"entropy2": "entropy", "entropy": "entropy", "minmax": "minmax", "legacy": "percentile"}


def fp16_model_path(model) -> str:
    """Where the commands calib prints put the FP16+INT8 model of MODEL: beside it, as MODEL.fp16.qdq.onnx."""
    return str(Path(model).with_suffix(".fp16.qdq.onnx"))


def refuse_implicit_int8(trt, model, out, cache=None, calibrator: str | None = None, data=None) -> None:
    """TensorRT 11 removed implicit INT8: a --cache or --calibrator build is refused there in one line that says
    what went and gives the commands that make and build the FP16+INT8 model instead."""
    if compat.weakly_typed(trt) or not (cache or calibrator):
        return
    q = shlex.quote
    f, m = q(fp16_model_path(model)), q(str(model))
    build = f"calib build {f} -o {q(str(out))} (or trtexec --onnx={f} --saveEngine={q(str(out))})"
    removed = (f"TensorRT {trt.__version__} removed implicit INT8 (IInt8Calibrator, so "
               + ("calibration caches" if cache else "TensorRT's own calibrators")
               + ", and the INT8/FP16 builder flags): every network is strongly typed, each layer running in the "
                 "type the model gives it. ")
    if cache:
        raise CalibError(removed + f"Build the FP16+INT8 Q/DQ model made from the cache: calib cache migrate "
                                   f"{q(str(cache))} --model {m} -o {f}, then {build}")
    algo = CALIB_ALGORITHM.get(calibrator, "entropy")
    folder = str(Path(out).parent / "caches")
    raise CalibError(removed + f"Calibrate with calib and build the FP16+INT8 Q/DQ model: calib calibrate {m} "
                               f"--data {q(str(data or 'DATA'))} --algo {algo} -o {q(folder)} (with the same "
                               f"preprocessing options), calib cache migrate {q(folder + '/' + algo + '.cache')} "
                               f"--model {m} -o {f}, then {build}")


def build_engine_file(model, out, spec: BuildSpec, cache=None, calibrator: str | None = None, data=None,
                      preprocess: str = "none", ignore_hash: bool = False, allow_unknown: bool = False,
                      trt=None, cuda=None) -> dict:
    """Build `model` under `spec` and write `out` (+ `out`.json); returns the sidecar."""
    trt = trt or compat.load()
    if cuda is None:
        from calib.runners.tensorrt.device import Cuda

        cuda = Cuda()
    refuse_implicit_int8(trt, model, out, cache, calibrator, data)
    out = Path(out)
    info = inspect_model(model)
    calib_obj, extra = None, {}
    if "int8" in spec.precisions and not is_qdq(model):
        if cache and calibrator:
            raise CalibError("give --cache or --calibrator, not both")
        if cache:
            c = read_cache(cache)
            validate_against(c, info.activations, allow_unknown)
            side = check_model_hash(cache, info.sha256, ignore_hash)
            calib_obj = cache_calibrator(c, trt)
            extra = {"cache": str(cache), "cache_algorithm": (side or {}).get("algorithm", "unknown (no sidecar)")}
        elif calibrator:
            if data is None:
                raise CalibError(f"--calibrator {calibrator} needs --data (a .npy/.npz of samples)")
            from calib.data.arrays import ArraySource, load_array

            name = info.inputs[0][0]
            batch = calibration_batch(spec.profiles, spec.batch_size)  # profile 0's opt batch, if profiles
            src = ArraySource(load_array(data), name, batch, preprocess, label=str(data))
            cache_out = out.with_suffix(".cache")
            calib_obj = make_calibrator(calibrator, src, sample_shapes(src, [name]), batch, cuda,
                                        cache_out, info.sha256, trt)
            extra = {"cache": str(cache_out), "cache_algorithm": f"trt-{calibrator}", "data": str(data)}
        else:
            compat.check_implicit_int8(trt)  # TensorRT 11: INT8 comes from Q/DQ models only
            raise CalibError("int8 needs --cache FILE (calib's or TensorRT's) or --calibrator with --data, "
                             "or a Q/DQ model")
    built = build(model, spec, calib_obj, trt, cuda)
    write_engine(out, built, extra)
    return {**built.info, **extra}


def check_engine_sidecar(engine) -> None:
    """An engine and its <engine>.json must come from the same build (the sidecar records the engine's sha256)."""
    from calib.io.files import recover_together, sha256_file
    from calib.io.reading import read_json
    from calib.runners.tensorrt.inspect import MAX_ENGINE_JSON

    side = Path(str(engine) + ".json")

    def recorded():
        try:
            return read_json(side, MAX_ENGINE_JSON, "engine sidecar").get("engine_sha256")
        except AttributeError:
            raise CalibError(f"{side}: not a readable engine sidecar") from None

    if recover_together([side, engine], lambda: recorded() in (None, sha256_file(engine))):
        log.warning("%s: an interrupted build's write was undone: the previous engine and sidecar are back", engine)
    if not side.is_file() or not Path(engine).is_file():
        return
    want = recorded()
    if want and want != sha256_file(engine):
        raise CalibError(f"{side}: describes another build than {Path(engine).name} (engine sha256 differs): "
                         "rebuild, or remove the stale sidecar")


POINTS = ("min", "opt", "max")


def bench_points(runner, shapes: dict | None = None, batch_size: int | None = None) -> list[tuple[str, dict]]:
    """(point, {input: shape}) to time on a runner's profile: the given shapes (other inputs at the profile's opt
    shape, the batch replaced by `batch_size` if given), else each distinct of the profile's min, opt and max."""
    if shapes or batch_size:
        unknown = next((n for n in shapes or {} if n not in runner.inputs), None)
        if unknown is not None:
            raise CalibError(f"{runner.label}: --shape '{unknown}' is not an engine input "
                             f"(inputs: {', '.join(runner.inputs)})")
        point = {}
        for name in runner.inputs:
            shape = tuple((shapes or {}).get(name, runner.ranges[name][1]))
            if batch_size and name not in (shapes or {}):
                shape = (batch_size, *shape[1:])
            point[name] = shape
        return [("given", point)]
    tags: dict[tuple, list[str]] = {}  # a shape shared by min, opt or max is timed once, as "opt=max"
    for k, tag in enumerate(POINTS):
        tags.setdefault(tuple((name, tuple(runner.ranges[name][k])) for name in runner.inputs), []).append(tag)
    return [("=".join(t), dict(key)) for key, t in tags.items()]


def _inside(runner, point: dict) -> None:
    for name, shape in point.items():
        lo, _, hi = runner.ranges[name]
        if len(shape) != len(hi) or any(not a <= s <= b for s, a, b in zip(shape, lo, hi)):
            raise CalibError(f"{runner.label}: input '{name}' shape {list(shape)} is outside optimization profile "
                             f"{runner.profile} ({list(lo)} to {list(hi)})")


def bench_engine_file(engine, batch_size: int | None = None, warmup: int = 50, iters: int = 50, repeats: int = 15,
                      trt=None, cuda=None, layers: bool = False, shapes: dict | None = None,
                      profile: int | None = None, cuda_graph: bool = False) -> list[dict]:
    """Latency of an engine file on random inputs (median over repeats of back-to-back runs), one row per
    optimization profile and shape: `shapes` ({input: shape}) or `batch_size` on `profile` (default 0), else the
    min, opt and max shapes of `profile` or of every profile. With `layers`, each row also has the per-layer
    profile (calib.runners.tensorrt.profile) under "layers"."""
    from calib.runners.tensorrt.runner import TrtRunner

    check_engine_sidecar(engine)
    first = TrtRunner(engine, trt, cuda, profile=profile or 0)
    count = first.profiles
    first.close()
    if profile is not None:
        wanted = [profile]
    else:
        wanted = [0] if (shapes or batch_size) else list(range(count))
    rows = []
    rng = np.random.default_rng(0)
    for k in wanted:
        r = TrtRunner(engine, trt, cuda, profile=k)
        try:
            for tag, point in bench_points(r, shapes, batch_size):
                _inside(r, point)
                batch = {n: rng.standard_normal(s).astype(r.dtypes[n]) for n, s in point.items()}
                row = {"engine": str(engine), "profile": k, "point": tag,
                       "shapes": {n: list(s) for n, s in point.items()},
                       **r.latency(batch, warmup, iters, repeats, cuda_graph)}
                if layers:
                    from calib.runners.tensorrt.profile import profile_layers

                    row["layers"] = profile_layers(r, batch, runs=max(5, min(iters, 50)))
                rows.append(row)
        finally:
            r.close()
    return rows


def alternate_engines(engines: list, shapes: dict, warmup: int = 50, iters: int = 50, repeats: int = 15,
                      trt=None, cuda=None, cuda_graph: bool = False) -> list[dict]:
    """The engines (of one model) timed in turns at one shape point: group k of every engine runs before group k+1
    of any, so a drift of the GPU's clocks or of the host's load falls on all of them alike. One row per engine,
    as bench_engine_file's, with "alternated": True. Every engine's runner is open at once (their memory too)."""
    from calib.runners.tensorrt.runner import TrtRunner, summary

    runners, timers = [], []
    try:
        for e in engines:
            check_engine_sidecar(e)
            runners.append(TrtRunner(e, trt, cuda, profile=0))
        rng = np.random.default_rng(0)
        first = runners[0]
        point = dict(bench_points(first, shapes)[0][1])
        batch = {n: rng.standard_normal(s).astype(first.dtypes[n]) for n, s in point.items()}
        for r in runners:
            if sorted(r.inputs) != sorted(first.inputs):
                raise CalibError(f"{r.label}: inputs {r.inputs} differ from {first.label}'s {first.inputs}: "
                                 "not the same model")
            _inside(r, point)
            timers.append(r.timer({n: batch[n].astype(r.dtypes[n]) for n in r.inputs}, warmup, cuda_graph))
        groups: list[list[float]] = [[] for _ in timers]
        for _ in range(repeats):
            for k, t in enumerate(timers):
                groups[k].append(t.group(iters))
        return [{"engine": str(e), "profile": 0, "point": "given", "shapes": {n: list(s) for n, s in point.items()},
                 **summary(g, t.samples, repeats * iters, cuda_graph, t.nodes), "alternated": True}
                for e, t, g in zip(engines, timers, groups)]
    finally:
        for t in timers:
            t.close()
        for r in runners:
            r.close()
