"""ONNX Runtime on the CPU: the embedded default runner for FP32 reference and INT8 simulation."""
from __future__ import annotations

import functools
import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from calib.errors import DataError, ModelError
from calib.quantize.model import load_model, output_names, with_outputs

log = logging.getLogger(__name__)

_RENAMES = "calib.capture_renames"  # metadata of a kept capture graph: exposed name -> its name in that graph


@functools.cache
def _register_lean_arena() -> None:
    """Register, once per process, a CPU arena that extends by the requested size (kSameAsRequested)."""
    try:
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))
    except Exception as exc:  # registered already in this process, or an ONNX Runtime without it: the default serves
        log.debug("lean arena not registered: %s", exc)


def lean_options(so: ort.SessionOptions) -> ort.SessionOptions:
    """`so` for a session that takes its tensors from the one CPU arena all such sessions share (it grows by what is
    asked, not by powers of two) and takes and gives back each tensor on its own (calib.quantize.liveness's model
    of a run): a memory pattern is one block per session and input shape for all of a run's intermediates, which
    the shared arena cannot reuse for another session's tensors (tests/test_budget.py's 512x512 conv net evaluated
    with two caches in runs of 3: peak 0.68 GB without, 0.99-1.05 GB with)."""
    _register_lean_arena()
    so.add_session_config_entry("session.use_env_allocators", "1")
    so.enable_mem_pattern = False
    return so


