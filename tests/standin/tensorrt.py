"""A stand-in for the parts of the TensorRT Python API that calib uses, faithful to what real TensorRT 8.6 did
on an H200 (shared/golden): the calibrator protocol (a cache is used only when its header names the calibrator
class's algorithm, else TensorRT asks for batches and, with none, fails with no scaling factors), cache bytes in
TensorRT's format, engine I/O by named tensors (v3) or bindings (v2), optimization profiles, layer precisions,
the engine inspector's JSON. Engines run the ONNX model with ONNX Runtime in FP32, so outputs are real numbers.

Built with `make_trt(version)`: 8.6.0 (both I/O APIs), 8.4.0 (bindings only), 10.3.0 (named only, strongly typed
flag), 11.0.0 (no IInt8Calibrator).
"""
from __future__ import annotations

import ctypes
import enum
import json
import struct
import types

import numpy as np
import onnx

from calib.runners.onnxruntime import OrtRunner


class DataType(enum.IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4


_NP = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8, DataType.INT32: np.int32,
       DataType.BOOL: np.bool_}
_ONNX_TO_DT = {onnx.TensorProto.FLOAT: DataType.FLOAT, onnx.TensorProto.INT64: DataType.INT32,
               onnx.TensorProto.INT32: DataType.INT32, onnx.TensorProto.FLOAT16: DataType.HALF}
_LAYER_TYPE = {"Conv": "CONVOLUTION", "Relu": "ACTIVATION", "Clip": "ACTIVATION", "Gemm": "MATRIX_MULTIPLY",
               "MatMul": "MATRIX_MULTIPLY", "Add": "ELEMENTWISE", "Mul": "ELEMENTWISE", "GlobalAveragePool": "REDUCE",
               "Flatten": "SHUFFLE", "Reshape": "SHUFFLE", "Softmax": "SOFTMAX", "MaxPool": "POOLING",
               "Concat": "CONCATENATION", "Shape": "SHAPE", "Constant": "CONSTANT", "Sigmoid": "ACTIVATION"}
_QUANTIZABLE = {"CONVOLUTION", "MATRIX_MULTIPLY", "POOLING"}
_ALGO = {"IInt8EntropyCalibrator2": "EntropyCalibration2", "IInt8MinMaxCalibrator": "MinMaxCalibration",
         "IInt8EntropyCalibrator": "EntropyCalibration", "IInt8LegacyCalibrator": "LegacyCalibration"}


