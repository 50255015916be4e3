"""The FP16+INT8 model (calib.quantize.fp16) on real TensorRT: it builds, runs INT8 and FP16 layers, and gives
what calib's CPU emulation of it predicts (run on the device: `pytest -m gpu tests/gpu`)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from calib.calibrate import calibrate
from calib.deploy.emulate import Fp16Runner
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


def _fp16_scales_supported() -> bool:
    return int(trt.__version__.split(".")[0]) >= 10  # TensorRT 8.6's parser takes FP32 Q/DQ scales only


@pytest.mark.parametrize("scale_type", ["fp32", "fp16"])
def test_fp16_int8_model_builds_and_matches_its_emulation(tmp_path, cuda, scale_type):
    if scale_type == "fp16" and not _fp16_scales_supported():
        pytest.skip(f"TensorRT {trt.__version__}: FP16 Q/DQ scales need TensorRT 10 (use --scale-type fp32)")
    data = np.load(GOLDEN / "cnn" / "cnn_calib.npy")
    res = calibrate(CNN, data, ["minmax"], batch_size=8)
    f = make_fp16_model(onnx.load(str(CNN)), res.amax["minmax"], scale_type=scale_type)
    path = tmp_path / f"cnn.fp16-{scale_type}.qdq.onnx"
    onnx.save(f.model, str(path))
    built = build(path, BuildSpec(batch_size=8, optimization_level=LEVEL, precisions=("fp32", "fp16", "int8")),
                  None, trt, cuda)
    runner = TrtRunner(built.plan, trt, cuda)
    got = np.concatenate([runner.run({"input": data[i:i + 8]})["logits"] for i in range(0, len(data), 8)])
    emu = Fp16Runner(f.model).run({"input": data})["logits"]
    ref = OrtRunner(CNN).run({"input": data})["logits"]
    assert built.info["layer_summary"].get("int8", 0) >= 1
    assert _rel(got, emu) < 0.5 * _rel(emu, ref) + 1e-2  # the emulation predicts the engine better than FP32 does
    assert _rel(got, ref) < 5e-2
