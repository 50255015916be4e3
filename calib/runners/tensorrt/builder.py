"""Build TensorRT engines from ONNX: FP32, FP16, implicit INT8 (a calibrator or a calib cache) with FP16/FP32
fallback and per-layer precisions, or explicit INT8 from a Q/DQ model; engines written atomically with a sidecar."""
from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from calib.errors import CalibError, ModelError
from calib.io.files import atomic_write_bytes, replace_together, sha256_file
from calib.io.reading import read_text
from calib.io.nvtx import nvtx_range
from calib.runners.tensorrt import compat, profiles as shape_profiles
from calib.runners.tensorrt.inspect import counts_text, inspector_layers, summary
from calib.version import __version__

log = logging.getLogger(__name__)
PRECISIONS = ("fp32", "fp16", "int8")
LAYER_PRECISIONS = ("fp32", "fp16", "int8")
MAX_LAYER_PRECISIONS = 16 << 20  # a layer precisions file larger than this is not one
TACTICS_ENV = "CALIB_TRT_TACTIC_SOURCES"  # e.g. EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS where cuBLAS/cuDNN are absent


@dataclass(frozen=True)
class BuildSpec:
    precisions: tuple[str, ...] = ("fp32",)  # any of fp32, fp16, int8: fp32 is always allowed
    layer_precisions: tuple[str, ...] = ()  # "PATTERN=fp16": a layer name glob, re:REGEX or op:OpType
    constraints: str = "prefer"  # prefer | obey | none: how strictly the layer precisions bind
    workspace_mb: int = 4096
    optimization_level: int | None = None  # builder_optimization_level (0-5); TensorRT's default 3 if None
    timing_cache: str | None = None  # a file read before and written after the build
    batch_size: int = 1  # without profiles, dynamic batch dimensions are fixed to this (min = opt = max)
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # fixed input shapes (else batch_size + model dims)
    profiles: tuple = ()  # optimization profiles: each {input: (min, opt, max)}; see calib.runners.tensorrt.profiles
    mark_outputs: tuple[str, ...] = ()  # extra outputs: tensor names, or "*" for every float tensor
    tactic_sources: tuple[str, ...] | None = None  # TacticSource names; None: TensorRT's default or $CALIB_TRT_TACTIC_SOURCES
    strongly_typed: bool | None = None  # None: strongly typed on TensorRT 11 (always), weakly on 10.x (FP16 flag kept)
    tf32: bool = False  # TensorRT sets its TF32 flag by default (FP32 convolutions and matrix products in TF32);
    # calib clears it, so that FP32 is FP32 (as Polygraphy does); True keeps TensorRT's default

    def __post_init__(self):
        object.__setattr__(self, "profiles", shape_profiles.normalize(self.profiles))


def parse_layer_precisions(items) -> list[tuple[str, str]]:
    out = []
    for item in items:
        pat, sep, prec = str(item).rpartition("=")
        prec = prec.strip().lower()
        if not sep or not pat.strip():
            raise CalibError(f"layer precision '{item}': expected PATTERN=PRECISION (e.g. op:Softmax=fp32)")
        if prec not in LAYER_PRECISIONS:
            raise CalibError(f"layer precision '{item}': '{prec}' is not one of {', '.join(LAYER_PRECISIONS)}")
        out.append((pat.strip(), prec))
    return out


def read_layer_precisions(path: str | Path) -> list[str]:
    """Lines of a layer_precisions.txt (as `calib sensitivity` writes it); blank lines and # comments skipped."""
    p = Path(path)
    lines = read_text(p, MAX_LAYER_PRECISIONS, "layer precisions file").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def matches(pattern: str, name: str, trt_type: str, op_type: str | None) -> bool:
    if pattern.startswith("op:"):
        want = pattern[3:]
        return want == op_type or want.upper() == trt_type.upper()
    if pattern.startswith("re:"):
        return re.search(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern)


