"""Optimization profiles on a real GPU with real TensorRT (run on the device: `pytest -m gpu tests/gpu`): the
golden CNN (dynamic batch) built with a 1/8/32 profile, in FP32 and in INT8 from TensorRT's calibrator (which
calibrates at the opt batch), runs at 1, 8 and 32 against ONNX Runtime, refuses 33, and is timed at each shape.
With CALIB_GPU_OUT set, the timings are written there for the record."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from calib.data.arrays import ArraySource
from calib.errors import CalibError, DataError
from calib.runners.onnxruntime import OrtRunner
from conftest import GOLDEN

pytestmark = pytest.mark.gpu
trt = pytest.importorskip("tensorrt")

from calib.deploy.engine_file import bench_engine_file  # noqa: E402
from calib.runners.tensorrt.builder import BuildSpec, build, write_engine  # noqa: E402
from calib.runners.tensorrt.calibrators import make_calibrator  # noqa: E402
from calib.runners.tensorrt.runner import TrtRunner  # noqa: E402

CNN = GOLDEN / "cnn" / "cnn.onnx"
LEVEL = int(os.environ.get("CALIB_TEST_OPT_LEVEL", "1"))
PROFILE = {"input": ((1, 3, 64, 64), (8, 3, 64, 64), (32, 3, 64, 64))}


@pytest.fixture(scope="module")
def data():
    return np.load(GOLDEN / "cnn" / "cnn_calib.npy")  # 64 samples


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_dynamic_batch_profile_runs_and_is_timed_at_each_shape(tmp_path, cuda, data, precision):
    ref = OrtRunner(CNN).run({"input": data})["logits"]
    spec = BuildSpec(precisions=(precision,), optimization_level=LEVEL, profiles=(PROFILE,))
    calibrator = None
    if precision == "int8":  # TensorRT's own MinMax, fed at the calibration profile's opt batch (8)
        calibrator = make_calibrator("minmax", ArraySource(data, "input", 8), {"input": ((3, 64, 64), np.float32)},
                                     8, cuda, None, "", trt)
    built = build(CNN, spec, calibrator, trt, cuda)
    assert built.info["profiles"] == [{"input": {"min": [1, 3, 64, 64], "opt": [8, 3, 64, 64],
                                                 "max": [32, 3, 64, 64]}}]
    if calibrator is not None:
        assert calibrator.calls == 8
    r = TrtRunner(built.plan, trt, cuda)
    try:
        assert r.ranges["input"] == PROFILE["input"]
        tol = 1e-3 if precision == "fp32" else 0.1
        for n in (1, 8, 32, 5):
            got = r.run({"input": data[:n]})["logits"]
            assert got.shape == (n, 10)
            assert _rel(got, ref[:n]) < tol, (precision, n)
        with pytest.raises(DataError, match="outside optimization profile 0"):
            r.run({"input": np.concatenate([data, data])[:33]})
    finally:
        r.close()
    eng = write_engine(tmp_path / f"cnn.{precision}.engine", built)
    rows = bench_engine_file(eng, warmup=10, iters=20, repeats=5, cuda=cuda)
    assert [(row["point"], row["batch"]) for row in rows] == [("min", 1), ("opt", 8), ("max", 32)]
    assert all(row["median_ms"] > 0 for row in rows)
    with pytest.raises(CalibError, match="outside optimization profile 0"):
        bench_engine_file(eng, shapes={"input": (33, 3, 64, 64)}, cuda=cuda)
    out = os.environ.get("CALIB_GPU_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"profiles-{precision}.json"), "w") as f:
            json.dump(rows, f, indent=1)
