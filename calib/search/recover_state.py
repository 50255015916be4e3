"""What `calib recover` works with: its settings, what the held-out samples are scored on, the configuration so
far (weights, scales, layers in float), the clock of its time budget."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import onnx

from calib.data.rebatch import FixedBatches
from calib.recipe import DetectionSpec
from calib.search import target as tg

STEPS = ("equalize", "smoothquant", "adaround", "bias", "per_tensor")


@dataclass(frozen=True)
class RecoverSpec:
    target: tg.Target
    algorithms: tuple = ("minmax", "entropy", "percentile", "mse")
    percentile: float = 99.99
    steps: tuple = STEPS  # the in-INT8 steps to try, in this order
    per_tensor_layers: int = 8  # the most sensitive layers whose inputs try the other algorithms' scales
    rank_samples: int | None = 16  # held-out samples the layer ranking is measured on (None: all of them)
    rank_by: str = "noise"  # noise | metric | sqnr: what orders the layers (sqnr: the outputs' SQNR gain first;
    # noise: the noise each layer adds alone in INT8)
    precision: str = "fp16"  # what the fallback keeps layers in
    deploy: str = "implicit"  # the build simulated: implicit (the cache), qdq, or fp16 (the FP16+INT8 model)
    engine_layers: str | None = None
    backend: str = "onnxruntime"  # tensorrt: the chosen configuration built and measured as engines afterwards
    engine_curve: bool = True  # with tensorrt: every point of the fallback curve built and timed too
    time_budget: float | None = None  # seconds
    trt_version: str = "8600"
    carrier: str = "EntropyCalibration2"


@dataclass
class Evaluation:
    """What the held-out samples are scored on (as calib evaluate scores them)."""

    task: str = "outputs"
    detection: DetectionSpec = DetectionSpec()
    hook: object = None
    user: object = None


@dataclass
class State:
    """The configuration so far: the FP32 model's weights, the scales, the float layers."""

    model: onnx.ModelProto
    algorithm: str
    amax: dict
    overrides: dict = field(default_factory=dict)  # tensor -> (algorithm, amax)
    weights: list = field(default_factory=list)  # the steps that changed the weights
    float_layers: tuple = ()
    value: float = float("-inf")  # oriented
    sqnr: float = float("-inf")
    unbiased: onnx.ModelProto | None = None  # the model before the INT8-only steps (rounding, bias), where kept

    def scales(self) -> dict:
        return {**self.amax, **{t: v for t, (_, v) in self.overrides.items()}}

    def weights_for(self, float_layers) -> onnx.ModelProto:
        """The weights with `float_layers` in float: their bias corrections (made for INT8) undone."""
        if self.unbiased is None or not float_layers:
            return self.model
        from calib.search.bias import revert

        return revert(self.model, self.unbiased, float_layers)

    def deployed(self) -> onnx.ModelProto:
        return self.weights_for(self.float_layers)


class Clock:
    def __init__(self, budget: float | None):
        self.t0, self.budget = time.monotonic(), budget
        self.deadline = self.t0 + budget if budget else None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def share(self, fraction: float) -> float | None:
        """The time.monotonic() at which `fraction` of the time left now is spent (None: no budget)."""
        if self.deadline is None:
            return None
        now = time.monotonic()
        return now + fraction * max(self.deadline - now, 0.0)

    def keep(self, seconds: float) -> None:
        """Stop searching `seconds` before the budget ends: what follows the search (the chosen configuration
        measured on every held-out sample, the files written) fits within it too."""
        if self.deadline is not None:
            self.deadline = self.t0 + max(self.budget - seconds, 0.0)


def calibration_feeds(source, fixed: int | None, step: int) -> list[dict]:
    """The calibration feeds (cut to the model's fixed batch, then to runs of `step` samples) for the steps that
    run the model on them (equalization's channel ranges, bias correction's shifts)."""
    items = ((b, None, None) for b in source)
    out = []
    for b, _, _ in (FixedBatches(items, fixed) if fixed else items):
        n = int(next(iter(b.values())).shape[0])
        out += [{k: v[lo:lo + step] for k, v in b.items()} for lo in range(0, n, step)]
    return out