def whole(exc: BaseException, limit: int = 2000) -> str:
    """ONNX Runtime's message on one line, every line of it kept (the one naming the input and the dimension
    comes after the first): lines joined with ' | ', cut only past `limit` characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " | ".join(lines) or exc.__class__.__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def _shrink() -> ort.RunOptions:
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return ro


class OrtRunner:
    """Runs an ONNX model with ONNX Runtime; `expose` lists intermediate tensors to return."""

    def __init__(self, model: str | Path | onnx.ModelProto, expose: Sequence[str] = (), threads: int = 0,
                 optimize: bool = True, spin: bool = True, lean: bool = False, order_free: bool = False,
                 label: str | None = None, model_sha256: str | None = None, arena: bool = True):
        """order_free: the exposed tensors may come back with their values permuted (ONNX Runtime's blocked
        layout, without the reorders to NCHW; see calib.runners.blocked), for order-free statistics only.
        label: what errors call the model (default: its path, or the graph's name for a loaded model).
        model_sha256: the model file's digest, naming the order-free capture graph kept on disk for later runs
        (calib.runners.graph_cache); without it the graph is made every time.
        arena: False: no CPU arena, every tensor handed back to the C heap when freed (for runs of changing
        sizes, whose regions an arena would keep side by side)."""
        proto = load_model(model) if not isinstance(model, onnx.ModelProto) else model
        self.label = label or (str(model) if not isinstance(model, onnx.ModelProto) else proto.graph.name)
        self._graph_outputs = [o.name for o in proto.graph.output]
        self._settings = (threads, spin, lean, arena)
        self._rename: dict[str, str] = {}
        if order_free and expose and optimize:
            self.session = self._blocked(proto, list(expose), model_sha256)
        else:
            self.session = self._session(with_outputs(proto, list(expose)) if expose else proto, optimize)
        self._names = [o.name for o in self.session.get_outputs()]
        back = {v: k for k, v in self._rename.items()}
        self._names = [back.get(n, n) for n in self._names]
        self.inputs = {i.name: (i.shape, i.type) for i in self.session.get_inputs()}

    def _options(self, optimize: bool) -> ort.SessionOptions:
        threads, spin, lean, arena = self._settings
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if not arena:
            so.enable_cpu_mem_arena = False
        if lean and arena:  # steady, lower peak memory
            lean_options(so)
        elif lean:  # no arena: each tensor from the C heap, still without a memory pattern
            so.enable_mem_pattern = False
        if not spin:  # idle ONNX Runtime threads would take the cores from work done between runs
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            so.intra_op_num_threads = threads
        if not optimize:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        # Q/DQ stays fake quantization (float arithmetic on dequantized values, as TensorRT's INT8 kernels compute
        # it): ONNX Runtime's own QLinear fusions use CPU integer kernels whose u8s8 products saturate on x86,
        # which took MobileNetV2's simulated agreement from 0.62 to 0.34 with TensorRT's own scales
        so.add_session_config_entry("session.disable_quant_qdq", "1")
        return so

    def _session(self, proto: onnx.ModelProto, optimize: bool, so: ort.SessionOptions | None = None):
        try:
            return ort.InferenceSession(proto.SerializeToString(), so or self._options(optimize),
                                        providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelError(f"{self.label}: ONNX Runtime cannot load the model ({whole(exc)})") from None

    def _blocked(self, proto: onnx.ModelProto, expose: list[str], model_sha256: str | None):
        """The model with `expose` as outputs as ONNX Runtime optimizes it, its outputs taken before the layout
        reorders (from the graph kept on disk when there is one: then the exposed copy is not even made)."""
        from calib.runners import graph_cache

        k = graph_cache.key(model_sha256, output_names(proto, expose)) if model_sha256 else None
        hit = graph_cache.lookup(k) if k else None
        if hit is not None:
            kind, path = hit
            if kind == "plain":
                return self._session(with_outputs(proto, expose), True)
            try:
                fast = ort.InferenceSession(str(path), self._options(False), providers=["CPUExecutionProvider"])
                self._rename = json.loads(fast.get_modelmeta().custom_metadata_map[_RENAMES])
                return fast
            except Exception as exc:  # unreadable: made again below
                log.debug("%s: kept capture graph %s not used: %s", self.label, path, exc)
                graph_cache.forget(k)
        exposed = with_outputs(proto, expose)
        session, data = self._make_blocked(proto, exposed)
        if k:
            graph_cache.store(k, data)
        return session

    def _make_blocked(self, proto: onnx.ModelProto, exposed: onnx.ModelProto):
        """(session, bytes of the rewritten graph); bytes None where the plain exposure serves."""
        from calib.runners import blocked

        with tempfile.TemporaryDirectory(prefix="calib-ort-") as tmp:
            so = self._options(True)
            so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
            session = self._session(exposed, True, so)
            try:
                optimized = onnx.load(so.optimized_model_filepath)
                if not any(n.domain == blocked.NCHWC for n in optimized.graph.node):
                    return session, None
                wanted = [o.name for o in exposed.graph.output]
                rewritten, names = blocked.unblock(optimized, wanted, blocked.shapes(proto))
                rename = {k: v for k, v in names.items() if k != v}
                onnx.helper.set_model_props(rewritten, {_RENAMES: json.dumps(rename)})
                data = rewritten.SerializeToString()
                fast = ort.InferenceSession(data, self._options(False), providers=["CPUExecutionProvider"])
            except Exception as exc:  # any surprise in ONNX Runtime's graph: the plain exposure serves
                log.debug("%s: blocked-layout capture not used: %s", self.label, exc)
                return session, None
        self._rename = rename
        return fast, data

    def tensor_names(self) -> list[str]:
        return list(self._names)

    def output_names(self) -> list[str]:
        return list(self._graph_outputs)

    def run(self, batch: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None,
            release: bool = False) -> dict[str, np.ndarray]:
        """The named tensors (default: every exposed one) on `batch`. release: after this run, give the CPU
        arena's free regions back (ONNX Runtime's arena shrinkage; with `lean`, the arena all lean sessions share):
        for a session's last run, before other work needs the memory."""
        missing = [n for n in self.inputs if n not in batch]
        if missing:
            raise DataError(f"{self.label}: batch lacks model input '{missing[0]}' (has {sorted(batch)})")
        feed = {n: batch[n] for n in self.inputs}
        names = list(outputs) if outputs is not None else self._names
        try:
            values = self.session.run([self._rename.get(n, n) for n in names], feed, _shrink() if release else None)
        except Exception as exc:
            raise DataError(f"{self.label}: inference failed: {whole(exc)}") from None
        return dict(zip(names, values))
