"""The held-out evaluation a recovery is judged on: the evaluation samples read once (cut to the model's fixed
batch, if it has one), FP32's outputs computed once, and any variant of the model (other scales, weights or layers
in float, simulated as the deployed engine runs it) scored on every figure calib evaluate reports."""
from __future__ import annotations

import logging
import math

import numpy as np
import onnx

from calib.data.rebatch import FixedBatches
from calib.deploy.simulate import simulated_model
from calib.errors import DataError
from calib.evaluate.scoring import TaskScores
from calib.quantize.model import ModelInfo, initializers_not_inputs
from calib.quantize.opset import at_qdq_opset
from calib.quantize.qdq import Exclusions
from calib.quantize.shapes import dims_text, fixed_batch
from calib.recipe import DetectionSpec
from calib.runners.feed import fed
from calib.runners.onnxruntime import OrtRunner

log = logging.getLogger(__name__)


def _items(source):
    if hasattr(source, "iter_with_meta"):
        yield from source.iter_with_meta()
    else:
        for b in source:
            n = int(next(iter(b.values())).shape[0])
            yield b, [None] * n, [None] * n


def _chunks(batch: dict, step: int):
    n = int(next(iter(batch.values())).shape[0])
    for lo in range(0, n, step):
        yield {k: v[lo:lo + step] for k, v in batch.items()}


class Measure:
    """`model`: the FP32 ModelProto; `info`: its ModelInfo with the layout the data is fed in; `source`: the
    evaluation samples; `micro`: samples per run (the model's fixed batch wins); `precision`: the deployed
    engine's calib.deploy.precision.PrecisionModel (None: calib's Q/DQ placement); `fp16`: the calibration pass's
    ranges (tensor -> absolute maximum) where the deployed model is the FP16+INT8 one (TensorRT 10/11, strongly
    typed), whose float layers run in FP16 (in FP32 where `fp32_fallback`, or where FP16 cannot hold them)."""

    def __init__(self, model: onnx.ModelProto, info: ModelInfo, source, task: str = "outputs",
                 detection: DetectionSpec = DetectionSpec(), hook=None, user=None, micro: int = 8,
                 precision=None, label: str = "evaluation data", hint: str = "--limit", fp16: dict | None = None,
                 fp32_fallback: bool = False):
        self.model, self.info, self.task, self.detection = initializers_not_inputs(model), info, task, detection
        self.fp16, self.fp32_fallback = fp16, fp32_fallback
        self.hook, self.user, self.precision = hook, user, precision
        self.threads = 0  # ONNX Runtime's threads per run (0: its default; 1 on a pool's worker, one CPU each)
        self.fixed = fixed_batch(info)
        self.step = self.fixed or max(1, micro)
        self.outputs = list(info.outputs)
        items = FixedBatches(_items(source), self.fixed) if self.fixed else _items(source)
        self.batches = [(dict(b), s, m) for b, s, m in items]
        if self.fixed:
            shape = ", ".join(f"'{x}' {dims_text(d)}" for x, d, _ in info.inputs)
            items.check(label, shape, hint)
        if not self.batches:
            raise DataError(f"{label}: no evaluation samples")
        from calib.calibrate import check_batch

        check_batch(self.batches[0][0], info, label)
        self.samples = sum(int(next(iter(b.values())).shape[0]) for b, _, _ in self.batches)
        self.qmodel = at_qdq_opset(self.model)  # below opset 13: converted once, names kept
        self.ref = self.run(self.model, "FP32")
        self._runs = [0]  # shared with the subsets head() makes: every variant measured counts once

    @property
    def runs(self) -> int:
        return self._runs[0]

    def head(self, samples: int) -> Measure:
        """The same measure on its first batches holding at least `samples` samples (FP32's outputs shared): the
        cheaper one a ranking uses."""
        import copy

        sub = copy.copy(self)
        keep, n = 0, 0
        while keep < len(self.batches) and n < samples:
            n += int(next(iter(self.batches[keep][0].values())).shape[0])
            keep += 1
        sub.batches, sub.ref, sub.samples = self.batches[:keep], self.ref[:keep], n
        return sub

    def run(self, proto: onnx.ModelProto, what: str = "variant") -> list[dict]:
        """The graph outputs of `proto` on every evaluation batch (canonical layout, samples first)."""
        return self.outputs_of(OrtRunner(proto, threads=self.threads, spin=False, lean=True, label=what))

    def outputs_of(self, runner) -> list[dict]:
        """The graph outputs of any runner (ONNX Runtime, a TensorRT engine) on every evaluation batch."""
        r = fed(runner, self.info.layout)
        out = []
        for b, _, _ in self.batches:
            parts = [r.run(c, self.outputs) for c in _chunks(b, self.step)]
            out.append(parts[0] if len(parts) == 1 else
                       {o: np.concatenate([p[o] for p in parts]) for o in self.outputs})
        return out

    def variant(self, amax: dict, float_layers=(), model: onnx.ModelProto | None = None) -> onnx.ModelProto:
        """The simulated INT8 model: `amax` scales, `float_layers` kept in float, on `model`'s weights (default:
        the FP32 model's)."""
        base = self.qmodel if model is None else at_qdq_opset(initializers_not_inputs(model))
        if self.fp16 is not None:
            return fp16_variant(base, amax, self.precision, tuple(sorted(float_layers)), self.fp16,
                                self.fp32_fallback)
        return simulated_model(base, amax, self.precision, Exclusions(tuple(sorted(float_layers))))

    def tally(self, outs: list[dict], name: str = "int8", reference: bool = False) -> TaskScores:
        t = TaskScores([name], self.task, self.outputs, self.detection, self.hook, self.user, reference)
        for (b, s, m), ref, test in zip(self.batches, self.ref, outs):
            t.update(b, s, m, ref, {name: test})
        self.task = t.task  # a hook's first result decides it
        return t

    def count(self, n: int = 1) -> None:
        """Variants measured elsewhere (on a pool's workers, calib.scale) counted as measured here."""
        self._runs[0] += n

    def portable(self) -> Measure:
        """This measure as a pool's worker runs it: one ONNX Runtime thread (the worker's CPU)."""
        import copy

        out = copy.copy(self)
        out.threads = 1
        out._runs = [0]
        return out

    def points(self, outs: list[dict]) -> dict:
        self._runs[0] += 1
        return self.tally(outs).points("int8")

    def score(self, amax: dict, float_layers=(), model: onnx.ModelProto | None = None) -> dict:
        """Every figure (point values) of one variant."""
        return self.points(self.run(self.variant(amax, float_layers, model)))

    def figures(self, amax: dict, float_layers=(), model: onnx.ModelProto | None = None) -> tuple[dict, dict]:
        """(point values, figures with intervals) of one variant, and FP32's own figures against labels in the
        points under 'fp32:<name>'."""
        t = self.tally(self.run(self.variant(amax, float_layers, model)), reference=True)
        self._runs[0] += 1
        pts = t.points("int8")
        pts.update({f"fp32:{k}": v for k, v in t.fp32_points().items()})
        if t.fp32_boxes() is not None:
            pts["fp32_boxes"] = t.fp32_boxes()
        return pts, t.figures("int8")


