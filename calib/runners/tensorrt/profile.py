"""Per-layer time of an engine through TensorRT's IProfiler, beside the precision and tactic the engine inspector
gives for each layer (fused network layers are named inside the engine layer's name).

    calib bench model.engine --layers

The profiler makes every run synchronous and adds its own overhead, so the per-layer sum is a little above the
engine's latency from `calib bench`; the shares are what to read.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping

import numpy as np

from calib.runners.tensorrt import compat
from calib.runners.tensorrt.inspect import inspector_layers


def _profiler(trt):
    class LayerTimes(trt.IProfiler):
        def __init__(self):
            trt.IProfiler.__init__(self)
            self.times: dict[str, list[float]] = {}

        def report_layer_time(self, layer_name, ms):
            self.times.setdefault(str(layer_name), []).append(float(ms))

    return LayerTimes()


def profile_layers(runner, batch: Mapping[str, np.ndarray], runs: int = 20, warmup: int = 10) -> dict:
    """{"layers": [{name, ms (median over runs), share, precision, tactic, type, fused}], "total_ms", "runs"}
    for a TrtRunner, in engine order; layers the inspector does not list (or lists without a time) keep '?'."""
    runner._feed(batch)
    for _ in range(warmup):
        runner.execute(runner.stream)
    runner.cuda.sync(runner.stream)
    prof = _profiler(runner.trt)
    runner.context.profiler = prof
    try:
        for _ in range(runs):
            runner.execute(runner.stream)
            runner.cuda.sync(runner.stream)
    finally:
        compat.detach_profiler(runner.context)
    info = {layer["name"]: layer for layer in inspector_layers(runner.engine, runner.trt, runner.context)}
    rows = []
    for name, ms in prof.times.items():
        layer = info.get(name, {})
        rows.append({"name": name, "ms": round(statistics.median(ms), 5), "precision": layer.get("precision", "?"),
                     "tactic": layer.get("tactic", ""), "type": layer.get("type", "?"),
                     "fused": layer.get("fused", [])})
    total = sum(r["ms"] for r in rows)
    for r in rows:
        r["share"] = round(r["ms"] / total, 4) if total > 0 else 0.0
    by_precision: dict[str, float] = {}
    for r in rows:
        by_precision[r["precision"]] = round(by_precision.get(r["precision"], 0.0) + r["ms"], 5)
    return {"layers": rows, "total_ms": round(total, 5), "runs": runs, "ms_by_precision": by_precision}


def format_table(profile: dict, top: int | None = None) -> str:
    """Markdown table of the slowest layers first."""
    rows = sorted(profile["layers"], key=lambda r: -r["ms"])[:top]
    lines = ["| engine layer | precision | ms | share | tactic |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['precision']} | {r['ms']:.4f} | {100 * r['share']:.1f} % | {r['tactic']} |")
    lines.append(f"\nsum {profile['total_ms']:.4f} ms over {len(profile['layers'])} layers (median of "
                 f"{profile['runs']} profiled runs); by precision: " +
                 ", ".join(f"{k} {v:.4f} ms" for k, v in sorted(profile["ms_by_precision"].items())))
    return "\n".join(lines)
