"""The statistics pass over a calibration set shared out among workers (calib.scale): each worker runs the FP32
model over the batches dealt to it and counts them into a collector of its own; the collectors merge exactly
(calib.stats.histogram), so the statistics, and every cache computed from them, are those of the single-process
pass. The first batch stays with the caller, which has counted it already: TensorRT's grids start from its ranges,
and every worker is told them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calib.stats.histogram import HistogramCollector


@dataclass(frozen=True)
class Shard:
    """What a worker needs: the model (serialized), the tensors to read and how."""

    model: bytes
    layout: object  # calib.quantize.layout.Layout of the inputs and outputs
    expose: tuple
    wanted: tuple
    micro_batch: int
    nbins: int
    signed: frozenset
    trt_first: dict
    trt_derived: dict
    blocked: bool = True
    label: str = "model"
    sha256: str | None = None


class _Worker:
    def __init__(self, shard: Shard):
        import onnx

        from calib.runners.feed import fed
        from calib.runners.onnxruntime import OrtRunner

        self.shard = shard
        proto = onnx.load_model_from_string(shard.model)
        self.runner = fed(OrtRunner(proto, expose=list(shard.expose), threads=1, spin=False, lean=True,
                                    order_free=shard.blocked, label=shard.label, model_sha256=shard.sha256),
                          shard.layout)
        self.stats = HistogramCollector(shard.nbins, signed=shard.signed, first=False,
                                        trt_first=dict(shard.trt_first),
                                        trt_derived={k: list(v) for k, v in shard.trt_derived.items()})


def start(shard: Shard) -> _Worker:
    return _Worker(shard)


def step(worker: _Worker, batch: dict) -> None:
    """One batch, in runs of the pass's micro-batch, counted as calib.calibrate.collect counts it."""
    s = worker.shard
    n = int(next(iter(batch.values())).shape[0])
    for lo in range(0, n, s.micro_batch):
        outs = worker.runner.run({k: v[lo:lo + s.micro_batch] for k, v in batch.items()}, list(s.wanted))
        for name in s.wanted:
            v = outs[name]
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                worker.stats.update(name, v)
        del outs


def end(worker: _Worker) -> HistogramCollector:
    return worker.stats


def merged(stats: HistogramCollector, parts) -> HistogramCollector:
    """The caller's collector (the first batch) with the workers' merged in, in the order given."""
    for p in parts:
        stats = stats.merge(p)
    stats.first = False
    return stats
