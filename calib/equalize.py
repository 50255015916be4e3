"""Cross-layer range equalization: an exact rewrite of the FP32 model that makes per-tensor INT8 activations fit.

TensorRT quantizes an activation with one scale for all its channels. When a Conv's output channels have very
different ranges (MobileNetV2's stem: channels peaking at 0.03 next to channels at 4.5, read by a depthwise Conv
whose weights for the small channels are 100x larger), the small channels get one or two INT8 levels and the
error they carry is amplified downstream. Scaling output channel i of the first Conv by g_i and the matching
input channel of the second by 1/g_i changes nothing in float (Relu is positively homogeneous; for Clip(0, c)
the rewrite is exact as long as g_i * y_i stays below c, which the calibration data checks with headroom), and
lets the small channels use the whole INT8 range. Weights keep per-channel scales, so the first Conv's weights
lose nothing; a depthwise second Conv absorbs 1/g_i in its own per-channel scale, a dense one (weights shared
across input channels) gets a geometric compromise.

Pairs: Conv -> [Relu | LeakyRelu | Clip(0, c) | MaxPool ...] -> Conv, each tensor on the way read by nothing else
and not a graph output (at most one Clip on the way).
The per-channel maxima come from one FP32 run over the calibration data (`channel_maxima`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from calib.errors import ModelError
from calib.quantize.model import constant_value, initializers_not_inputs, node_attr, relu_bounds

log = logging.getLogger(__name__)

PASS_THROUGH = ("Relu", "LeakyRelu", "Clip", "MaxPool")  # f(g * x) = g * f(x) for g > 0 (Clip: see gains)
HEADROOM = 2.0  # g_i * (observed max) must stay below clip / HEADROOM: unseen data may run higher
MAX_GAIN = 256.0  # no channel is scaled by more than this (a dead or near-dead channel gains nothing)


@dataclass(frozen=True)
class Pair:
    first: str  # the Conv whose output channels are scaled
    act: str | None  # the nodes between them (Relu, LeakyRelu, Clip, MaxPool), comma-separated, or None
    second: str  # the Conv whose input channels take the inverse
    tensor: str  # the first Conv's output (pre-activation): per-channel maxima are taken here
    clip: float | None  # the Clip's upper bound, if any
    depthwise: bool


def find_pairs(model: onnx.ModelProto) -> list[Pair]:
    g = model.graph
    inits = {t.name for t in g.initializer}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}

    def only_reader(tensor):
        c = consumers.get(tensor, [])
        return c[0] if len(c) == 1 and tensor not in outputs else None

    pairs = []
    for a in g.node:
        if a.op_type != "Conv" or len(a.input) < 2 or a.input[1] not in inits:
            continue
        nxt, last, between, clip, ok = only_reader(a.output[0]), a, [], None, True
        while nxt is not None and nxt.op_type in PASS_THROUGH:  # each commutes with a positive channel scale
            if nxt.op_type == "Clip":
                bounds = relu_bounds(model, nxt)
                if bounds is None or clip is not None:
                    ok = False
                    break
                clip = bounds[1] if np.isfinite(bounds[1]) else None
            between.append(nxt.name or nxt.output[0])
            last, nxt = nxt, only_reader(nxt.output[0])
        if not ok or nxt is None or nxt.op_type != "Conv" or len(nxt.input) < 2 or nxt.input[1] not in inits:
            continue
        if nxt.input[0] != last.output[0]:
            continue
        w2 = _weights(model, nxt)
        groups = node_attr(nxt, "group", 1) or 1
        pairs.append(Pair(a.name or a.output[0], ",".join(between) or None, nxt.name or nxt.output[0],
                          a.output[0], clip, depthwise=groups > 1 and w2.shape[1] == 1 and groups == w2.shape[0]))
    return pairs


def _weights(model, node) -> np.ndarray:
    w = constant_value(model, node.input[1])
    if w is None:
        raise ModelError(f"equalize: weights of {node.name or node.output[0]} are not an initializer")
    return w


def channel_maxima(model: onnx.ModelProto, pairs: list[Pair], batches) -> dict[str, np.ndarray]:
    """Per-channel max of |x| of each pair's tensor over `batches` (dicts of inputs), one FP32 run."""
    from calib.runners.onnxruntime import OrtRunner

    names = [p.tensor for p in pairs]
    run = OrtRunner(model, expose=names)
    out: dict[str, np.ndarray] = {}
    for feed in batches:
        got = run.run(feed, outputs=names)
        for n in names:
            m = np.abs(got[n]).max(axis=tuple(i for i in range(got[n].ndim) if i != 1))
            out[n] = np.maximum(out[n], m) if n in out else m
    return out