class Memory:
    """Device memory on the host (ctypes buffers, so pointers are real addresses): the stand-in for cuda.Cuda,
    read and written by the TensorRT stand-in and by the cuda.cudart stand-in."""

    def __init__(self):
        self.blocks: dict[int, ctypes.Array] = {}
        self.writes: dict[int, int] = {}  # pointer -> number of copies into it (engines skip unchanged inputs)
        self.frees = 0
        self.pinned: set[int] = set()  # pointers from malloc_host
        self.async_copies = 0  # copies made through to_device_async / to_host_async (with a pinned host side)

    def name(self) -> str:
        return "stand-in GPU (sm_90)"

    def malloc(self, nbytes: int) -> int:
        buf = (ctypes.c_char * max(int(nbytes), 1))()
        ptr = ctypes.addressof(buf)
        self.blocks[ptr] = buf
        return ptr

    def free(self, ptr: int) -> None:
        del self.blocks[int(ptr)]
        self.frees += 1

    def _size(self, ptr: int) -> int:
        return len(self.blocks[int(ptr)])

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        for p in (dst, src):
            if int(p) in self.blocks and nbytes > self._size(p):
                raise RuntimeError("copy larger than the allocation")
        ctypes.memmove(int(dst), int(src), int(nbytes))
        self.writes[int(dst)] = self.writes.get(int(dst), 0) + 1

    def malloc_host(self, nbytes: int) -> int:
        ptr = self.malloc(nbytes)
        self.pinned.add(ptr)
        return ptr

    def free_host(self, ptr: int) -> None:
        self.pinned.discard(int(ptr))
        self.free(ptr)

    def copy_async(self, dst: int, src: int, nbytes: int, stream) -> None:
        if int(dst) not in self.pinned and int(src) not in self.pinned:
            raise RuntimeError("an async copy whose host side is not pinned memory (it would run synchronously)")
        self.copy(dst, src, nbytes)
        self.async_copies += 1

    def to_device_async(self, ptr: int, host_ptr: int, nbytes: int, stream) -> None:
        self.copy_async(ptr, host_ptr, nbytes, stream)

    def to_host_async(self, host_ptr: int, ptr: int, nbytes: int, stream) -> None:
        self.copy_async(host_ptr, ptr, nbytes, stream)

    def to_device(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        self.copy(ptr, host.ctypes.data, host.nbytes)

    def to_host(self, host: np.ndarray, ptr: int) -> None:
        self.copy(host.ctypes.data, ptr, host.nbytes)

    def read(self, ptr: int, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype)
        self.to_host(out, ptr)
        return out

    def stream(self):
        return 7

    def sync(self, stream) -> None:
        return None

    def event(self):
        return object()

    def record(self, event, stream) -> None:
        return None

    def elapsed_ms(self, start, end) -> float:
        return 1.0


SHARED = Memory()  # the memory of the importable stand-in (tests/standin/site)


def make_trt(version: str = "8.6.0", memory: Memory | None = None):
    """A module-like namespace standing in for `import tensorrt`, bound to one host Memory."""
    major = int(version.split(".")[0])
    minor = int(version.split(".")[1])
    mem = memory or Memory()
    t = types.SimpleNamespace(__version__=version, memory=mem, builds=[], simulate_int8=False)
    # simulate_int8: INT8 engines run calib's Q/DQ simulation of the layers they hold in Int8 (with the scales
    # the calibrator gave), so tests see the accuracy a fallback choice buys; else they run plain FP32
    t.DataType = DataType
    t.float32, t.float16, t.int8, t.int32, t.bool = (DataType.FLOAT, DataType.HALF, DataType.INT8, DataType.INT32,
                                                     DataType.BOOL)
    t.nptype = lambda dt: _NP[DataType(dt)]
    t.BuilderFlag = enum.IntEnum("BuilderFlag", "FP16 INT8 DEBUG GPU_FALLBACK REFIT TF32 OBEY_PRECISION_CONSTRAINTS "
                                 "PREFER_PRECISION_CONSTRAINTS", start=0)
    t.MemoryPoolType = enum.IntEnum("MemoryPoolType", "WORKSPACE", start=0)
    t.TacticSource = enum.IntEnum("TacticSource", "CUBLAS CUBLAS_LT CUDNN EDGE_MASK_CONVOLUTIONS JIT_CONVOLUTIONS",
                                  start=0)
    t.ProfilingVerbosity = enum.IntEnum("ProfilingVerbosity", "LAYER_NAMES_ONLY NONE DETAILED", start=0)
    t.LayerInformationFormat = enum.IntEnum("LayerInformationFormat", "ONELINE JSON", start=0)
    t.TensorIOMode = enum.IntEnum("TensorIOMode", "NONE INPUT OUTPUT", start=0)
    t.LayerType = enum.IntEnum("LayerType", " ".join(sorted(set(_LAYER_TYPE.values()) | {"UNKNOWN"})), start=0)
    flags = "EXPLICIT_BATCH" + (" STRONGLY_TYPED" if major >= 10 else "")
    t.NetworkDefinitionCreationFlag = enum.IntEnum("NetworkDefinitionCreationFlag", flags, start=0)

    class Severity(enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    class ILogger:
        def __init__(self):
            pass

    ILogger.Severity = Severity
    t.ILogger = ILogger

    class IProfiler:
        def __init__(self):
            pass

    t.IProfiler = IProfiler
    t.Logger = type("Logger", (ILogger,), {"log": lambda self, s, m: None})
    if major < 11:
        for cls_name in _ALGO:
            setattr(t, cls_name, type(cls_name, (), {"__init__": lambda self: None}))
    t.OnnxParser = lambda network, logger: _Parser(network)
    t.plugins_loaded = False

    def init_libnvinfer_plugins(logger, namespace):
        t.plugins_loaded = True
        return True

    t.init_libnvinfer_plugins = init_libnvinfer_plugins
    t.Builder = lambda logger: _Builder(t, logger, major)
    t.Runtime = lambda logger: _Runtime(t, major, minor)
    return t


class _Tensor:
    def __init__(self, name, dtype, shape=()):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)


class _Layer:
    def __init__(self, t, node):
        self.name = node.name
        self.op_type = node.op_type
        self.type = getattr(t.LayerType, _LAYER_TYPE.get(node.op_type, "UNKNOWN"))
        self.outputs = [_Tensor(o, DataType.INT32 if node.op_type == "Shape" else DataType.FLOAT) for o in node.output]
        self.num_outputs = len(self.outputs)
        self.precision = None
        self.output_types = {}

    def get_output(self, i):
        return self.outputs[i]

    def set_output_type(self, i, dtype):
        self.output_types[i] = dtype


class _Network:
    def __init__(self, t, flags):
        self.t, self.flags = t, flags
        self.layers, self.inputs, self.outputs, self.model_path = [], [], [], None

    num_layers = property(lambda self: len(self.layers))
    num_inputs = property(lambda self: len(self.inputs))
    num_outputs = property(lambda self: len(self.outputs))

    def get_layer(self, i):
        return self.layers[i]

    def get_input(self, i):
        return self.inputs[i]

    def get_output(self, i):
        return self.outputs[i]

    def mark_output(self, tensor):
        self.outputs.append(tensor)


class _Parser:
    def __init__(self, network):
        self.network, self.errors = network, []

    num_errors = property(lambda self: len(self.errors))

    def get_error(self, i):
        return self.errors[i]

    def parse_from_file(self, path):
        try:
            m = onnx.load(path)
        except Exception as exc:
            self.errors.append(f"cannot parse: {exc}")
            return False
        net = self.network
        net.model_path = path
        inits = {i.name for i in m.graph.initializer}
        for i in m.graph.input:
            if i.name in inits:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in i.type.tensor_type.shape.dim]
            net.inputs.append(_Tensor(i.name, _ONNX_TO_DT.get(i.type.tensor_type.elem_type, DataType.FLOAT), dims))
            if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:  # TensorRT takes it as int32
                net.int64_inputs = getattr(net, "int64_inputs", []) + [i.name]
        from calib.deploy.plugins import is_plugin

        for k, node in enumerate(m.graph.node):
            if is_plugin(node) and not net.t.plugins_loaded:  # TensorRT's parser without the plugin library
                self.errors.append(f"In node {k} ({node.op_type}): UNSUPPORTED_NODE: No importer registered for "
                                   f"op: {node.op_type}. Attempting to import as plugin. Plugin not found")
                return False
            if not node.name:
                node.name = f"node_of_{node.output[0]}"  # TensorRT 8.6's name for an unnamed ONNX node
            net.layers.append(_Layer(net.t, node))
        by_name = {o.name: o for layer in net.layers for o in layer.outputs}
        net.outputs = [by_name[o.name] for o in m.graph.output]
        for t, o in zip(net.outputs, m.graph.output):  # an integer graph output (a plugin's counts) stays integer
            if o.type.tensor_type.elem_type == onnx.TensorProto.INT32:
                t.dtype = DataType.INT32
        return True


