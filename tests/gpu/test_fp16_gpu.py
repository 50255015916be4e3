"""The FP16+INT8 model (calib.quantize.fp16) on real TensorRT (run on the device: `pytest -m gpu tests/gpu`).

TensorRT 8.6's ONNX parser reads every Q/DQ scale as FP32, so the model's FP16 scales fail there ("Scale
coefficients must all be positive", seen on an H100): calib build refuses it first, naming what to build instead.
From TensorRT 10 on it builds strongly typed and gives what calib's CPU emulation of it predicts."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from calib.calibrate import calibrate
from calib.deploy.emulate import Fp16Runner
from calib.errors import CalibError
from calib.quantize.fp16_model import make_fp16_model
from calib.runners.onnxruntime import OrtRunner
from conftest import GOLDEN

pytestmark = pytest.mark.gpu
trt = pytest.importorskip("tensorrt")

from calib.runners.tensorrt.builder import BuildSpec, build  # noqa: E402
from calib.runners.tensorrt.runner import TrtRunner  # noqa: E402

CNN = GOLDEN / "cnn" / "cnn.onnx"
LEVEL = int(os.environ.get("CALIB_TEST_OPT_LEVEL", "1"))


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def fp16_model(tmp_path_factory):
    data = np.load(GOLDEN / "cnn" / "cnn_calib.npy")
    res = calibrate(CNN, data, ["minmax"], batch_size=8)
    f = make_fp16_model(onnx.load(str(CNN)), res.amax["minmax"])
    path = tmp_path_factory.mktemp("fp16") / "cnn.minmax.fp16.qdq.onnx"
    onnx.save(f.model, str(path))
    return path, f.model, data


def test_fp16_int8_model_on_tensorrt(cuda, fp16_model):
    path, model, data = fp16_model
    major = int(trt.__version__.split(".")[0])
    if major < 10:
        with pytest.raises(CalibError, match="FP32 scales only"):
            build(path, BuildSpec(batch_size=8, optimization_level=LEVEL, precisions=("fp32", "fp16", "int8")),
                  None, trt, cuda)
        return
    built = build(path, BuildSpec(batch_size=8, optimization_level=LEVEL, strongly_typed=True), None, trt, cuda)
    runner = TrtRunner(built.plan, trt, cuda)
    got = np.concatenate([runner.run({"input": data[i:i + 8]})["logits"] for i in range(0, len(data), 8)])
    emu = Fp16Runner(model).run({"input": data})["logits"]
    ref = OrtRunner(CNN).run({"input": data})["logits"]
    assert built.info["layer_summary"].get("int8", 0) >= 1
    assert _rel(got, emu) < 0.5 * _rel(emu, ref) + 1e-2  # the emulation predicts the engine better than FP32 does
