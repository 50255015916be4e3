"""The cuda-python runtime calls calib uses, on host memory shared with the TensorRT stand-in; every call
returns (error, value...) as cuda-python does."""
import enum
import types

from tests.standin.tensorrt import SHARED

_OK = 0


class cudaMemcpyKind(enum.IntEnum):
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2


def cudaSetDevice(device):
    return (_OK,) if device == 0 else (101,)


def cudaGetDeviceProperties(device):
    return _OK, types.SimpleNamespace(name=b"stand-in GPU\x00\x00", major=9, minor=0)


def cudaMalloc(nbytes):
    return _OK, SHARED.malloc(nbytes)


def cudaFree(ptr):
    SHARED.free(ptr)
    return (_OK,)


def cudaMemcpy(dst, src, nbytes, kind):
    SHARED.copy(dst, src, nbytes)
    return (_OK,)


def cudaMallocHost(nbytes):
    return _OK, SHARED.malloc_host(nbytes)


def cudaFreeHost(ptr):
    SHARED.free_host(ptr)
    return (_OK,)


def cudaMemcpyAsync(dst, src, nbytes, kind, stream):
    SHARED.copy_async(dst, src, nbytes, stream)
    return (_OK,)


def cudaStreamCreate():
    return _OK, 7


def cudaStreamSynchronize(stream):
    return (_OK,)


def cudaEventCreate():
    return _OK, object()


def cudaEventRecord(event, stream):
    return (_OK,)


def cudaEventSynchronize(event):
    return (_OK,)


def cudaEventElapsedTime(start, end):
    return _OK, 25.0


class cudaStreamCaptureMode(enum.IntEnum):
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


def cudaStreamBeginCapture(stream, mode):
    SHARED.begin_capture()
    return (_OK,)


def cudaStreamEndCapture(stream):
    return _OK, SHARED.end_capture()


class cudaGraphNodeType(enum.IntEnum):
    cudaGraphNodeTypeKernel = 0
    cudaGraphNodeTypeMemcpy = 1
    cudaGraphNodeTypeMemset = 2


def cudaGraphGetNodes(graph, numNodes=0):
    """A kernel node per engine layer of each run captured (an engine launches about one kernel a layer)."""
    nodes = [cudaGraphNodeType.cudaGraphNodeTypeKernel for run in graph for _ in range(getattr(run, "kernels", 1))]
    return _OK, nodes[:numNodes], len(nodes)


def cudaGraphNodeGetType(node):
    return _OK, node


def cudaGraphInstantiate(graph, flags):
    return _OK, graph


def cudaGraphDestroy(graph):
    return (_OK,)


def cudaGraphLaunch(graph, stream):
    SHARED.launch(graph, stream)
    return (_OK,)


def cudaGraphExecDestroy(graph):
    SHARED.free_graph(graph)
    return (_OK,)