def figures_of(measure: Measure, item) -> tuple[dict, dict]:
    """On a pool's worker: Measure.figures of one (amax, float layers, model)."""
    amax, float_layers, model = item
    return measure.figures(amax, float_layers, model)


def oriented(value, sign: float) -> float:
    """A figure as a score where higher is better (sign -1 for an error rate); unmeasurable: -inf."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return -math.inf
    return sign * float(value)


def fp16_variant(model: onnx.ModelProto, amax: dict, precision, float_layers: tuple, ranges: dict,
                 fp32_fallback: bool = False) -> onnx.ModelProto:
    """The FP16+INT8 model (calib.quantize.fp16_model) with `float_layers` out of INT8, emulated in FP32 with FP16's
    roundings for ONNX Runtime's CPU (calib.deploy.emulate): as TensorRT 10/11 run the model `calib cache convert
    --float-type fp16` writes."""
    from calib.deploy.emulate import emulated
    from calib.quantize.fp16_model import make_fp16_model
    from calib.quantize.qdq import quantizable_layers

    names = float_layers
    if precision is not None and precision.mode == "explicit":  # what the explicit engine leaves in float anyway
        names += tuple(precision.float_nodes(quantizable_layers(model)))
    f = make_fp16_model(model, amax, ranges, "the calibration pass", exclude=Exclusions(names),
                        fp32=float_layers if fp32_fallback else ())
    return emulated(f.model)
