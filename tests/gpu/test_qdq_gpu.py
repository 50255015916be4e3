"""calib's Q/DQ placement on real TensorRT engines: what runs in INT8, what stays float, and the per-layer profile.

Run on the device (`pytest -m gpu tests/gpu`); CALIB_TEST_OPT_LEVEL sets the builder level (default 1)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from calib.quantize.cache import read_cache
from calib.runners.onnxruntime import OrtRunner
from conftest import GOLDEN

pytestmark = pytest.mark.gpu
trt = pytest.importorskip("tensorrt")

from calib.quantize.qdq import insert_qdq  # noqa: E402
from calib.runners.tensorrt.builder import BuildSpec, build  # noqa: E402
from calib.runners.tensorrt.calibrators import cache_calibrator  # noqa: E402
from calib.runners.tensorrt.inspect import node_precisions  # noqa: E402
from calib.runners.tensorrt.profile import profile_layers  # noqa: E402
from calib.runners.tensorrt.runner import TrtRunner  # noqa: E402
from test_placement import upsample_concat  # noqa: E402

MBV2 = GOLDEN / "mobilenet_v2" / "mobilenet_v2_imagenet.onnx"
LEVEL = int(os.environ.get("CALIB_TEST_OPT_LEVEL", "1"))


def _photos():
    p = Path(os.environ.get("CALIB_PHOTOS_224", GOLDEN / "mobilenet_v2" / "photos_224.npy"))
    if not p.is_file():
        pytest.skip("the golden photos are not here (tests/golden/trt86-h200/make_calib_data.py writes them; "
                    "CALIB_PHOTOS_224 names an .npy or an .npz holding 'images')")
    u8 = np.load(p)
    u8 = (u8["images"] if p.suffix == ".npz" else u8)[:64]
    x = u8.astype(np.float32) / 255.0
    x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _top1(runner, x, batch=32):
    return np.concatenate([runner.run({"input": x[i:i + batch]})["logits"].argmax(1)
                           for i in range(0, len(x), batch)])


def test_mobilenet_v2_qdq_engine_runs_every_conv_and_add_in_int8(tmp_path, cuda):
    """TensorRT's own EntropyCalibration2 scales through calib's placement: every Conv and every residual Add
    ends up in an INT8 engine layer (the Adds fused into the Convs), and agreement with FP32 is the implicit
    engine's with the same scales, within 3 points on 64 photos."""
    amax = read_cache(GOLDEN / "mobilenet_v2" / "entropy2.cache").amaxes()
    model = onnx.load(str(MBV2))
    q = tmp_path / "mbv2.qdq.onnx"
    onnx.save(insert_qdq(model, amax), str(q))
    spec = BuildSpec(precisions=("int8", "fp16"), batch_size=32, optimization_level=LEVEL)
    explicit = build(q, spec, None, trt, cuda)
    names = [n.name for n in model.graph.node if n.op_type in ("Conv", "Add")]
    prec = node_precisions(explicit.layers, names)
    not_int8 = {n: p for n, p in prec.items() if p != "int8"}
    assert not not_int8, not_int8
    counts = explicit.info["layer_summary"]
    assert counts.get("fp16", 0) + counts.get("fp32", 0) <= 4, counts
    implicit = build(MBV2, spec, cache_calibrator(amax, trt), trt, cuda)
    x = _photos()
    ref = OrtRunner(MBV2).run({"input": x})["logits"].argmax(1)
    agree = {}
    for key, built in (("explicit", explicit), ("implicit", implicit)):
        r = TrtRunner(built.plan, trt, cuda)
        agree[key] = float((_top1(r, x) == ref).mean())
        if key == "explicit":
            prof = profile_layers(r, {"input": x[:32]}, runs=5, warmup=2)
        r.close()
    assert agree["explicit"] >= agree["implicit"] - 0.03, agree
    assert [row["name"] for row in prof["layers"]] == [la["name"] for la in explicit.layers]
    int8_share = sum(row["share"] for row in prof["layers"] if row["precision"] == "int8")
    assert int8_share > 0.7, prof["ms_by_precision"]


def test_concat_resize_maxpool_chain_stays_int8(tmp_path, cuda):
    """One scale across Resize -> Concat <- MaxPool input: no float layer between the Convs."""
    m = upsample_concat()
    amax = {"input": 1.0, "a0": 3.0, "a": 2.0, "b0": 5.0, "b1": 4.0, "b": 4.0, "c": 4.0, "mp": 2.0, "mpr": 2.0}
    q = tmp_path / "cat.qdq.onnx"
    onnx.save(insert_qdq(m, amax), str(q))
    built = build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=1, optimization_level=LEVEL), None, trt,
                  cuda)
    prec = node_precisions(built.layers, ["a0", "b0", "out", "up", "cat", "pool"])
    assert all(p == "int8" for p in prec.values()), (prec, built.layers)
    x = np.random.default_rng(0).random((1, 3, 4, 4), dtype=np.float32)
    r = TrtRunner(built.plan, trt, cuda)
    got = r.run({"input": x})["out"]
    r.close()
    want = OrtRunner(insert_qdq(m, amax), optimize=False).run({"input": x})["out"]
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max() + 1e-3


def test_like_engine_qdq_keeps_the_implicit_engines_float_layers(tmp_path, cuda):
    """An implicit INT8 engine is built; the Q/DQ model made --like-engine from its layers gives an explicit
    engine whose float (FP16/FP32) Conv/Gemm/pooling/Add nodes are the implicit engine's."""
    from calib.deploy.like import float_nodes
    from calib.quantize.qdq import Exclusions

    amax = read_cache(GOLDEN / "mobilenet_v2" / "entropy2.cache").amaxes()
    model = onnx.load(str(MBV2))
    spec = BuildSpec(precisions=("int8", "fp16"), batch_size=32, optimization_level=LEVEL)
    implicit = build(MBV2, spec, cache_calibrator(amax, trt), trt, cuda)
    keep = float_nodes(model, implicit.layers)
    q = tmp_path / "like.qdq.onnx"
    onnx.save(insert_qdq(model, amax, Exclusions(tuple(keep))), str(q))
    explicit = build(q, spec, None, trt, cuda)
    ops = ("Conv", "Gemm", "Add", "GlobalAveragePool")
    names = [n.name for n in model.graph.node if n.op_type in ops]
    floats = {k for k, p in node_precisions(explicit.layers, names).items() if p != "int8"}
    want = {k for k, p in node_precisions(implicit.layers, names).items() if p != "int8"}
    assert floats == want, (sorted(floats), sorted(want))