class _Profile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, name, lo, opt, hi):
        self.shapes[name] = (tuple(lo), tuple(opt), tuple(hi))


class _Config:
    def __init__(self, logger=None):
        self.logger = logger
        self.flags, self.profiles, self.calibration_profile = set(), [], None
        self.int8_calibrator, self.tactics, self.timing = None, None, None
        self.profiling_verbosity, self.builder_optimization_level = None, 3

    def set_memory_pool_limit(self, pool, size):
        self.workspace = size

    def set_tactic_sources(self, mask):
        self.tactics = mask

    def set_flag(self, flag):
        self.flags.add(flag)

    def add_optimization_profile(self, p):
        self.profiles.append(p)

    def set_calibration_profile(self, p):
        self.calibration_profile = p

    def create_timing_cache(self, blob):
        if b"MYELIN" in bytes(blob) and self.logger is not None:  # what TensorRT 8.6 does with such a cache
            self.logger.log(self.logger.Severity.ERROR if hasattr(self.logger, "Severity") else 1,
                            "1: [myelinCache.h::deserializeFromBuffer::52] Error Code 1: Myelin (Myelin error "
                            "from unknown graph)")
            blob = b""
        return types.SimpleNamespace(blob=bytes(blob) or b"timing", serialize=lambda: bytes(blob) or b"timing")

    def set_timing_cache(self, cache, ignore_mismatch):
        self.timing = cache

    def get_timing_cache(self):
        return self.timing


