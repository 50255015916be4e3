"""One FP32 pass over calibration batches for the in-INT8 recovery steps (bias correction, learned rounding,
activation smoothing): the values of the tensors a step reads, batch by batch, from one lean ONNX Runtime session
that exposes them, fed as the model takes its samples."""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from calib.runners.feed import fed
from calib.runners.onnxruntime import OrtRunner


def fp32_tensors(model, tensors: list[str], batches: Iterable, layout=None) -> Iterator[dict]:
    """Per batch of `batches`, tensor -> its FP32 value for every name in `tensors`."""
    run = fed(OrtRunner(model, expose=tensors, spin=False, lean=True, label="FP32"), layout)
    for b in batches:
        yield run.run(b, tensors)
