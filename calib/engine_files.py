"""`calib build` and `calib bench` as functions: an engine file from an ONNX model and a cache (or TensorRT's own
calibrator over an array, or a Q/DQ model), and the latency of an engine file."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from calib.cache import check_model_hash, read_cache, validate_against
from calib.errors import CalibError
from calib.model import inspect_model
from calib.runners.tensorrt import compat
from calib.runners.tensorrt.builder import BuildSpec, build, is_qdq, write_engine
from calib.runners.tensorrt.calibrators import cache_calibrator, make_calibrator, sample_shapes

log = logging.getLogger(__name__)


def build_engine_file(model, out, spec: BuildSpec, cache=None, calibrator: str | None = None, data=None,
                      preprocess: str = "none", ignore_hash: bool = False, allow_unknown: bool = False,
                      trt=None, cuda=None) -> dict:
    """Build `model` under `spec` and write `out` (+ `out`.json); returns the sidecar."""
    trt = trt or compat.load()
    if cuda is None:
        from calib.runners.tensorrt.device import Cuda

        cuda = Cuda()
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
            src = ArraySource(load_array(data), name, spec.batch_size, preprocess, label=str(data))
            cache_out = out.with_suffix(".cache")
            calib_obj = make_calibrator(calibrator, src, sample_shapes(src, [name]), spec.batch_size, cuda,
                                        cache_out, info.sha256, trt)
            extra = {"cache": str(cache_out), "cache_algorithm": f"trt-{calibrator}", "data": str(data)}
        else:
            raise CalibError("int8 needs --cache FILE (calib's or TensorRT's) or --calibrator with --data, "
                             "or a Q/DQ model")
    built = build(model, spec, calib_obj, trt, cuda)
    write_engine(out, built, extra)
    return {**built.info, **extra}


def check_engine_sidecar(engine) -> None:
    """An engine and its <engine>.json must come from the same build (the sidecar records the engine's sha256)."""
    import json

    from calib.io import sha256_file

    side = Path(str(engine) + ".json")
    if not side.is_file() or not Path(engine).is_file():
        return
    try:
        want = json.loads(side.read_text()).get("engine_sha256")
    except (OSError, ValueError, AttributeError):
        raise CalibError(f"{side}: not a readable engine sidecar") from None
    if want and want != sha256_file(engine):
        raise CalibError(f"{side}: describes another build than {Path(engine).name} (engine sha256 differs): "
                         "rebuild, or remove the stale sidecar")


def bench_engine_file(engine, batch_size: int | None = None, warmup: int = 50, iters: int = 50, repeats: int = 15,
                      trt=None, cuda=None, layers: bool = False) -> dict:
    """Latency of an engine file on random inputs (median over repeats of back-to-back runs); with `layers`, also
    the per-layer profile (calib.runners.tensorrt.profile) under "profile"."""
    from calib.runners.tensorrt.runner import TrtRunner

    check_engine_sidecar(engine)
    r = TrtRunner(engine, trt, cuda)
    try:
        rng = np.random.default_rng(0)
        batch = {}
        for name in r.inputs:
            shape = list(r.max_shape[name])
            if batch_size:
                if batch_size > shape[0] or batch_size < r.min_batch[name]:
                    raise CalibError(f"{engine}: batch {batch_size} is outside the engine's "
                                     f"{r.min_batch[name]}..{shape[0]}")
                shape[0] = batch_size
            batch[name] = rng.standard_normal(shape).astype(r.dtypes[name])
        out = {"engine": str(engine), **r.latency(batch, warmup, iters, repeats)}
        if layers:
            from calib.runners.tensorrt.profile import profile_layers

            out["profile"] = profile_layers(r, batch, runs=max(5, min(iters, 50)))
        return out
    finally:
        r.close()