class _Builder:
    def __init__(self, t, logger, major):
        self.t, self.logger, self.major = t, logger, major

    def create_network(self, flags=0):
        if self.major < 10 and not flags & (1 << int(self.t.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)):
            raise RuntimeError("implicit batch networks are not supported by this stand-in")
        return _Network(self.t, flags)

    def create_builder_config(self):
        return _Config(self.logger)

    def create_optimization_profile(self):
        return _Profile()

    def _error(self, msg):
        self.logger.log(self.t.ILogger.Severity.ERROR, msg)
        return None

    def _shapes(self, net, cfg):
        """Every profile must give every dynamic input min <= opt <= max of the input's rank, fixed dims kept;
        returns the profiles ({input: (min, opt, max)}, fixed inputs included) or None after logging the error."""
        dynamic = [i for i in net.inputs if any(d < 0 for d in i.shape)]
        if dynamic and not cfg.profiles:
            return self._error(f"input {dynamic[0].name} has dynamic shape and no optimization profile")
        profiles = []
        for k, p in enumerate(cfg.profiles or [_Profile()]):
            shapes = {}
            for i in net.inputs:
                if i not in dynamic:
                    shapes[i.name] = (i.shape, i.shape, i.shape)
                    continue
                if i.name not in p.shapes:
                    return self._error(f"optimization profile {k} has no shapes for dynamic input {i.name}")
                lo, opt, hi = p.shapes[i.name]
                ok = all(len(s) == len(i.shape) for s in (lo, opt, hi)) and all(
                    (d < 0 or a == b == c == d) and a <= b <= c for a, b, c, d in zip(lo, opt, hi, i.shape))
                if not ok:
                    return self._error(f"optimization profile {k}: invalid shapes for {i.name}")
                shapes[i.name] = p.shapes[i.name]
            profiles.append(shapes)
        return profiles

    def _calibrate(self, net, cfg, calib, shapes):  # shapes: profile 0
        algo = next((a for c, a in _ALGO.items() if isinstance(calib, getattr(self.t, c))), None)
        text = calib.read_calibration_cache()
        if text:
            head = bytes(text).split(b"\n", 1)[0].decode()
            if head.endswith("-" + algo):
                return _parse_cache(bytes(text))
        if any(any(d < 0 for d in i.shape) for i in net.inputs) and cfg.calibration_profile is None:
            return self._error("calibration profile not set for a network with dynamic shapes")
        self.t.calibration_shapes = dict(cfg.calibration_profile.shapes) if cfg.calibration_profile else {}
        prof = cfg.calibration_profile.shapes if cfg.calibration_profile else {}
        names = [i.name for i in net.inputs]
        runner = OrtRunner(net.model_path, expose=[o.name for layer in net.layers for o in layer.outputs
                                                    if o.dtype == DataType.FLOAT])
        amax: dict = {}
        while True:
            ptrs = calib.get_batch(names)
            if ptrs is None:
                break
            feed = {}
            for n, p, i in zip(names, ptrs, net.inputs):
                shape = prof.get(n, shapes[n])[1]
                feed[n] = self.t.memory.read(p, shape, _NP[i.dtype])
            wide = set(getattr(net, "int64_inputs", ()))  # int32 on the engine, int64 in the model
            ort_feed = {k: v.astype(np.int64) if k in wide else v for k, v in feed.items()}
            for k, v in {**feed, **runner.run(ort_feed)}.items():
                if isinstance(v, np.ndarray) and v.dtype == np.float32:
                    amax[k] = max(amax.get(k, 0.0), float(np.abs(v).max()))
        if not amax:
            return self._error("Calibration failure occurred with no scaling factors detected.")
        ver = "".join(self.t.__version__.split(".")[:2]) + "00"
        lines = [f"TRT-{ver}-{algo}"] + [f"{k}: {struct.pack('>f', np.float32(v / 127.0)).hex()}"
                                          for k, v in amax.items()]
        blob = ("\n".join(lines) + "\n").encode()
        calib.write_calibration_cache(blob)
        return _parse_cache(blob)

    def build_serialized_network(self, net, cfg):
        profiles = self._shapes(net, cfg)
        if profiles is None:
            return None
        shapes = profiles[0]
        scales = {}
        int8 = self.t.BuilderFlag.INT8 in cfg.flags
        qdq = any(layer.op_type == "QuantizeLinear" for layer in net.layers)
        if int8 and not qdq:
            if cfg.int8_calibrator is None:
                return self._error("INT8 requested but no calibrator")
            scales = self._calibrate(net, cfg, cfg.int8_calibrator, shapes)
            if scales is None:
                return None
        fp16 = self.t.BuilderFlag.FP16 in cfg.flags
        layers = []
        for layer in net.layers:
            if layer.type in (self.t.LayerType.CONSTANT, self.t.LayerType.SHAPE):
                continue
            tname = self.t.LayerType(layer.type).name
            if layer.precision is not None:
                prec = {DataType.FLOAT: "FP32", DataType.HALF: "FP16", DataType.INT8: "Int8"}[layer.precision]
            elif (int8 or qdq) and tname in _QUANTIZABLE:
                prec = "Int8"
            else:
                prec = "FP16" if fp16 else "FP32"
            layers.append({"Name": layer.name, "LayerType": tname,
                           "Inputs": [{"Name": "x", "Format/Datatype": f"Row major linear {prec} format"}],
                           "Outputs": [{"Name": o.name, "Format/Datatype": f"Row major linear {prec} format"}
                                       for o in layer.outputs],
                           "TacticName": "standin"})
        plan = {"model": net.model_path, "inputs": [[i.name, list(i.shape), int(i.dtype)] for i in net.inputs],
                "int64_inputs": list(getattr(net, "int64_inputs", ())),
                "outputs": [o.name for o in net.outputs], "output_dtypes": [int(o.dtype) for o in net.outputs],
                "shapes": {k: [list(s) for s in v] for k, v in shapes.items()},
                "profiles": [{k: [list(s) for s in v] for k, v in p.items()} for p in profiles],
                "layers": layers, "scales": scales, "flags": sorted(int(f) for f in cfg.flags),
                "simulate_int8": bool(self.t.simulate_int8 and scales),
                "int8_layers": [la["Name"] for la in layers if "Int8" in la["Outputs"][0]["Format/Datatype"]]}
        self.t.builds.append({"config": cfg, "network": net})
        return b"STANDIN" + json.dumps(plan).encode()