def _make_logger(trt):
    """A TensorRT logger that forwards to logging and keeps the last errors for the exception message."""

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity, msg):
            level = int(severity)
            if level > int(trt.ILogger.Severity.WARNING):
                return
            if level <= int(trt.ILogger.Severity.ERROR):
                self.errors.append(str(msg))
                log.error("TensorRT: %s", msg)
            else:
                log.warning("TensorRT: %s", msg)

    return Logger()


_LOGGERS: dict = {}
UNREADABLE_TIMING_CACHES: set = set()  # timing cache files TensorRT failed to read back in this process


def trt_logger(trt):
    """One logger per process (TensorRT keeps the first one it is given)."""
    if id(trt) not in _LOGGERS:
        _LOGGERS[id(trt)] = _make_logger(trt)
    return _LOGGERS[id(trt)]


def has_qdq(model: onnx.ModelProto) -> bool:
    return any(n.op_type == "QuantizeLinear" for n in model.graph.node)


def is_qdq(model_path) -> bool:
    return has_qdq(onnx.load(str(model_path), load_external_data=False))


@dataclass
class Built:
    plan: bytes
    seconds: float
    layers: list  # engine layers: name, type, precision, tactic, fused
    info: dict = field(default_factory=dict)  # the sidecar


def _parse(trt, builder, model_path, strongly_typed: bool):
    compat.load_plugins(trt, trt_logger(trt))
    network = builder.create_network(compat.network_flags(trt, strongly_typed))
    parser = trt.OnnxParser(network, trt_logger(trt))
    ok = parser.parse_from_file(str(model_path))
    if not ok:
        errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelError(f"{model_path}: TensorRT's ONNX parser failed: {errs or 'no details'}")
    return network, parser


def _mark(trt, network, wanted) -> int:
    have = {network.get_output(i).name for i in range(network.num_outputs)}
    every = "*" in wanted
    names = set(wanted) - {"*"}
    skip = {getattr(trt.LayerType, t) for t in ("CONSTANT", "SHAPE") if hasattr(trt.LayerType, t)}
    marked = 0
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            take = t.name in names or (every and t.dtype == trt.float32 and layer.type not in skip)
            if take and t.name not in have:
                network.mark_output(t)
                have.add(t.name)
                marked += 1
    return marked


def _layer_type(layer) -> str:
    """'CONVOLUTION' of trt.LayerType.CONVOLUTION."""
    return str(layer.type).split(".")[-1]


def _apply_layer_precisions(trt, network, rules, op_types: dict) -> dict:
    compat.require_weak_typing(trt, "layer precisions")
    dtype = {"fp32": trt.float32, "fp16": trt.float16, "int8": trt.int8}
    floats = (trt.float32, trt.float16)
    hit = {pat: 0 for pat, _ in rules}
    applied = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        ltype = _layer_type(layer)
        if ltype in ("CONSTANT", "SHAPE"):
            continue
        outs = [layer.get_output(j) for j in range(layer.num_outputs)]
        if not outs or any(t.dtype not in floats for t in outs):
            continue
        op = op_types.get(layer.name) or next((op_types[t.name] for t in outs if t.name in op_types), None)
        for pat, prec in rules:  # the last matching rule wins, as in a list of overrides
            if matches(pat, layer.name, ltype, op) or any(fnmatch.fnmatchcase(t.name, pat) for t in outs):
                hit[pat] += 1
                applied[layer.name] = prec
        if layer.name in applied:
            layer.precision = dtype[applied[layer.name]]
            if applied[layer.name] != "int8":
                for j in range(layer.num_outputs):
                    layer.set_output_type(j, dtype[applied[layer.name]])
    missing = [p for p, n in hit.items() if n == 0]
    if missing:
        raise CalibError(f"layer precision pattern '{missing[0]}' matches no layer of the network")
    _float_inputs(trt, network, applied, dtype)
    return applied


