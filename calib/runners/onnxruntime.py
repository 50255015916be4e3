"""ONNX Runtime on the CPU: the embedded default runner for FP32 reference and INT8 simulation."""
from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from calib.errors import DataError, ModelError
from calib.model import load_model, with_outputs

log = logging.getLogger(__name__)


@functools.cache
def _register_lean_arena() -> None:
    """Register, once per process, a CPU arena that extends by the requested size (kSameAsRequested)."""
    try:
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))
    except Exception as exc:  # registered already in this process, or an ONNX Runtime without it: the default serves
        log.debug("lean arena not registered: %s", exc)


class OrtRunner:
    """Runs an ONNX model with ONNX Runtime; `expose` lists intermediate tensors to return."""

    def __init__(self, model: str | Path | onnx.ModelProto, expose: Sequence[str] = (), threads: int = 0,
                 optimize: bool = True, spin: bool = True, lean: bool = False):
        proto = load_model(model) if not isinstance(model, onnx.ModelProto) else model
        self.label = str(model) if not isinstance(model, onnx.ModelProto) else proto.graph.name
        self._graph_outputs = [o.name for o in proto.graph.output]
        proto = with_outputs(proto, list(expose)) if expose else proto
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if lean:  # one arena that grows by what is asked, not by powers of two: steady, lower peak memory
            _register_lean_arena()
            so.add_session_config_entry("session.use_env_allocators", "1")
        if not spin:  # idle ONNX Runtime threads would take the cores from work done between runs
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            so.intra_op_num_threads = threads
        if not optimize:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            self.session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelError(f"{self.label}: ONNX Runtime cannot load the model ({exc})") from None
        self._names = [o.name for o in self.session.get_outputs()]
        self.inputs = {i.name: (i.shape, i.type) for i in self.session.get_inputs()}

    def tensor_names(self) -> list[str]:
        return list(self._names)

    def output_names(self) -> list[str]:
        return list(self._graph_outputs)

    def run(self, batch: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        missing = [n for n in self.inputs if n not in batch]
        if missing:
            raise DataError(f"{self.label}: batch lacks model input '{missing[0]}' (has {sorted(batch)})")
        feed = {n: batch[n] for n in self.inputs}
        names = list(outputs) if outputs is not None else self._names
        try:
            values = self.session.run(names, feed)
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            raise DataError(f"{self.label}: inference failed: {first}") from None
        return dict(zip(names, values))
