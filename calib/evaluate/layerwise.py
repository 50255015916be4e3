"""Run the FP32 reference and each INT8 simulation side by side, batch by batch, and compare them."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnx

from calib.evaluate.metrics import OutputRows, TensorStats
from calib.model import ModelInfo
from calib.qdq import Exclusions, count_qdq, insert_qdq
from calib.runners.onnxruntime import OrtRunner

log = logging.getLogger(__name__)


@dataclass
class Comparison:
    """Per-tensor statistics of one INT8 configuration against FP32."""

    name: str
    tensors: dict = field(default_factory=dict)  # tensor -> TensorStats
    outputs: tuple = ()  # the model's outputs: also compared sample by sample (intervals over samples)
    rows: dict = field(default_factory=dict)  # output -> OutputRows

    def update(self, ref: dict, test: dict) -> None:
        for k, v in test.items():
            if k in ref and isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.shape == ref[k].shape:
                self.tensors.setdefault(k, TensorStats()).update(ref[k], v)
                if k in self.outputs:
                    self.rows.setdefault(k, OutputRows()).update(ref[k], v)

    def layers(self, info: ModelInfo) -> list[dict]:
        out = []
        for t in info.activations:
            if t in self.tensors:
                out.append({"tensor": t, "op_type": info.op_types.get(t, "?"), **self.tensors[t].result()})
        return out


class Simulator:
    """The FP32 model and one Q/DQ model per configuration, all exposing the same tensors."""

    def __init__(self, model_path, info: ModelInfo, configs: dict, exclude: dict | None = None,
                 layerwise: bool = True):
        self.info = info
        proto = onnx.load(str(model_path))
        expose = list(info.activations) if layerwise else []
        self.outputs = list(info.outputs)
        self.names = list(dict.fromkeys(self.outputs + expose))
        self.ref = OrtRunner(model_path, expose=expose)
        self.tests = {}
        self.qdq_models = {}
        exclude = exclude or {}
        for name, amax in configs.items():
            q = insert_qdq(proto, amax, exclude.get(name, Exclusions()))
            log.info("%s: %d Q/DQ pairs", name, count_qdq(q))
            self.qdq_models[name] = q
            self.tests[name] = OrtRunner(q, expose=expose)
        avail = set(self.ref.tensor_names())
        self.names = [n for n in self.names if n in avail]

    def run(self, batch: dict) -> tuple[dict, dict]:
        ref = self.ref.run(batch, self.names)
        return ref, {name: r.run(batch, self.names) for name, r in self.tests.items()}