def _float_inputs(trt, network, applied: dict, dtype: dict) -> None:
    """A layer kept in float reads float: the layer writing each of its inputs writes it in the float layer's
    precision (FP32 where any reader is FP32). Left alone, TensorRT 8.6 lets an INT8 writer write INT8 into it, and
    the float layer computes on the quantized values (measured on an H100: a Conv kept in FP16 behind an INT8 Conv
    gave 0.7 dB where the same layer in float gave 49)."""
    floats = (trt.float32, trt.float16)
    writer = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for j in range(layer.num_outputs):
            writer[layer.get_output(j).name] = (layer, j)
    typed: dict = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        prec = applied.get(layer.name)
        if prec not in ("fp16", "fp32"):
            continue
        for k in range(layer.num_inputs):
            t = layer.get_input(k)
            if t is None or t.name not in writer or t.dtype not in floats:
                continue
            w, j = writer[t.name]
            if applied.get(w.name) in ("fp16", "fp32") or _layer_type(w) in ("CONSTANT", "SHAPE"):
                continue  # a float writer writes float already
            want = "fp32" if "fp32" in (prec, typed.get((w.name, j))) else "fp16"
            w.set_output_type(j, dtype[want])
            typed[(w.name, j)] = want


def _network_inputs(network) -> dict:
    return {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}


def recipe_shapes(input_shapes: dict, model_dims: dict, batch: int) -> tuple:
    """BuildSpec.shapes from a recipe's input_shapes (full shapes, as trtexec's --shapes): where the model's first
    dim is dynamic (None or < 0) it becomes the engine's batch; an input the model lacks is left out (the recipe
    check names it)."""
    out = []
    for name, shape in input_shapes.items():
        dims = model_dims.get(name)
        if dims is None:
            continue
        shape = tuple(int(d) for d in shape)
        dynamic = bool(dims) and (dims[0] is None or dims[0] < 0)
        out.append((name, (batch, *shape[1:]) if dynamic and shape else shape))
    return tuple(out)


def _fixed_shape(name: str, dims: tuple, spec: BuildSpec) -> tuple:
    given = dict(spec.shapes)
    if name in given:
        return tuple(given[name])
    shape = tuple(spec.batch_size if (k == 0 and d < 0) else d for k, d in enumerate(dims))
    if any(d < 0 for d in shape):
        raise ModelError(f"input '{name}' has dynamic dims {list(dims)} beyond the batch: give its shape "
                         "or optimization profiles")
    return shape


def _profiles(inputs: dict, spec: BuildSpec) -> tuple:
    """The engine's optimization profiles over its dynamic inputs: the spec's (a dynamic input given a fixed
    shape joins each as min = opt = max), or without them one profile fixing each dynamic input to its shape
    or batch_size."""
    dynamic = [n for n, dims in inputs.items() if any(d < 0 for d in dims)]
    if not spec.profiles:
        fixed = tuple((n, shape_profiles.ShapeRange(*[_fixed_shape(n, inputs[n], spec)] * 3)) for n in dynamic)
        return (fixed,) if fixed else ()
    given = dict(spec.shapes)
    both = next((n for p in spec.profiles for n, _ in p if n in given), None)
    if both is not None:
        raise CalibError(f"input '{both}': give a fixed shape or optimization profiles, not both")
    extra = tuple((n, shape_profiles.ShapeRange(*[tuple(given[n])] * 3)) for n in dynamic if n in given)
    profs = tuple(p + extra for p in spec.profiles)
    shape_profiles.check(profs, inputs)
    return profs


def _input_shapes(inputs: dict, profs: tuple) -> dict:
    """Each input's shape in the calibration profile (the first profile's opt shape) or the model's."""
    first = dict(profs[0]) if profs else {}
    return {n: first[n].opt if n in first else dims for n, dims in inputs.items()}


def _add_profiles(trt, builder, cfg, inputs: dict, profs: tuple, calibrator) -> None:
    """Every profile (set_shape for the dynamic inputs), and for a calibrator a fixed calibration profile at
    the first profile's opt shapes (TensorRT calibrates at one shape)."""
    dynamic = {n for n, dims in inputs.items() if any(d < 0 for d in dims)}
    for p in profs:
        prof = builder.create_optimization_profile()
        for n, r in p:
            if n in dynamic:
                prof.set_shape(n, r.min, r.opt, r.max)
        cfg.add_optimization_profile(prof)
    if profs and calibrator is not None:
        compat.check_implicit_int8(trt)
        cal = builder.create_optimization_profile()
        for n, r in profs[0]:
            if n in dynamic:
                cal.set_shape(n, r.opt, r.opt, r.opt)
        cfg.set_calibration_profile(cal)
        want = getattr(calibrator, "batch", None)
        opt = shape_profiles.calibration_batch(profs, want)
        if want is not None and want != opt:
            raise CalibError(f"the calibrator feeds batches of {want}, the calibration profile (profile 0's opt "
                             f"shape) takes {opt}")


