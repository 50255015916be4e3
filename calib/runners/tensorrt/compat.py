"""One small layer over the TensorRT Python API differences between 8.6, 10.x and 11.x.

- networks: explicit batch flag (8.x, default in 10), strongly typed flag (10.x, for Q/DQ models); 11 builds every
  network strongly typed (the flag is deprecated and ignored), so precision flags, layer precisions and
  calibrators exist up to 10.x only (`require_weak_typing`);
- builds: build_serialized_network (8.x/10.x/11.x) or build_engine + serialize (older 8.x);
- I/O: named tensors + set_tensor_address + execute_async_v3 where they exist, bindings + execute_async_v2
  otherwise (8.x; 10 removed the bindings API);
- implicit INT8 (IInt8Calibrator) exists up to 10.x and is refused on 11+, pointing to the Q/DQ path.

Every TensorRT name calib uses is checked against the real bindings of 10.13 and 11.4 on the path this module
picks for each (tests/test_trt_api.py): a name a version lacks must sit behind a probe (`has`, `getattr` with a
default) or a version test here.
"""
from __future__ import annotations

import functools

from calib.errors import CalibError, require

CARRIER_OF = {"entropy2": "EntropyCalibration2", "minmax": "MinMaxCalibration", "entropy": "EntropyCalibration",
              "legacy": "LegacyCalibration"}
BASE_CLASS = {"entropy2": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator",
              "entropy": "IInt8EntropyCalibrator", "legacy": "IInt8LegacyCalibrator"}
KIND_OF_CARRIER = {v: k for k, v in CARRIER_OF.items()}


def load():
    """The tensorrt module, or a one-line error naming the extra to install."""
    return require("tensorrt", "trt")


_PLUGINS_LOADED: set = set()


def load_plugins(trt, logger) -> bool:
    """Register TensorRT's plugin library (EfficientNMS_TRT and the others) once per process, before a parser
    meets a plugin node or a runtime deserializes an engine holding one; False where this TensorRT has none."""
    if id(trt) in _PLUGINS_LOADED:
        return True
    init = getattr(trt, "init_libnvinfer_plugins", None)
    if init is None:
        return False
    init(logger, "")
    _PLUGINS_LOADED.add(id(trt))
    return True


def detach_profiler(context) -> None:
    """Stop a context's profiler from timing its later runs. TensorRT 8.6 refuses `context.profiler = None`
    (API Usage Error: profiler != nullptr) and keeps the profiler; with `enqueue_emits_profile` off, enqueue no
    longer reports to it (10.x and 11.x take None as well)."""
    try:
        context.enqueue_emits_profile = False
    except (AttributeError, TypeError):
        pass


def version(trt) -> tuple[int, int, int]:
    parts = [int(p) for p in str(trt.__version__).split(".")[:3] if p.isdigit()]
    return tuple((parts + [0, 0, 0])[:3])


def cache_version(trt) -> str:
    """The digits TensorRT writes in a cache header: 8.6.0 -> 8600, 10.3.0 -> 100300."""
    major, minor, patch = version(trt)
    if major >= 10:
        return str(major * 10000 + minor * 100 + patch)
    return str(major * 1000 + minor * 100 + patch * 10)


def cache_major(digits: str) -> int:
    """The major version in a cache header's digits (cache_version's inverse): 8600 -> 8, 100300 -> 10."""
    n = int(digits)
    return n // 10000 if n >= 100000 else n // 1000 if n >= 1000 else n


def weakly_typed(trt) -> bool:
    """Whether this TensorRT builds weakly typed networks (FP16/INT8 flags, layer precisions, calibrators): up to
    10.x. TensorRT 11 runs every layer in the types the network gives it."""
    return version(trt)[0] < 11


def require_weak_typing(trt, what: str) -> None:
    if not weakly_typed(trt):
        raise CalibError(f"TensorRT {trt.__version__} builds every network strongly typed (each layer runs in the "
                         f"ONNX model's types), so {what} cannot be used (TensorRT 10 or earlier)")


def constraint_flag(trt, constraints: str):
    """The BuilderFlag that makes layer precisions bind: obey (an error where TensorRT cannot) or prefer."""
    require_weak_typing(trt, "layer precision constraints")
    return getattr(trt.BuilderFlag, "OBEY_PRECISION_CONSTRAINTS" if constraints == "obey"
                   else "PREFER_PRECISION_CONSTRAINTS")


def check_implicit_int8(trt) -> None:
    """Implicit INT8 (a calibrator or a cache) needs IInt8Calibrator, which TensorRT 11 removed."""
    if version(trt)[0] >= 11 or not hasattr(trt, "IInt8EntropyCalibrator2"):
        raise CalibError(f"TensorRT {trt.__version__} has no implicit INT8 (IInt8Calibrator was removed in 11): "
                         "build the FP16+INT8 Q/DQ model instead (calib cache migrate CACHE --model MODEL -o "
                         "MODEL.fp16.qdq.onnx, then calib build MODEL.fp16.qdq.onnx)")


def calibrator_base(trt, kind: str):
    check_implicit_int8(trt)
    if kind not in BASE_CLASS:
        raise CalibError(f"unknown TensorRT calibrator '{kind}' (choose from {', '.join(BASE_CLASS)})")
    return getattr(trt, BASE_CLASS[kind])


