"""A stand-in for the parts of the TensorRT Python API that calib uses, faithful to what real TensorRT 8.6 did
on an H200 (shared/golden): the calibrator protocol (a cache is used only when its header names the calibrator
class's algorithm, else TensorRT asks for batches and, with none, fails with no scaling factors), cache bytes in
TensorRT's format, engine I/O by named tensors (v3) or bindings (v2), optimization profiles, layer precisions,
the engine inspector's JSON. Engines run the ONNX model with ONNX Runtime in FP32, so outputs are real numbers.

Built with `make_trt(version)`: 8.6.0 (both I/O APIs), 8.4.0 (bindings only), 10.x (named only, strongly typed
flag), 11.x (strongly typed only: no IInt8Calibrator, no FP16/INT8 or precision-constraint flags, no layer
precisions). At 10.x and 11.x it offers no name, and no parameter name, that the real bindings of 10.13 and 11.4
lack (tests/test_trt_api.py), beside the test hooks in STANDIN_ONLY.
"""
from __future__ import annotations

import ctypes
import enum
import types

import numpy as np

from .builder import _Builder, _Parser
from .dtypes import ALGO, LAYER_TYPE, NP, OTHER_LAYER, DataType
from .engine import _Runtime


# What the stand-in offers beyond TensorRT's API, for tests to read: {real class or "module": names}
STANDIN_ONLY = {"module": {"memory", "builds", "simulate_int8", "prelu_reads_int8", "plugins_loaded",
                           "calibration_shapes"},
                "IBuilderConfig": {"calibration_profile", "profiles"}, "IOptimizationProfile": {"shapes"},
                "INetworkDefinition": {"layers"}, "IExecutionContext": {"shapes_set"}}


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

    # CUDA graphs: while a capture is open, engine runs are recorded, not run (as on a GPU); a launch runs them
    capturing: list | None = None
    graphs = 0  # graphs instantiated and not yet destroyed
    launches = 0

    def begin_capture(self) -> None:
        self.capturing = []

    def end_capture(self) -> list:
        graph, self.capturing = self.capturing, None
        self.graphs += 1
        return graph

    def capture(self, stream, work):
        self.begin_capture()
        work()
        return self.end_capture()

    def launch(self, graph, stream) -> None:
        self.launches += 1
        for run in graph:
            run()

    def free_graph(self, graph) -> None:
        self.graphs -= 1

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
    t = types.SimpleNamespace(__version__=version, memory=mem, builds=[], simulate_int8=False,
                              prelu_reads_int8=True)
    # simulate_int8: INT8 engines run calib's Q/DQ simulation of the layers they hold in Int8 (with the scales
    # the calibrator gave), so tests see the accuracy a fallback choice buys; else they run plain FP32
    t.DataType = DataType
    t.float32, t.float16, t.int8, t.int32, t.bool = (DataType.FLOAT, DataType.HALF, DataType.INT8, DataType.INT32,
                                                     DataType.BOOL)
    t.nptype = lambda trt_type: NP[DataType(trt_type)]
    weak = "FP16 INT8 " if major < 11 else ""  # TensorRT 11 types every network strongly
    constraints = " OBEY_PRECISION_CONSTRAINTS PREFER_PRECISION_CONSTRAINTS" if major < 11 else ""
    t.BuilderFlag = enum.IntEnum("BuilderFlag", weak + "DEBUG GPU_FALLBACK REFIT TF32" + constraints, start=0)
    t.MemoryPoolType = enum.IntEnum("MemoryPoolType", "WORKSPACE", start=0)
    libraries = "CUBLAS CUBLAS_LT CUDNN " if major < 11 else ""  # 11 has TensorRT's own kernels only
    t.TacticSource = enum.IntEnum("TacticSource", libraries + "EDGE_MASK_CONVOLUTIONS JIT_CONVOLUTIONS", start=0)
    t.ProfilingVerbosity = enum.IntEnum("ProfilingVerbosity", "LAYER_NAMES_ONLY NONE DETAILED", start=0)
    t.LayerInformationFormat = enum.IntEnum("LayerInformationFormat", "ONELINE JSON", start=0)
    t.TensorIOMode = enum.IntEnum("TensorIOMode", "NONE INPUT OUTPUT", start=0)
    t.LayerType = enum.IntEnum("LayerType", " ".join(sorted(set(LAYER_TYPE.values()) | {OTHER_LAYER})), start=0)
    flags = "EXPLICIT_BATCH" + (" STRONGLY_TYPED" if major >= 10 else "") if major < 11 else "STRONGLY_TYPED"
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
    t.Logger = type("Logger", (ILogger,), {"log": lambda self, severity, msg: None})
    if major < 11:
        for cls_name in ALGO:
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