def _config(trt, builder, spec: BuildSpec, inputs: dict, profs: tuple, calibrator, explicit: bool,
            strongly_typed: bool):
    cfg = builder.create_builder_config()
    cfg.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(spec.workspace_mb) << 20)
    if spec.optimization_level is not None and hasattr(cfg, "builder_optimization_level"):
        cfg.builder_optimization_level = int(spec.optimization_level)
    tactics = spec.tactic_sources
    if tactics is None and os.environ.get(TACTICS_ENV):
        tactics = tuple(t.strip() for t in os.environ[TACTICS_ENV].split(",") if t.strip())
    if tactics:
        mask = 0
        for t in tactics:
            if not hasattr(trt.TacticSource, t.upper()):
                have = ", ".join(n for n in dir(trt.TacticSource) if n.isupper())
                raise CalibError(f"TensorRT {trt.__version__} has no tactic source '{t}' (it has: {have})")
            mask |= 1 << int(getattr(trt.TacticSource, t.upper()))
        cfg.set_tactic_sources(mask)
    if not spec.tf32 and hasattr(trt.BuilderFlag, "TF32"):
        cfg.clear_flag(trt.BuilderFlag.TF32)
    cfg.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    _add_profiles(trt, builder, cfg, inputs, profs, calibrator)
    if not strongly_typed:
        compat.require_weak_typing(trt, "weak typing (FP16/INT8 flags, a calibrator)")
        if "fp16" in spec.precisions:
            cfg.set_flag(trt.BuilderFlag.FP16)
        if "int8" in spec.precisions:
            cfg.set_flag(trt.BuilderFlag.INT8)
            if not explicit:
                if calibrator is None:
                    raise CalibError("int8 needs a calibration cache or a calibrator (or a Q/DQ model)")
                cfg.int8_calibrator = calibrator
    if spec.timing_cache:
        p = Path(spec.timing_cache)
        blob = p.read_bytes() if p.is_file() and str(p) not in UNREADABLE_TIMING_CACHES else b""
        errors = trt_logger(trt).errors
        seen = len(errors)
        cache = cfg.create_timing_cache(blob)
        if any("myelin" in e.lower() for e in errors[seen:]):
            # TensorRT 8.6 cannot read back a timing cache holding Myelin entries (a transformer's attention,
            # a detector's head): "Myelin error from unknown graph", then every build ignores the file. Stop
            # reading and writing it in this process, and remove it so the next process starts clean.
            UNREADABLE_TIMING_CACHES.add(str(p))
            p.unlink(missing_ok=True)
            log.warning("%s: TensorRT cannot read this timing cache back (Myelin entries); builds go on without "
                        "one", p)
            cache = cfg.create_timing_cache(b"")
        cfg.set_timing_cache(cache, False)
    return cfg