def _simulated(plan):
    """The Q/DQ model of an INT8 stand-in engine: the layers it holds in Int8 quantized, the others in float."""
    import onnx

    from calib.quantize.qdq import quantizable_layers
    from calib.quantize.qdq import Exclusions, insert_qdq

    model = onnx.load(plan["model"])
    int8 = {n[len("node_of_"):] if n.startswith("node_of_") else n for n in plan["int8_layers"]}
    floats = tuple(n for n in quantizable_layers(model) if n not in int8)
    return insert_qdq(model, {k: v * 127.0 for k, v in plan["scales"].items()}, Exclusions(names=floats))


def _parse_cache(blob: bytes) -> dict:
    out = {}
    for line in blob.decode().splitlines()[1:]:
        name, hx = line.rsplit(": ", 1)
        out[name] = struct.unpack(">f", bytes.fromhex(hx))[0]
    return out


class _Runtime:
    def __init__(self, t, major, minor):
        self.t, self.major, self.minor = t, major, minor

    def deserialize_cuda_engine(self, plan):
        if not bytes(plan).startswith(b"STANDIN"):
            return None
        return _Engine(self.t, json.loads(bytes(plan)[7:]), named=(self.major, self.minor) >= (8, 5),
                       bindings=self.major < 10)


class _Engine:
    def __init__(self, t, plan, named, bindings):
        self.t, self.plan = t, plan
        self.io = [(n, True, shape, DataType(dt)) for n, shape, dt in plan["inputs"]]
        dts = plan.get("output_dtypes") or [DataType.FLOAT] * len(plan["outputs"])
        self.io += [(o, False, None, DataType(dt)) for o, dt in zip(plan["outputs"], dts)]
        self.profiles = plan.get("profiles") or [plan["shapes"]]
        self.num_optimization_profiles = len(self.profiles)
        if named:
            self.num_io_tensors = len(self.io)
        if bindings:  # every I/O tensor once per profile, "name [profile k]" past the first
            self.num_bindings = len(self.io) * len(self.profiles)
        import onnx

        from calib.deploy.plugins import PluginModelRunner, plugin_nodes

        if plugin_nodes(onnx.load(plan["model"], load_external_data=False)):  # the plugins run in numpy
            plugin_runner = PluginModelRunner(plan["model"])
            self.runner = types.SimpleNamespace(
                run=lambda feed, outputs=None: plugin_runner.run(feed, outputs or plan["outputs"]))
        else:
            self.runner = OrtRunner(_simulated(plan) if plan.get("simulate_int8") else plan["model"],
                                    expose=[o for o in plan["outputs"]])
        wide = set(plan.get("int64_inputs") or ())
        if wide:  # the engine's int32 inputs go back to the model's int64 for ONNX Runtime
            run = self.runner.run
            self.runner.run = lambda feed, outputs=None: run(
                {k: v.astype(np.int64) if k in wide else v for k, v in feed.items()}, outputs)

    def _find(self, name):
        return next(i for i, e in enumerate(self.io) if e[0] == name)

    # named tensors
    def get_tensor_name(self, i):
        return self.io[i][0]

    def get_tensor_mode(self, name):
        return self.t.TensorIOMode.INPUT if self.io[self._find(name)][1] else self.t.TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name):
        return self.io[self._find(name)][3]

    def get_tensor_shape(self, name):
        e = self.io[self._find(name)]
        return tuple(e[2]) if e[1] else (-1,)

    def get_tensor_profile_shape(self, name, profile):
        if not 0 <= profile < len(self.profiles):
            raise IndexError(f"profile {profile} out of range")
        return [tuple(s) for s in self.profiles[profile][name]]

    # bindings
    def get_binding_name(self, i):
        k, j = divmod(i, len(self.io))
        return self.io[j][0] + (f" [profile {k}]" if k else "")

    def binding_is_input(self, i):
        return self.io[i % len(self.io)][1]

    def get_binding_index(self, name):
        return self._find(name)

    def get_binding_dtype(self, i):
        return self.io[i % len(self.io)][3]

    def get_binding_shape(self, i):
        return self.get_tensor_shape(self.io[i % len(self.io)][0])

    def get_profile_shape(self, profile, i):
        return self.get_tensor_profile_shape(self.io[i % len(self.io)][0], profile)

    def create_execution_context(self):
        named, bindings = hasattr(self, "num_io_tensors"), hasattr(self, "num_bindings")
        cls = _ContextBoth if named and bindings else _ContextV3 if named else _ContextV2
        return cls(self)

    def create_engine_inspector(self):
        layers = self.plan["layers"]
        return types.SimpleNamespace(get_engine_information=lambda fmt: json.dumps({"Layers": layers}))


