"""The zoo's sentence encoder (all-MiniLM-L6-v2) on a real GPU (run on the device: `pytest -m gpu tests/gpu`):
built FP16 and INT8 from calib's Q/DQ model (the MatMuls' inputs quantized, Q*K^T and attention*V included;
Softmax and LayerNorm in float), with a batch profile 1/16/32 over int64 inputs (TensorRT takes them as int32),
and evaluated against ONNX Runtime's FP32 embeddings by cosine per sentence. Calibration data: an .npz with one
array per input (CALIB_MINILM_NPZ, else the recipe's sentences through the tokenizer). With CALIB_GPU_OUT set, the
figures go to minilm.json there."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from calib.runners.onnxruntime import OrtRunner
from conftest import ROOT

pytestmark = pytest.mark.gpu
trt = pytest.importorskip("tensorrt")

from calib.runners.tensorrt.builder import BuildSpec, build  # noqa: E402
from calib.runners.tensorrt.inspect import node_precisions  # noqa: E402
from calib.runners.tensorrt.runner import TrtRunner  # noqa: E402

LEVEL = int(os.environ.get("CALIB_TEST_OPT_LEVEL", "1"))
NAMES = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def model():
    from calib import zoo

    try:
        return zoo.fetch("minilm-l6")
    except Exception as exc:
        pytest.skip(f"minilm-l6 is not in the zoo cache here ({exc})")


@pytest.fixture(scope="module")
def data(model):
    npz = os.environ.get("CALIB_MINILM_NPZ")
    if npz and Path(npz).is_file():
        z = np.load(npz)
        return {n: z[n] for n in NAMES}
    from calib.data.text import TextSource, read_lines
    from calib.quantize.model import inspect_model

    lines = read_lines(ROOT / "datasets" / "sentences.txt")[:192]
    src = TextSource(lines, model.parent / "tokenizer.json", inspect_model(model).inputs, batch_size=192)
    return next(iter(src))


def _cosines(a, b):
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def _run(runner, x, batch=32):
    n = len(x["input_ids"])
    return np.concatenate([runner.run({k: v[i:i + batch] for k, v in x.items()})["embedding"]
                           for i in range(0, n, batch)])


def test_minilm_fp16_and_int8_qdq_engines_keep_the_embeddings(model, data, cuda, tmp_path):
    from calib.calibrate import calibrate
    from calib.quantize.qdq import quantizable_layers
    from calib.quantize.qdq import count_qdq, insert_qdq

    calib_part = {k: v[:128] for k, v in data.items()}
    held_out = {k: v[128:] for k, v in data.items()} if len(data["input_ids"]) > 160 else data
    ref = OrtRunner(model).run(held_out)["embedding"]
    res = calibrate(model, calib_part, algorithms=["minmax", "mse"], batch_size=16)
    profile = {n: ((1, data[n].shape[1]), (16, data[n].shape[1]), (32, data[n].shape[1])) for n in NAMES}
    record = {"tensorrt": trt.__version__, "gpu": cuda.name(), "opt_level": LEVEL, "seq_len": int(data["input_ids"]
              .shape[1]), "sentences": int(len(ref)), "engines": {}}
    proto = onnx.load(str(model))
    nodes = quantizable_layers(proto)
    jobs = [("fp16", model, ("fp32", "fp16"))]
    for algo in ("minmax", "mse"):
        qdq = insert_qdq(proto, res.amax[algo])
        path = tmp_path / f"minilm.{algo}.qdq.onnx"
        onnx.save(qdq, path)
        sim = OrtRunner(path).run(held_out)["embedding"]
        record["engines"][f"int8-qdq-{algo}-simulated"] = {"qdq_pairs": count_qdq(qdq),
                                                          "mean_cosine": float(_cosines(sim, ref).mean())}
        jobs.append((f"int8-qdq-{algo}", path, ("int8", "fp16")))
    for name, path, precisions in jobs:
        built = build(path, BuildSpec(precisions=precisions, optimization_level=LEVEL, profiles=(profile,)), None,
                      trt, cuda)
        r = TrtRunner(built.plan, trt, cuda, label=name)
        try:
            got = _run(r, held_out)
            lat = {n: r.latency({k: v[:n] for k, v in held_out.items()}, warmup=10, iters=20, repeats=5)["median_ms"]
                   for n in (1, 16, 32)}
        finally:
            r.close()
        cos = _cosines(got, ref)
        entry = {"build_s": round(built.seconds, 1), "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
                 "median_ms": lat}
        if name.startswith("int8"):
            prec = node_precisions(built.layers, nodes)
            entry["matmuls_int8"] = sum(1 for n in nodes if prec.get(n) == "int8")
            entry["matmuls"] = len(nodes)
        record["engines"][name] = entry
        if name == "fp16":
            assert cos.mean() > 0.995 and cos.min() > 0.98, entry
        else:
            assert cos.mean() > 0.9, entry
    out = os.environ.get("CALIB_GPU_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "minilm.json"), "w") as f:
            json.dump(record, f, indent=1)