def gains(pair: Pair, maxima: np.ndarray) -> np.ndarray:
    """g_i for one pair from the per-channel maxima of the first Conv's output (see the module text)."""
    a = maxima.astype(np.float64)
    live = a > 0
    if not live.any():
        return np.ones_like(a)
    target = a.max()
    if pair.clip is not None:
        target = min(target, pair.clip / HEADROOM)
    g = np.where(live, target / np.where(live, a, 1.0), 1.0)
    g = np.clip(g, 1.0, MAX_GAIN)  # only lift small channels: large ones already set the scale
    if not pair.depthwise:
        g = np.sqrt(g)  # dense second Conv: its weight columns shrink by 1/g_i, share the error
    if pair.clip is not None:  # exactness: g_i * y_i must stay under the clip for what was seen, with headroom
        g = np.minimum(g, np.where(live, pair.clip / (HEADROOM * np.where(live, a, 1.0)), 1.0))
        g = np.maximum(g, 1.0)
    return g


def _set(model, name, array):
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(array.astype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)), name))
            return
    raise ModelError(f"equalize: initializer {name} not found")


def apply(model: onnx.ModelProto, pairs: list[Pair], maxima: dict) -> tuple[onnx.ModelProto, list[dict]]:
    """A copy of `model` with every pair equalized; returns it and one record per pair (gains applied)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = {(n.name or n.output[0]): n for n in out.graph.node}
    shared = _shared_initializers(out)
    done = []
    for p in pairs:
        a, b = nodes[p.first], nodes[p.second]
        if any(shared.get(i, 0) > 1 for i in list(a.input[1:]) + list(b.input[1:2])):
            continue  # weights shared with another node: scaling them would change that node too
        g = gains(p, maxima[p.tensor])
        if np.allclose(g, 1.0):
            continue
        w1 = _weights(out, a).astype(np.float64)
        _set(out, a.input[1], w1 * g.reshape(-1, *([1] * (w1.ndim - 1))))
        if len(a.input) > 2 and a.input[2]:
            _set(out, a.input[2], constant_value(out, a.input[2]).astype(np.float64) * g)
        w2 = _weights(out, b).astype(np.float64)
        groups = node_attr(b, "group", 1) or 1
        cin_g, cout_g = w2.shape[1], w2.shape[0] // groups
        # input channel of W2[o, j] is (o // cout_g) * cin_g + j
        idx = (np.arange(w2.shape[0])[:, None] // cout_g) * cin_g + np.arange(cin_g)[None, :]
        inv = (1.0 / g)[idx].reshape(w2.shape[0], cin_g, *([1] * (w2.ndim - 2)))
        _set(out, b.input[1], w2 * inv)
        done.append({"first": p.first, "second": p.second, "tensor": p.tensor, "depthwise": p.depthwise,
                     "max_gain": float(g.max()), "channels_scaled": int((g > 1.0).sum())})
    return out, done


def _shared_initializers(model) -> dict[str, int]:
    inits = {t.name for t in model.graph.initializer}
    count: dict[str, int] = {}
    for n in model.graph.node:
        for i in n.input:
            if i in inits:
                count[i] = count.get(i, 0) + 1
    return count


def equalize(model: onnx.ModelProto, batches, pairs: list[Pair] | None = None) -> tuple[onnx.ModelProto, list[dict]]:
    """Find the pairs (unless given), measure their channels on `batches`, return the equalized model and what
    was done."""
    pairs = find_pairs(model) if pairs is None else pairs
    if not pairs:
        return model, []
    maxima = channel_maxima(model, pairs, batches)
    eq, done = apply(model, pairs, maxima)
    log.debug("equalized %d of %d Conv pairs (largest gain %.1f)", len(done), len(pairs),
             max((d["max_gain"] for d in done), default=1.0))
    return eq, done


def equalize_file(model_path, source, out_path, max_batches: int | None = None) -> dict:
    """Equalize the ONNX at `model_path` on the batches of `source` (a calib Source), check that the FP32
    outputs did not move, write the new model atomically to `out_path`. Returns what was done."""
    import itertools
    from pathlib import Path

    from calib.io.files import atomic_write_bytes
    from calib.runners.onnxruntime import OrtRunner

    model = initializers_not_inputs(onnx.load(str(model_path)))  # an IR 3 model's weights are no inputs
    batches = list(itertools.islice(iter(source), max_batches))
    if not batches:
        raise ModelError(f"equalize: no calibration batches for {model_path}")
    pairs = find_pairs(model)
    eq, done = equalize(model, batches, pairs)
    before, after = OrtRunner(model).run(batches[0]), OrtRunner(eq).run(batches[0])
    worst = 0.0
    for name, ref in before.items():
        ref = ref.astype(np.float64)
        err = float(np.abs(ref - after[name]).max() / max(np.abs(ref).max(), 1e-12))
        worst = max(worst, err)
        if err > 1e-3:
            raise ModelError(f"equalize: output {name} moved by {err:.2g} of its range in FP32 "
                             f"(a Clip bound was crossed); run without equalize")
    atomic_write_bytes(Path(out_path), eq.SerializeToString())
    return {"file": Path(out_path).name, "pairs": len(pairs), "equalized": len(done),
            "max_gain": max((d["max_gain"] for d in done), default=1.0),
            "fp32_max_rel_change": worst, "layers": done}