class _Context:
    def __init__(self, engine):
        self.e = engine
        self.profile = 0
        self.shapes = {n: tuple(s) for n, is_in, s, _ in engine.io if is_in}
        self.addr = {}
        self.out_shapes = {}
        self.shapes_set = []  # every accepted set_input_shape: (profile, name, shape)

    def set_optimization_profile_async(self, profile, stream):
        if not 0 <= profile < len(self.e.profiles):
            return False
        self.profile = profile
        self.shapes = {n: tuple(s) for n, is_in, s, _ in self.e.io if is_in}  # shapes are set again per profile
        return True

    def set_input_shape(self, name, shape):
        lo, _, hi = self.e.profiles[self.profile][name]
        if len(shape) != len(lo) or any(s < a or s > b for s, a, b in zip(shape, lo, hi)):
            return False
        self.shapes[name] = tuple(shape)
        self.shapes_set.append((self.profile, name, tuple(shape)))
        return True

    def set_binding_shape(self, i, shape):
        k, j = divmod(i, len(self.e.io))
        if k != self.profile:
            return False  # a binding of another profile than the context's
        return _Context.set_input_shape(self, self.e.io[j][0], shape)

    def _infer(self):
        feed = {n: np.zeros(s, _NP[dt]) for n, is_in, _, dt in self.e.io if is_in
                for s in [self.shapes[n]]}
        return {k: v.shape for k, v in self.e.runner.run(feed).items()}

    def _shape(self, name):
        if name in self.shapes:
            return self.shapes[name]
        if name not in self.out_shapes or self.out_shapes.get("_for") != dict(self.shapes):
            self.out_shapes = {**self._infer(), "_for": dict(self.shapes)}
        return self.out_shapes[name]

    def get_tensor_shape(self, name):
        return self._shape(name)

    def get_binding_shape(self, i):
        return self._shape(self.e.io[i % len(self.e.io)][0])

    def set_tensor_address(self, name, ptr):
        self.addr[name] = ptr

    _profiler = None
    enqueue_emits_profile = True
    refused_profilers = 0  # `profiler = None` on 8.x: TensorRT logs an API Usage Error and keeps the profiler

    @property
    def profiler(self):
        return self._profiler

    @profiler.setter
    def profiler(self, value):
        if value is None and self.e.t.__version__.startswith("8."):
            self.refused_profilers += 1
            return
        self._profiler = value

    def _report(self):  # a stand-in time per engine layer: 1 us per layer index, so shares are known
        if self._profiler is not None and self.enqueue_emits_profile:
            for i, layer in enumerate(self.e.plan["layers"]):
                self._profiler.report_layer_time(layer["Name"], 0.001 * (i + 1))

    def _run(self):
        if any(d < 0 for s in self.shapes.values() for d in s):
            return False  # an input's shape was never set
        self._report()
        mem = self.e.t.memory
        key = (tuple((n, self.addr[n], mem.writes.get(self.addr[n], 0), self.shapes[n]) for n in self.shapes),
               tuple(sorted(self.addr.items())))
        if key == getattr(self, "_last", None):
            return True  # same inputs as the last run: the outputs in memory are already right (timing loops)
        feed = {n: mem.read(self.addr[n], self.shapes[n], _NP[dt]) for n, is_in, _, dt in self.e.io if is_in}
        out_dt = {n: _NP[dt] for n, is_in, _, dt in self.e.io if not is_in}
        for k, v in self.e.runner.run(feed).items():
            mem.to_device(self.addr[k], np.ascontiguousarray(v, out_dt.get(k, np.float32)))
        self._last = (tuple((n, self.addr[n], mem.writes.get(self.addr[n], 0), self.shapes[n]) for n in self.shapes),
                      tuple(sorted(self.addr.items())))
        return True


class _ContextV3(_Context):
    def execute_async_v3(self, stream):
        return self._run()


class _ContextV2(_Context):
    set_tensor_address = None  # bindings only: no named addresses
    set_input_shape = None
    get_tensor_shape = None

    def execute_async_v2(self, bindings, stream):
        per = len(self.e.io)
        self.addr = {self.e.io[j][0]: bindings[self.profile * per + j] for j in range(per)}
        return self._run()


class _ContextBoth(_ContextV3, _ContextV2):
    set_tensor_address = _Context.set_tensor_address
    set_input_shape = _Context.set_input_shape
    get_tensor_shape = _Context.get_tensor_shape
