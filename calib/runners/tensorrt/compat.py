"""One small layer over the TensorRT Python API differences between 8.6 and 10.x (and what 11 removed).

- networks: explicit batch flag (8.x, default in 10), strongly typed flag (10.x, for Q/DQ models);
- builds: build_serialized_network (8.x/10.x) or build_engine + serialize (older 8.x);
- I/O: named tensors + set_tensor_address + execute_async_v3 where they exist, bindings + execute_async_v2
  otherwise;
- implicit INT8 (IInt8Calibrator) exists up to 10.x and is refused on 11+, pointing to the Q/DQ path.
"""
from __future__ import annotations

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


def check_implicit_int8(trt) -> None:
    """Implicit INT8 (a calibrator or a cache) needs IInt8Calibrator, which TensorRT 11 removed."""
    if version(trt)[0] >= 11 or not hasattr(trt, "IInt8EntropyCalibrator2"):
        raise CalibError(f"TensorRT {trt.__version__} has no implicit INT8 (IInt8Calibrator was removed in 11): "
                         "build the Q/DQ model instead (calib cache convert --to qdq, then calib build MODEL.qdq.onnx)")


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
    if strongly_typed:
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


def context_shape(context, engine, name: str, profile: int = 0) -> tuple[int, ...]:
    if has(context, "get_tensor_shape"):
        return tuple(context.get_tensor_shape(name))
    return tuple(context.get_binding_shape(binding_index(engine, name, profile)))


class Executor:
    """Runs one execution context on a stream with fixed device addresses, v3 where it exists, else v2."""

    def __init__(self, engine, context, addresses: dict, prefer_v3: bool = True, profile: int = 0):
        self.context = context
        self.v3 = prefer_v3 and has(context, "execute_async_v3") and has(context, "set_tensor_address")
        if self.v3:
            for name, ptr in addresses.items():
                context.set_tensor_address(name, int(ptr))
        else:
            self.bindings = [0] * engine.num_bindings
            for name, ptr in addresses.items():
                self.bindings[binding_index(engine, name, profile)] = int(ptr)

    def __call__(self, stream) -> None:
        handle = int(stream)
        ok = self.context.execute_async_v3(handle) if self.v3 else self.context.execute_async_v2(self.bindings, handle)
        if ok is False:
            raise CalibError("TensorRT could not enqueue the engine (see the TensorRT log above)")