def build(model_path, spec: BuildSpec = BuildSpec(), calibrator=None, trt=None, cuda=None) -> Built:
    """Build an engine for `model_path` under `spec`; `calibrator` feeds implicit INT8."""
    trt = trt or compat.load()
    if cuda is None:
        from calib.runners.tensorrt.device import Cuda

        cuda = Cuda()
    model_path = Path(model_path)
    if not model_path.is_file():
        raise ModelError(f"{model_path}: model file not found")
    unknown = [p for p in spec.precisions if p not in PRECISIONS]
    if unknown:
        raise CalibError(f"precision '{unknown[0]}' is not one of {', '.join(PRECISIONS)}")
    if spec.constraints not in ("prefer", "obey", "none"):
        raise CalibError(f"constraints '{spec.constraints}' is not one of prefer, obey, none")
    rules = parse_layer_precisions(spec.layer_precisions)
    onnx_model = onnx.load(str(model_path), load_external_data=False)
    explicit = has_qdq(onnx_model)
    if "int8" in spec.precisions and not explicit:
        compat.check_implicit_int8(trt)
    if explicit:
        check_scale_types(trt, onnx_model, model_path)
    strongly_typed = _strongly_typed(trt, spec, onnx_model, model_path)
    if rules and strongly_typed:
        raise CalibError("layer precisions need a weakly typed build (TensorRT 10: --weakly-typed; TensorRT 11 "
                         "builds every network strongly typed): give the model the types its layers should run in")
    logger = trt_logger(trt)
    logger.errors.clear()
    builder = trt.Builder(logger)
    network, _parser = _parse(trt, builder, model_path, strongly_typed)
    marked = _mark(trt, network, spec.mark_outputs) if spec.mark_outputs else 0
    op_types = {n.name: n.op_type for n in onnx_model.graph.node if n.name}
    op_types.update({o: n.op_type for n in onnx_model.graph.node for o in n.output})  # unnamed nodes
    applied = _apply_layer_precisions(trt, network, rules, op_types) if rules else {}
    precisions = tuple(dict.fromkeys(spec.precisions + (("fp16",) if "fp16" in applied.values() else ())))
    if precisions != spec.precisions:
        log.info("fp16 enabled for the layers kept in fp16")
    spec_used = replace(spec, precisions=precisions)
    inputs = _network_inputs(network)
    profs = _profiles(inputs, spec_used)
    cfg = _config(trt, builder, spec_used, inputs, profs, calibrator, explicit, strongly_typed)
    if applied and spec.constraints != "none":
        cfg.set_flag(compat.constraint_flag(trt, spec.constraints))
    t0 = time.perf_counter()
    try:
        with nvtx_range(f"calib.build {model_path.name}"):
            plan = compat.build_plan(builder, network, cfg)
    finally:
        if calibrator is not None and hasattr(calibrator, "release"):
            calibrator.release()
    secs = time.perf_counter() - t0
    err = getattr(calibrator, "error", None)
    if err is not None:
        raise err
    if plan is None:
        last = logger.errors[-1] if logger.errors else "no details"
        raise CalibError(f"{model_path}: TensorRT build failed ({last})")
    if spec.timing_cache and str(Path(spec.timing_cache)) not in UNREADABLE_TIMING_CACHES:
        atomic_write_bytes(spec.timing_cache, bytes(cfg.get_timing_cache().serialize()))
    layers = engine_layers(trt, plan)
    info = {"tensorrt": trt.__version__, "gpu": cuda.name(), "calib_version": __version__, "model": str(model_path),
            "model_sha256": sha256_file(model_path), "precisions": list(precisions), "explicit_qdq": explicit,
            "strongly_typed": strongly_typed,
            "layer_precisions": [f"{p}={q}" for p, q in rules], "layers_set": applied,
            "constraints": spec.constraints, "optimization_level": spec.optimization_level, "tf32": spec.tf32,
            "input_shapes": {n: list(s) for n, s in _input_shapes(inputs, profs).items()},
            "profiles": shape_profiles.to_json(profs), "marked_outputs": marked,
            "build_seconds": round(secs, 2), "calibrator": _calibrator_info(calibrator),
            "layer_summary": summary(layers), "layers": layers}
    unknown = "; '?': the inspector gave no format and the kernel names no type" if "?" in info["layer_summary"] else ""
    log.info("built %s engine in %.1f s (%s%s)", "+".join(precisions), secs, counts_text(info["layer_summary"]),
             unknown)
    return Built(plan, secs, layers, info)


