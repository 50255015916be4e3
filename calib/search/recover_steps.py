"""The recovery steps that keep every layer in INT8, tried in this order before the fallback, each measured on the
held-out samples and kept only where it raises the target figure (Recovery._try): cross-layer equalization,
activation smoothing (SmoothQuant-style), learned weight rounding (AdaRound-style), bias correction."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import onnx

from calib.calibrate import collect, compute_all, needs_tensorrt_grid
from calib.quantize.qdq import quantizable_layers
from calib.search.recover_state import State, calibration_feeds


QUARTER = 0.25  # of the time left: the most learned rounding may take, the rest to the steps after it


def in_int8(r, state: State) -> State:
    """The steps of r.spec.steps in order, until the target is met or the time is spent."""
    steps = r.spec.steps
    layout_ok = r.info.layout.identity
    feeds = None
    if "equalize" in steps and layout_ok and not r.met(state) and not r.clock.out():
        feeds = feeds or calibration_feeds(r.calib_source, r.fixed, r.measure.step)
        state = equalize(r, state, feeds)
    if "smoothquant" in steps and not r.met(state) and not r.clock.out():
        feeds = feeds or calibration_feeds(r.calib_source, r.fixed, r.measure.step)
        state = smooth_step(r, state, feeds)
    if "adaround" in steps and not r.met(state) and not r.clock.out():
        from calib.search.adaround import adaround

        feeds = feeds or calibration_feeds(r.calib_source, r.fixed, r.measure.step)
        rounded, done = adaround(state.model, feeds, quantizable_layers(state.model), r.info.layout,
                                 deadline=r.clock.share(QUARTER))
        if done:
            cand = dataclasses.replace(state, model=rounded, weights=state.weights + ["adaround"],
                                       unbiased=state.unbiased or state.model)
            ratios = sorted(done.values())
            state = r.judge("learned weight rounding (AdaRound)", state, cand,
                            f"{len(done)} layers; output error on the calibration inputs "
                            f"{ratios[len(ratios) // 2]:.2f} of nearest rounding's (median)", layers=len(done))
    if "bias" in steps and not r.met(state) and not r.clock.out():
        from calib.search.bias import correct

        feeds = feeds or calibration_feeds(r.calib_source, r.fixed, r.measure.step)
        fixed, done = correct(state.model, state.scales(), feeds, quantizable_layers(state.model),
                              r.info.layout, reference=state.unbiased)
        if done:
            cand = State(fixed, state.algorithm, state.amax, dict(state.overrides), state.weights + ["bias"],
                         unbiased=state.unbiased or state.model)
            state = r.judge("bias correction", state, cand,
                            f"{len(done)} layers' output means corrected for their own INT8 shift "
                            f"(largest {max(done.values()):.3g})", layers=len(done))
    return state


def equalize(r, state: State, feeds) -> State:
    from calib.equalize import equalize as rewrite, find_pairs

    pairs = find_pairs(state.model)
    eq, done = rewrite(state.model, feeds, pairs) if pairs else (state.model, [])
    if not done:
        r.skip("cross-layer equalization", state, "no Conv pair to equalize (two Conv layers with only Relu, Clip or "
               "a pass-through op between)")
        return state
    amaxes = recalibrated(r, eq)
    cand = State(eq, state.algorithm, amaxes[state.algorithm], {}, state.weights + ["equalize"])
    new = r.judge("cross-layer equalization", state, cand, f"{len(done)} of {len(pairs)} Conv pairs")
    if new is cand:
        r.amaxes = amaxes  # the other algorithms' scales, for the per-tensor choice, are the new model's
    return new


def recalibrated(r, model: onnx.ModelProto) -> dict:
    """Every algorithm's scales for a rewritten FP32 model (another calibration pass)."""
    with tempfile.TemporaryDirectory(prefix="calib-recover-") as tmp:
        path = Path(tmp) / "rewritten.onnx"
        path.write_bytes(model.SerializeToString())
        info, stats, _, _ = collect(path, r.calib_source, label="calibration data", info=None,
                                    tensorrt_grid=needs_tensorrt_grid(list(r.amaxes)), budget=r.memory,
                                    option_names=r.option_names, pool=r.pool)
        amaxes, _, _ = compute_all(stats, info.activations, list(r.amaxes), r.params, model=path)
    return amaxes


def smooth_step(r, state: State, feeds) -> State:
    from calib.search.smooth import alphas, gain_db, smooth

    smoothed, done = smooth(state.model, feeds, quantizable_layers(state.model), r.info.layout)
    if not done:
        r.skip("activation smoothing (SmoothQuant)", state, "no MatMul/Gemm layer whose INT8 output error smoothing "
               "lowers")
        return state
    amaxes = recalibrated(r, smoothed)
    cand = State(smoothed, state.algorithm, amaxes[state.algorithm], {}, state.weights + ["smoothquant"])
    new = r.judge("activation smoothing (SmoothQuant)", state, cand,
                  f"{len(done)} MatMul/Gemm layers, alpha {alphas(done)} chosen per layer on its INT8 output "
                  f"error (median gain {gain_db(done):.1f} dB)", layers=len(done))
    if new is cand:
        r.amaxes = amaxes
    return new
