"""Run a TensorRT engine on calib batches (the Runner protocol) and time it with CUDA events."""
from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from calib.errors import CalibError, DataError
from calib.io.nvtx import nvtx_range
from calib.runners.tensorrt import compat

log = logging.getLogger(__name__)


class TrtRunner:
    """An engine on one optimization profile (`profile`, default 0), with device buffers sized for that profile's
    max shapes: each call sets the input shapes of its batch, which must lie within the profile; a batch smaller
    than the profile's smallest (or a fixed engine's) batch is padded and the outputs cut back."""

    backend = "tensorrt"

    def __init__(self, plan: bytes | str | Path, trt=None, cuda=None, label: str | None = None,
                 prefer_v3: bool = True, profile: int = 0):
        self.trt = trt or compat.load()
        if cuda is None:
            from calib.runners.tensorrt.device import Cuda

            cuda = Cuda()
        self.cuda = cuda
        if isinstance(plan, (str, Path)):
            self.label = label or str(plan)
            try:
                plan = Path(plan).read_bytes()
            except OSError as exc:
                raise CalibError(f"{self.label}: cannot read engine ({exc.strerror})") from None
        else:
            self.label = label or "engine"
        from calib.runners.tensorrt.builder import trt_logger

        compat.load_plugins(self.trt, trt_logger(self.trt))
        self.runtime = self.trt.Runtime(trt_logger(self.trt))
        self.engine = self.runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise CalibError(f"{self.label}: TensorRT cannot load this engine (another TensorRT version or GPU?)")
        self.profiles = compat.num_profiles(self.engine)
        if not 0 <= profile < self.profiles:
            raise CalibError(f"{self.label}: no optimization profile {profile} (the engine has "
                             f"{self.profiles}: 0..{self.profiles - 1})")
        self.profile = profile
        self.context = self.engine.create_execution_context()
        self.stream = self.cuda.stream()
        if profile:
            compat.select_profile(self.context, profile, self.stream)
        self.io = compat.io_tensors(self.trt, self.engine)
        self.inputs = [n for n, is_in in self.io if is_in]
        self.outputs = [n for n, is_in in self.io if not is_in]
        self.dtypes = {n: np.dtype(compat.tensor_dtype(self.trt, self.engine, n)) for n, _ in self.io}
        self.dynamic = {n: any(d < 0 for d in compat.engine_shape(self.engine, n)) for n in self.inputs}
        self.ranges = {}  # input -> (min, opt, max) in this profile; a fixed input's three are its shape
        for n in self.inputs:
            if self.dynamic[n]:
                self.ranges[n] = compat.profile_shape(self.engine, n, profile)
            else:
                self.ranges[n] = (compat.engine_shape(self.engine, n),) * 3
        self.max_shape = {n: tuple(r[2]) for n, r in self.ranges.items()}
        self.min_batch = {n: int(r[0][0]) for n, r in self.ranges.items()}
        for n in self.inputs:
            if self.dynamic[n]:
                self._set_shape(n, self.max_shape[n])
        self.device, self.nbytes, self.pinned = {}, {}, {}
        self.async_copies = all(hasattr(self.cuda, f) for f in ("malloc_host", "to_device_async", "to_host_async"))
        for n, _ in self.io:
            shape = self.max_shape.get(n) or self._context_shape(n)
            self.nbytes[n] = int(np.prod(shape)) * self.dtypes[n].itemsize
            self.device[n] = self.cuda.malloc(self.nbytes[n])
            if self.async_copies:  # page-locked host buffers: copies run on the stream, without a host sync each
                self.pinned[n] = self.cuda.malloc_host(self.nbytes[n])
        self.execute = compat.Executor(self.engine, self.context, self.device, prefer_v3, profile)

    def _set_shape(self, name, shape) -> None:
        compat.set_input_shape(self.context, self.engine, name, shape, self.profile)

    def _context_shape(self, name) -> tuple[int, ...]:
        return compat.context_shape(self.context, self.engine, name, self.profile)

    def tensor_names(self) -> list[str]:
        return list(self.outputs)

    def output_names(self) -> list[str]:
        return list(self.outputs)

    def _feed(self, batch: Mapping[str, np.ndarray]) -> int:
        n = None
        for name in self.inputs:
            if name not in batch:
                raise DataError(f"{self.label}: batch lacks engine input '{name}' (has {sorted(batch)})")
            x = np.ascontiguousarray(batch[name], dtype=self.dtypes[name])
            n = x.shape[0] if n is None else n
            self._check_shape(name, x.shape)
            if x.shape[0] < self.min_batch[name]:  # below the profile's batch: pad, outputs are cut back
                pad = self.min_batch[name] - x.shape[0]
                x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)])
            if self.dynamic[name]:
                self._set_shape(name, x.shape)
            self._to_device(name, x)
        return int(n)

    def _to_device(self, name: str, x: np.ndarray) -> None:
        if not self.async_copies:
            self.cuda.to_device(self.device[name], x)
            return
        from calib.runners.tensorrt.device import host_view

        host_view(self.pinned[name], self.nbytes[name], x.dtype, x.shape)[...] = x
        self.cuda.to_device_async(self.device[name], self.pinned[name], x.nbytes, self.stream)

    def _check_shape(self, name: str, shape) -> None:
        lo, _, hi = self.ranges[name]
        inside = len(shape) == len(hi) and shape[0] <= hi[0] and all(
            a <= s <= b for s, a, b in zip(shape[1:], lo[1:], hi[1:]))
        if inside:
            return
        if not self.dynamic[name]:
            raise DataError(f"{self.label}: input '{name}' has shape {list(shape)}, the engine takes {list(hi)}")
        raise DataError(f"{self.label}: input '{name}' has shape {list(shape)}, outside optimization profile "
                        f"{self.profile}: the engine takes {list(lo)} to {list(hi)}")

    def run(self, batch: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        with nvtx_range("calib.run"):
            return self._run(batch, outputs)

    def _run(self, batch, outputs) -> dict[str, np.ndarray]:
        names = list(outputs if outputs is not None else self.outputs)
        for name in names:
            if name not in self.device or name in self.inputs:
                raise CalibError(f"{self.label}: '{name}' is not an engine output")
        n = self._feed(batch)
        self.execute(self.stream)
        shapes = {name: tuple(self._context_shape(name)) for name in names}
        if self.async_copies:  # every output copied on the stream, one sync for all
            from calib.runners.tensorrt.device import host_view

            for name in names:
                nbytes = int(np.prod(shapes[name])) * self.dtypes[name].itemsize
                self.cuda.to_host_async(self.pinned[name], self.device[name], nbytes, self.stream)
            self.cuda.sync(self.stream)
            got = {name: host_view(self.pinned[name], self.nbytes[name], self.dtypes[name], shapes[name]).copy()
                   for name in names}
        else:
            self.cuda.sync(self.stream)
            got = {}
            for name in names:
                got[name] = np.empty(shapes[name], self.dtypes[name])
                self.cuda.to_host(got[name], self.device[name])
        out = {}
        for name in names:
            host = got[name]
            host = host[:n] if host.ndim and host.shape[0] >= n else host
            out[name] = host.astype(np.float32) if host.dtype == np.float16 else host
        return out

    def latency(self, batch: Mapping[str, np.ndarray], warmup: int = 50, iters: int = 50,
                repeats: int = 15, cuda_graph: bool = False) -> dict:
        """Median over `repeats` groups of `iters` back-to-back runs (CUDA events), after `warmup` runs.

        cuda_graph: each run is one launch of a CUDA graph of the engine's work, so the figure is the GPU's time
        without the host's per-kernel launch cost (trtexec --useCudaGraph)."""
        with nvtx_range("calib.bench"):
            timer = self.timer(batch, warmup, cuda_graph)
            try:
                per_run = [timer.group(iters) for _ in range(repeats)]
            finally:
                timer.close()
            return summary(per_run, timer.samples, repeats * iters, cuda_graph, timer.nodes)

    def timer(self, batch: Mapping[str, np.ndarray], warmup: int = 50, cuda_graph: bool = False) -> "Timer":
        """`batch` fed once and warmed up: Timer.group(iters) times one group of runs (engines timed alternately
        take turns through their timers)."""
        n = self._feed(batch)
        graph = None
        if cuda_graph:
            self.execute(self.stream)  # TensorRT's deferred set-up happens outside the capture
            self.cuda.sync(self.stream)
            graph = self.cuda.capture(self.stream, lambda: self.execute(self.stream))
        timer = Timer(self, n, graph, getattr(self.cuda, "graph_nodes", None) if graph is not None else None)
        for _ in range(warmup):
            timer.run()
        self.cuda.sync(self.stream)
        return timer

    def close(self) -> None:
        for ptr in self.device.values():
            self.cuda.free(ptr)
        for ptr in self.pinned.values():
            self.cuda.free_host(ptr)
        self.device, self.pinned = {}, {}
        self.execute = self.context = None  # a profile serves one context at a time: let the next one have it


class Timer:
    """One engine's timed groups on its runner's stream (calib.runners.tensorrt.runner.TrtRunner.timer)."""

    def __init__(self, runner: TrtRunner, samples: int, graph=None, nodes: dict | None = None):
        self.runner, self.samples, self.graph, self.nodes = runner, samples, graph, nodes
        self.start, self.end = runner.cuda.event(), runner.cuda.event()

    def run(self) -> None:
        r = self.runner
        if self.graph is not None:
            r.cuda.launch(self.graph, r.stream)
        else:
            r.execute(r.stream)

    def group(self, iters: int) -> float:
        """Milliseconds per run over `iters` back-to-back runs."""
        r = self.runner
        r.cuda.record(self.start, r.stream)
        for _ in range(iters):
            self.run()
        r.cuda.record(self.end, r.stream)
        return r.cuda.elapsed_ms(self.start, self.end) / iters

    def close(self) -> None:
        if self.graph is not None:
            self.runner.cuda.free_graph(self.graph)
            self.graph = None


def summary(per_run: list[float], samples: int, runs: int, cuda_graph: bool = False,
            graph_nodes: dict | None = None) -> dict:
    """The latency row of timed groups: median, min and max ms per run, samples per second at the median; with a
    CUDA graph, what one run launches (graph_nodes: {"kernel": n, ...}) where cuda-python could count it."""
    med = statistics.median(per_run)
    row = {"batch": samples, "median_ms": round(med, 4), "min_ms": round(min(per_run), 4),
           "max_ms": round(max(per_run), 4), "throughput_per_s": round(samples * 1000.0 / med, 1),
           "runs": runs, "cuda_graph": bool(cuda_graph)}
    return row | ({"graph_nodes": graph_nodes} if graph_nodes else {})


def graph_latency(runner: TrtRunner, batch: Mapping[str, np.ndarray], label: str) -> dict | None:
    """runner.latency as CUDA-graph launches, or None (said once) where the engine's work cannot be captured (a
    plugin that syncs): the caller keeps the enqueued figure."""
    try:
        return runner.latency(batch, cuda_graph=True)
    except Exception as exc:  # noqa: BLE001 - any capture failure leaves the enqueued figure standing
        log.warning("%s: no CUDA-graph timing (%s); the enqueued figure stands", label, str(exc)[:200])
        return None