def float_type(model: onnx.ModelProto) -> str:
    """'fp16' when the model types float tensors FP16 (an input, an initializer, a Constant or a Cast to FP16), with
    FP32 inputs or some layers kept in FP32 or not: a strongly typed build runs those layers in FP16. 'fp32'
    otherwise: there a strongly typed build runs every float layer in FP32."""
    f16 = onnx.TensorProto.FLOAT16
    if any(v.type.tensor_type.elem_type == f16 for v in (*model.graph.input, *model.graph.output)):
        return "fp16"
    if any(t.data_type == f16 for t in model.graph.initializer):
        return "fp16"
    for node in model.graph.node:
        for a in node.attribute:
            if (node.op_type == "Cast" and a.name == "to" and a.i == f16) or \
                    (node.op_type == "Constant" and a.name == "value" and a.t.data_type == f16):
                return "fp16"
    return "fp32"


def check_scale_types(trt, model: onnx.ModelProto, path) -> None:
    """TensorRT 8.6's ONNX parser reads every Q/DQ scale as FP32: an FP16 scale (calib's FP16+INT8 model) fails
    there with "Scale coefficients must all be positive" (seen on an H100). Refused first, with what to build."""
    if compat.version(trt)[0] >= 10:
        return
    inits = {t.name: t.data_type for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1 \
                and inits.get(n.input[1]) == onnx.TensorProto.FLOAT16:
            raise CalibError(f"{path}: FP16 Q/DQ scales (node '{n.name or n.output[0]}'): TensorRT "
                             f"{trt.__version__}'s parser takes FP32 scales only. This FP16+INT8 model is for "
                             "TensorRT 10 (strongly typed) and 11; on 8.6 build the Q/DQ model with FP32 float layers "
                             "(calib cache convert --to qdq) with int8 and fp16, which runs its float layers in FP16")


def _strongly_typed(trt, spec: BuildSpec, model: onnx.ModelProto, path: Path) -> bool:
    """Whether to build a strongly typed network, refusing what such a build cannot honour.

    A strongly typed network runs every layer in the types the ONNX model states: the FP16 flag means nothing there,
    so an FP32 model would run its float layers in FP32 while the engine's sidecar said fp16. TensorRT 11 builds
    every network strongly typed; 10.x weakly unless asked."""
    major = compat.version(trt)[0]
    if not compat.weakly_typed(trt) and spec.strongly_typed is False:
        raise CalibError(f"TensorRT {trt.__version__} builds every network strongly typed: build without "
                         "--weakly-typed")
    want = spec.strongly_typed if compat.weakly_typed(trt) else True
    if want and major < 10:
        raise CalibError(f"TensorRT {trt.__version__} has no strongly typed networks (10.0+): build without it")
    if want and "fp16" in spec.precisions and float_type(model) == "fp32":
        raise CalibError(f"{path}: a strongly typed build runs the float layers in the model's own types (FP32 "
                         "here), so the fp16 precision cannot be honoured: drop fp16, build weakly typed "
                         "(TensorRT 10: --weakly-typed), or give a model whose float layers are FP16 (calib cache "
                         "migrate CACHE --model MODEL -o MODEL.fp16.qdq.onnx makes one from a cache)")
    return bool(want)


def _calibrator_info(c) -> dict | None:
    if c is None:
        return None
    return {"class": type(c).__name__, "batches": getattr(c, "calls", None), "reused_cache": getattr(c, "reused", None),
            "cache_written": str(c.written) if getattr(c, "written", None) else None,
            "samples": getattr(getattr(c, "rebatcher", None), "samples", None)}


def engine_layers(trt, plan: bytes) -> list[dict]:
    return inspector_layers(trt.Runtime(trt_logger(trt)).deserialize_cuda_engine(plan), trt)


def write_engine(path, built: Built, extra: dict | None = None) -> Path:
    """The engine and its sidecar <engine>.json (TensorRT version, GPU, precisions, cache, per-layer precision)."""
    path = Path(path)
    if path.is_symlink() or path.is_dir():
        raise CalibError(f"{path}: engine output must be a file path, not a folder or a link")
    import hashlib

    info = {**built.info, **(extra or {}), "engine_bytes": len(built.plan),
            "engine_sha256": hashlib.sha256(built.plan).hexdigest()}  # readers check the pair belongs together
    side = (json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8", "backslashreplace")
    replace_together([(path.with_suffix(path.suffix + ".json"), side), (path, built.plan)])  # both, or neither
    return path
