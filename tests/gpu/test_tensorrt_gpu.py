"""The TensorRT backend on a real GPU with real TensorRT (run on the device: `pytest -m gpu tests/gpu`).

Held against what TensorRT 8.6 produced on an H200 (tests/golden/trt86-h200). Where cuBLAS/cuDNN are absent set
CALIB_TRT_TACTIC_SOURCES=EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS. With CALIB_GPU_OUT set, the engines' layer
information and the caches are copied there for the record.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from calib.calibrate import calibrate
from calib.data.arrays import ArraySource
from calib.errors import CacheError, DataError
from calib.quantize.cache import read_cache
from calib.runners.onnxruntime import OrtRunner
from conftest import GOLDEN, ROOT

pytestmark = pytest.mark.gpu
trt = pytest.importorskip("tensorrt")

from calib.runners.tensorrt import compat  # noqa: E402
from calib.runners.tensorrt.builder import BuildSpec, build  # noqa: E402
from calib.runners.tensorrt.calibrators import cache_calibrator, make_calibrator  # noqa: E402
from calib.runners.tensorrt.device import Cuda  # noqa: E402
from calib.runners.tensorrt.runner import TrtRunner  # noqa: E402

CNN = GOLDEN / "cnn" / "cnn.onnx"
SHAPE = {"input": ((3, 64, 64), np.float32)}
LEVEL = int(os.environ.get("CALIB_TEST_OPT_LEVEL", "1"))


@pytest.fixture(scope="module")
def data():
    return np.load(GOLDEN / "cnn" / "cnn_calib.npy")


def _spec(**kw):
    return BuildSpec(batch_size=8, optimization_level=LEVEL, **kw)


def _keep(name, payload):
    out = os.environ.get("CALIB_GPU_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        p = os.path.join(out, name)
        if isinstance(payload, (str, os.PathLike)) and os.path.exists(payload):
            shutil.copy(payload, p)
        else:
            with open(p, "w") as f:
                json.dump(payload, f, indent=1)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _run_all(runner, x, batch=8):
    return np.concatenate([runner.run({"input": x[i:i + batch]})["logits"] for i in range(0, len(x), batch)])


@pytest.fixture(scope="module")
def trt_caches(tmp_path_factory, cuda, data):
    """TensorRT's own EntropyCalibration2 and MinMax through calib's calibrators, as the golden was made."""
    d = tmp_path_factory.mktemp("trtcal")
    out = {}
    for kind in ("entropy2", "minmax"):
        c = make_calibrator(kind, ArraySource(data, "input", 8), SHAPE, 8, cuda, d / f"{kind}.cache", "m", trt)
        built = build(CNN, _spec(precisions=("int8",)), c, trt, cuda)
        assert c.calls == 8
        out[kind] = (d / f"{kind}.cache", built)
        _keep(f"cnn-{kind}.cache", d / f"{kind}.cache")
    return out


def test_calibrators_reproduce_tensorrt_golden_caches(trt_caches):
    if "stand-in" in Cuda().name():
        pytest.skip("the stand-in computes MinMax for every calibrator")
    for kind, gold in (("entropy2", "int8-entropy2.cache"), ("minmax", "int8-minmax.cache")):
        ours, ref = read_cache(trt_caches[kind][0]), read_cache(GOLDEN / "cnn" / gold)
        assert ours.carrier == ref.carrier
        common = [n for n in ref.scales if n in ours.scales]
        assert len(common) >= 8
        worst = max(abs(ours.scales[n] / ref.scales[n] - 1) for n in common)
        assert worst < 1e-4, (kind, worst)


def test_calib_cache_is_used_without_batches(cuda, data, trt_caches):
    res = calibrate(CNN, data, ["minmax", "percentile"], batch_size=8)
    fed = cache_calibrator(res.amax["minmax"], trt)
    built = build(CNN, _spec(precisions=("int8",)), fed, trt, cuda)
    assert fed.calls == 0
    ours = _run_all(TrtRunner(built.plan, trt, cuda), data)
    theirs = _run_all(TrtRunner(trt_caches["minmax"][1].plan, trt, cuda), data)
    ref = OrtRunner(CNN).run({"input": data})["logits"]
    assert _rel(ours, theirs) < 2e-2  # calib's minmax scales agree with TensorRT's to 2.5e-7
    assert _rel(ours, ref) < 5e-2
    fed = cache_calibrator(res.amax["percentile"], trt)  # any algorithm travels under the Entropy2 header
    build(CNN, _spec(precisions=("int8",)), fed, trt, cuda)
    assert fed.calls == 0


def test_wrong_header_is_refused_by_real_tensorrt(cuda):
    fed = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-minmax.cache"), trt, "EntropyCalibration2")
    fed.text = read_cache(GOLDEN / "cnn" / "int8-minmax.cache").text()  # MinMax header, Entropy2 class
    with pytest.raises(Exception) as err:
        build(CNN, _spec(precisions=("int8",)), fed, trt, cuda)
    assert isinstance(err.value, CacheError) or "fail" in str(err.value).lower()


def test_get_batch_errors_surface(cuda, data):
    class Broken:
        def __iter__(self):
            yield {"input": data[:8]}
            raise DataError("img_3.jpg: truncated")

    c = make_calibrator("entropy2", Broken(), SHAPE, 8, cuda, None, "", trt)
    with pytest.raises(DataError, match="img_3.jpg"):
        build(CNN, _spec(precisions=("int8",)), c, trt, cuda)


def test_fp32_fp16_engines_match_onnxruntime_on_both_io_apis(cuda, data):
    ref = OrtRunner(CNN).run({"input": data[:13]})["logits"]
    for precisions, tol in ((("fp32",), 5e-3), (("fp32", "fp16"), 3e-2)):
        built = build(CNN, _spec(precisions=precisions), None, trt, cuda)
        for v3 in (True, False):
            r = TrtRunner(built.plan, trt, cuda, prefer_v3=v3)
            got = np.concatenate([r.run({"input": data[:8]})["logits"], r.run({"input": data[8:13]})["logits"]])
            assert _rel(got, ref) < tol, (precisions, v3)
            r.close()
        lat = TrtRunner(built.plan, trt, cuda).latency({"input": data[:8]}, warmup=10, iters=20, repeats=5)
        assert 0 < lat["median_ms"] < 50


def test_an_engine_with_a_batch_range_lists_its_int8_layers(cuda):
    """TensorRT 8.6 lists an engine with a shape range without tensor formats ('N/A due to dynamic shapes'), through
    an execution context too (the CNN on an H100): read as FP32, calib run's YOLOv8n engines (batch 1-8) had listed
    every layer FP32. An INT8 engine of batch 1-8 must list INT8 layers, read from its kernels, and every
    convolution must have a precision."""
    fed = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-entropy2.cache"), trt)
    ranged = build(CNN, BuildSpec(optimization_level=LEVEL, precisions=("int8",), profiles=(
        {"input": ((1, 3, 64, 64), (8, 3, 64, 64), (8, 3, 64, 64))},)), fed, trt, cuda)
    _keep("cnn-int8-range-layers.json", ranged.info)
    assert ranged.info["layer_summary"].get("int8", 0) > 0, ranged.info["layer_summary"]
    convs = [la for la in ranged.layers if la["type"] == "CaskConvolution"]
    assert convs and all(la["precision"] != "?" for la in convs), convs


def test_layer_precisions_show_in_the_engine(cuda, data):
    fed = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-entropy2.cache"), trt)
    built = build(CNN, _spec(precisions=("int8",), layer_precisions=("op:Gemm=fp32", "conv1=fp16"),
                             constraints="obey"), fed, trt, cuda)
    _keep("cnn-int8-layers.json", built.info)
    kept = built.info["layers_set"]  # network layer name -> the precision asked for
    assert sorted(kept.values()) == ["fp16", "fp32"], kept
    conv1 = [n for n in kept if "conv1" in n]
    assert conv1, kept
    for name in kept:  # a layer TensorRT fused into another (the Gemm's bias add) has no engine layer of its own
        holders = [layer for layer in built.layers if name in layer["fused"]]
        assert all(layer["precision"] != "int8" for layer in holders), (name, holders)
        if name in conv1:
            assert holders, built.layers


def test_qdq_model_builds_explicitly(tmp_path, cuda, data):
    import onnx

    from calib.quantize.qdq import insert_qdq

    res = calibrate(CNN, data, ["minmax"], batch_size=8)
    q = tmp_path / "cnn.qdq.onnx"
    onnx.save(insert_qdq(onnx.load(str(CNN)), res.amax["minmax"]), str(q))
    built = build(q, _spec(precisions=("int8",)), None, trt, cuda)
    got = _run_all(TrtRunner(built.plan, trt, cuda), data)
    assert _rel(got, OrtRunner(CNN).run({"input": data})["logits"]) < 5e-2
    assert built.info["layer_summary"].get("int8", 0) >= 1


def test_cli_build_and_bench(tmp_path, cuda):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    eng = tmp_path / "cnn.engine"
    r = subprocess.run([sys.executable, "-m", "calib", "-q", "build", str(CNN), "--cache",
                        str(GOLDEN / "cnn" / "int8-entropy2.cache"), "--precision", "int8,fp16", "--batch-size", "8",
                        "--opt-level", str(LEVEL), "-o", str(eng)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "calib", "-q", "bench", str(eng), "--json"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["median_ms"] > 0
    assert compat.version(trt) >= (8, 6, 0)


def test_marked_engine_gives_per_layer_values(cuda, data):
    """backend.layerwise: an INT8 engine with every tensor marked as an output returns TensorRT's own values of
    the ONNX tensors, which the evaluator compares with FP32 layer by layer (a perturbed engine)."""
    from calib.evaluate.api import evaluate
    from calib.quantize.model import inspect_model

    amax = calibrate(CNN, data[:32], ["minmax"], batch_size=8).amax["minmax"]
    built = build(CNN, _spec(precisions=("int8", "fp16"), mark_outputs=("*",)), cache_calibrator(amax, trt), trt,
                  cuda)
    r = TrtRunner(built.plan, trt, cuda, label="marked")
    r.perturbed = True
    info = inspect_model(CNN)
    onnx_names = set(info.activations) & set(r.outputs)
    assert len(onnx_names) >= 5
    res = evaluate(CNN, {"minmax": amax}, ArraySource(data[32:48], "input", 8), engines={"marked": r})
    r.close()
    e = res["configs"]["marked"]
    assert e["perturbed"] and len(e["layers"]) >= 5
    assert all(l["sqnr_db"] > 5 for l in e["layers"] if l["op_type"] != "Input")
    _keep("marked-layers.json", e["layers"])


def test_profiling_a_runner_leaves_its_later_timings_alone(data, cuda):
    """TensorRT 8.6 refuses `context.profiler = None`; calib turns the context's profiling off instead
    (enqueue_emits_profile): the profiler gets no report from later runs and the latency does not carry it."""
    from calib.runners.tensorrt.profile import profile_layers

    built = build(CNN, _spec(precisions=("fp32", "fp16")), None, trt, cuda)
    r = TrtRunner(built.plan, trt, cuda)
    try:
        batch = {"input": data[:8]}
        before = r.latency(batch, warmup=50, iters=50, repeats=10)["median_ms"]
        prof = profile_layers(r, batch, runs=10, warmup=2)
        assert prof["layers"] and prof["total_ms"] > 0
        attached = r.context.profiler
        seen = {k: len(v) for k, v in attached.times.items()} if attached is not None else {}
        after = r.latency(batch, warmup=50, iters=50, repeats=10)["median_ms"]
        if attached is not None:
            assert {k: len(v) for k, v in attached.times.items()} == seen
        _keep("profile_then_time.json", {"before_ms": before, "after_ms": after, "profile_total_ms": prof["total_ms"]})
        assert after < 1.5 * before, (before, after)
    finally:
        r.close()