def network_flags(trt, strongly_typed: bool = False) -> int:
    flags = 0
    explicit = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    if explicit is not None and version(trt)[0] < 10:
        flags |= 1 << int(explicit)
    if strongly_typed and weakly_typed(trt):  # 11: always strongly typed, STRONGLY_TYPED deprecated and ignored
        st = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if st is None:
            raise CalibError(f"TensorRT {trt.__version__} has no strongly typed networks (10.0+)")
        flags |= 1 << int(st)
    return flags


def build_plan(builder, network, config) -> bytes | None:
    if has(builder, "build_serialized_network"):
        plan = builder.build_serialized_network(network, config)
        return None if plan is None else bytes(plan)
    engine = builder.build_engine(network, config)
    return None if engine is None else bytes(engine.serialize())


def has(obj, name: str) -> bool:
    return callable(getattr(obj, name, None))


def uses_named_tensors(engine) -> bool:
    return getattr(engine, "num_io_tensors", None) is not None


def num_profiles(engine) -> int:
    return int(getattr(engine, "num_optimization_profiles", 1) or 1)


def _per_profile(engine) -> int:
    """Bindings of one profile: a bindings engine lists every I/O tensor once per optimization profile."""
    return engine.num_bindings // num_profiles(engine)


def binding_index(engine, name: str, profile: int = 0) -> int:
    return engine.get_binding_index(name) + profile * _per_profile(engine)


def io_tensors(trt, engine) -> list[tuple[str, bool]]:
    """(name, is_input) for every engine I/O tensor, in engine order."""
    if uses_named_tensors(engine):
        return [(n, engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
                for n in (engine.get_tensor_name(i) for i in range(engine.num_io_tensors))]
    return [(engine.get_binding_name(i), bool(engine.binding_is_input(i))) for i in range(_per_profile(engine))]


def tensor_dtype(trt, engine, name: str):
    """The numpy dtype of an I/O tensor."""
    if uses_named_tensors(engine):
        return trt.nptype(engine.get_tensor_dtype(name))
    return trt.nptype(engine.get_binding_dtype(engine.get_binding_index(name)))


def engine_shape(engine, name: str) -> tuple[int, ...]:
    if uses_named_tensors(engine):
        return tuple(engine.get_tensor_shape(name))
    return tuple(engine.get_binding_shape(engine.get_binding_index(name)))


def profile_shape(engine, name: str, profile: int = 0) -> tuple[tuple, tuple, tuple]:
    """(min, opt, max) of an optimization profile for an input with dynamic dimensions."""
    if has(engine, "get_tensor_profile_shape"):
        return tuple(tuple(s) for s in engine.get_tensor_profile_shape(name, profile))
    return tuple(tuple(s) for s in engine.get_profile_shape(profile, binding_index(engine, name, profile)))


def select_profile(context, profile: int, stream) -> None:
    """Make `profile` the context's optimization profile (a context starts on profile 0)."""
    if has(context, "set_optimization_profile_async"):
        ok = context.set_optimization_profile_async(profile, int(stream))
    else:
        context.active_optimization_profile = profile
        ok = True
    if ok is False:
        raise CalibError(f"TensorRT could not select optimization profile {profile}")


def set_input_shape(context, engine, name: str, shape, profile: int = 0) -> None:
    if has(context, "set_input_shape"):
        ok = context.set_input_shape(name, tuple(shape))
    else:
        ok = context.set_binding_shape(binding_index(engine, name, profile), tuple(shape))
    if ok is False:
        raise CalibError(f"engine input '{name}': shape {list(shape)} is outside the engine's optimization "
                         f"profile {profile}")


def inspect_through(inspector, context) -> None:
    """Point an engine inspector at an execution context (its concrete shapes and formats): `execution_context` on
    10.x and 11.x, `context` as 8.x's documentation names it; neither: the inspector stays on the engine."""
    for attr in ("execution_context", "context"):
        if hasattr(inspector, attr):
            setattr(inspector, attr, context)
            return


def context_shape(context, engine, name: str, profile: int = 0) -> tuple[int, ...]:
    if has(context, "get_tensor_shape"):
        return tuple(context.get_tensor_shape(name))
    return tuple(context.get_binding_shape(binding_index(engine, name, profile)))


class Executor:
    """Runs one execution context on a stream with fixed device addresses: v3 (named tensors) where it exists,
    v2 (bindings) where only it exists or where v3 is not preferred and v2 is there."""

    def __init__(self, engine, context, addresses: dict, prefer_v3: bool = True, profile: int = 0):
        self.context = context
        named = has(context, "execute_async_v3") and has(context, "set_tensor_address")
        v3 = named and (prefer_v3 or not has(context, "execute_async_v2"))
        self.v3 = v3
        if v3:
            for name, ptr in addresses.items():
                context.set_tensor_address(name, int(ptr))
            self.enqueue = context.execute_async_v3
        else:
            bindings = [0] * engine.num_bindings
            for name, ptr in addresses.items():
                bindings[binding_index(engine, name, profile)] = int(ptr)
            self.enqueue = functools.partial(context.execute_async_v2, bindings)

    def __call__(self, stream) -> None:
        if self.enqueue(int(stream)) is False:
            raise CalibError("TensorRT could not enqueue the engine (see the TensorRT log above)")
