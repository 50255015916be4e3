"""The FP16+INT8 model (calib.quantize.fp16) on ONNX Runtime's CPU, which has few FP16 kernels.

`emulated` rewrites the model in FP32 with FP16's rounding kept: every FP16 initializer and constant becomes the
same values in FP32 (exact), and every tensor the model makes in FP16 is rounded to FP16 where it is made (a Cast
to FP16 and back). A layer then computes in FP32 from FP16 inputs and rounds its output, as a TensorRT FP16
kernel accumulates in FP32 and writes FP16. ONNX Runtime's graph optimizations are off for this model, so that no
pass folds a Cast pair away. `Fp16Runner` runs it beside calib's other candidates (calib.evaluate.api's engines).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from calib.quantize.fp16 import Names
from calib.quantize.model import elem_types

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def emulated(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` in FP32 with a rounding to FP16 after every tensor it makes in FP16."""
    types = elem_types(model)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for t in g.initializer:
        if t.data_type == F16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    nodes = []
    fresh = Names({t for n in g.node for t in list(n.input) + list(n.output)}).fresh

    def rounding(src: str, dst: str) -> list:
        h = fresh(f"{dst}__fp16")
        return [helper.make_node("Cast", [src], [h], to=F16, name=fresh(f"{dst}__round")),
                helper.make_node("Cast", [h], [dst], to=F32, name=fresh(f"{dst}__back"))]

    for gi in g.input:
        if gi.type.tensor_type.elem_type == F16:
            gi.type.tensor_type.elem_type = F32
            inner = fresh(f"{gi.name}__in")
            for n in g.node:
                for k, t in enumerate(n.input):
                    if t == gi.name:
                        n.input[k] = inner
            nodes += rounding(gi.name, inner)
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F16:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
        if n.op_type == "Cast":
            to = next(a for a in n.attribute if a.name == "to")
            if to.i == F16:
                to.i = F32
                out = n.output[0]
                n.output[0] = fresh(f"{out}__f32")
                nodes.append(n)
                nodes += rounding(n.output[0], out)
                continue
        halves = [k for k, t in enumerate(n.output) if t and types.get(t) == F16]
        if n.op_type == "Cast" or not halves:
            nodes.append(n)
            continue
        after = []
        for k in halves:
            out = n.output[k]
            n.output[k] = fresh(f"{out}__f32")
            after += rounding(n.output[k], out)
        nodes.append(n)
        nodes += after
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    for o in g.output:
        if o.type.tensor_type.elem_type == F16:
            o.type.tensor_type.elem_type = F32
    return m


class Fp16Runner:
    """An ONNX Runtime CPU session of the emulated FP16+INT8 model, run like calib's TensorRT runners."""

    backend = "onnxruntime (FP16 emulated)"

    def __init__(self, model: onnx.ModelProto, label: str = "fp16", backend: str | None = None):
        import onnxruntime as ort

        from calib.runners.onnxruntime import lean_options

        opts = lean_options(ort.SessionOptions())  # the evaluation's arena, not one more kept per row
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        self.label = label
        self.backend = backend or self.backend
        self.session = ort.InferenceSession(emulated(model).SerializeToString(), opts,
                                            providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        first = self.session.get_inputs()[0].shape[0] if self.session.get_inputs()[0].shape else None
        self.fixed = first if isinstance(first, int) and first > 0 else None  # a model with a fixed batch

    def run(self, batch: dict, names=None) -> dict:
        """The outputs `names` (default: all) for `batch`, run `fixed` samples at a time where the model's batch is
        fixed (the evaluation hands its runners batches of a multiple of it)."""
        feed = {k: np.asarray(v, np.float32) if np.asarray(v).dtype == np.float16 else v
                for k, v in batch.items() if k in self.inputs}
        names = list(names) if names else [o.name for o in self.session.get_outputs()]
        n = len(next(iter(feed.values())))
        if not self.fixed or n == self.fixed:
            return dict(zip(names, self.session.run(names, feed)))
        parts = [self.session.run(names, {k: v[i:i + self.fixed] for k, v in feed.items()})
                 for i in range(0, n, self.fixed)]
        return {name: np.concatenate([p[j] for p in parts]) for j, name in enumerate(names)}
