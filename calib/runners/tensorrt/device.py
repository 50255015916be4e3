"""Device memory, copies, streams and timing through cuda-python's runtime API."""
from __future__ import annotations

import ctypes

import numpy as np

from calib.errors import CalibError, require


def _cudart():
    try:
        from cuda.bindings import runtime  # cuda-python >= 12.8
        return runtime
    except ImportError:
        return require("cuda.cudart", "trt")


def host_view(ptr: int, nbytes: int, dtype, shape) -> np.ndarray:
    """A numpy array over `nbytes` of host memory at `ptr` (pinned memory from malloc_host), of `shape`."""
    count = int(np.prod(shape)) if len(shape) else 1
    buf = (ctypes.c_char * max(int(nbytes), 1)).from_address(int(ptr))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


class Cuda:
    """The few runtime calls calib needs; every error becomes a CalibError naming the call."""

    def __init__(self, device: int = 0):
        self.rt = _cudart()
        self.graph_nodes: dict | None = None  # the node counts of the last graph captured
        try:
            res = self.rt.cudaSetDevice(device)
        except RuntimeError as exc:  # no driver: cuda-python cannot load libcuda
            raise CalibError(f"no usable NVIDIA GPU here ({exc})") from None
        self._check(res, f"cudaSetDevice({device})")
        self.device = device

    def _check(self, res, what: str):
        err = res[0] if isinstance(res, tuple) else res
        if int(err) != 0:
            raise CalibError(f"CUDA {what} failed: {err}")
        if isinstance(res, tuple):
            return res[1] if len(res) == 2 else res[1:]
        return None

    def name(self) -> str:
        prop = self._check(self.rt.cudaGetDeviceProperties(self.device), "cudaGetDeviceProperties")
        name = prop.name
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        return f"{name.rstrip(chr(0))} (sm_{prop.major}{prop.minor})"

    def malloc(self, nbytes: int) -> int:
        return int(self._check(self.rt.cudaMalloc(max(int(nbytes), 1)), "cudaMalloc"))

    def free(self, ptr: int) -> None:
        self._check(self.rt.cudaFree(ptr), "cudaFree")

    def to_device(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._check(self.rt.cudaMemcpy(ptr, host.ctypes.data, host.nbytes, kind), "cudaMemcpy host->device")

    def to_host(self, host: np.ndarray, ptr: int) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._check(self.rt.cudaMemcpy(host.ctypes.data, ptr, host.nbytes, kind), "cudaMemcpy device->host")

    def malloc_host(self, nbytes: int) -> int:
        """Page-locked host memory: copies from it run asynchronously on a stream (and faster than pageable)."""
        return int(self._check(self.rt.cudaMallocHost(max(int(nbytes), 1)), "cudaMallocHost"))

    def free_host(self, ptr: int) -> None:
        self._check(self.rt.cudaFreeHost(ptr), "cudaFreeHost")

    def to_device_async(self, ptr: int, host_ptr: int, nbytes: int, stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._check(self.rt.cudaMemcpyAsync(ptr, host_ptr, int(nbytes), kind, stream), "cudaMemcpyAsync host->device")

    def to_host_async(self, host_ptr: int, ptr: int, nbytes: int, stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._check(self.rt.cudaMemcpyAsync(host_ptr, ptr, int(nbytes), kind, stream), "cudaMemcpyAsync device->host")

    def stream(self):
        return self._check(self.rt.cudaStreamCreate(), "cudaStreamCreate")

    def sync(self, stream) -> None:
        self._check(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def event(self):
        return self._check(self.rt.cudaEventCreate(), "cudaEventCreate")

    def record(self, event, stream) -> None:
        self._check(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def elapsed_ms(self, start, end) -> float:
        self._check(self.rt.cudaEventSynchronize(end), "cudaEventSynchronize")
        return float(self._check(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    def capture(self, stream, work) -> object:
        """An executable CUDA graph of what `work()` enqueues on `stream` (nothing runs while it is captured).

        Timing graph launches leaves out the host's per-kernel launch cost, which can hide a small engine's GPU time
        (trtexec --useCudaGraph). Raises CalibError when the work cannot be captured (a plugin that syncs)."""
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self._check(self.rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")
        try:
            work()
        finally:
            graph = self._check(self.rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")
        self.graph_nodes = self.node_counts(graph)
        try:
            return self._check(self.rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
        finally:
            self._check(self.rt.cudaGraphDestroy(graph), "cudaGraphDestroy")

    def node_counts(self, graph) -> dict | None:
        """What one run launches, from its captured graph: {"kernel": n, "memset": m, ...}, each node type counted
        (a run enqueued without a graph pays the host's launch cost of each); None where cuda-python cannot say."""
        try:
            _, _, n = self.rt.cudaGraphGetNodes(graph)
            err, nodes, _ = self.rt.cudaGraphGetNodes(graph, n)
            if int(err) != 0:
                return None
            counts: dict[str, int] = {}
            for node in nodes:
                err, kind = self.rt.cudaGraphNodeGetType(node)
                if int(err) != 0:
                    return None
                name = getattr(kind, "name", str(kind)).removeprefix("cudaGraphNodeType").lower()
                counts[name] = counts.get(name, 0) + 1
            return dict(sorted(counts.items()))
        except Exception:  # noqa: BLE001 - an older cuda-python: the timing does not need the counts
            return None

    def launch(self, graph, stream) -> None:
        self._check(self.rt.cudaGraphLaunch(graph, stream), "cudaGraphLaunch")

    def free_graph(self, graph) -> None:
        self._check(self.rt.cudaGraphExecDestroy(graph), "cudaGraphExecDestroy")
