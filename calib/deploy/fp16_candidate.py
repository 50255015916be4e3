"""`calib run`'s FP16+INT8 model (recipe calibration.float_type), written beside the Q/DQ model; its rows in the
report come from calib.evaluate.fp16_rows."""
from __future__ import annotations

import logging
from pathlib import Path

import onnx

from calib.io.files import atomic_write_bytes
from calib.quantize.coverage import weight_coverage
from calib.quantize.fp16_model import make_fp16_model

log = logging.getLogger(__name__)

FP16_FROM_MAJOR = 11  # TensorRT 11 builds strongly typed networks only


def trt_major(digits: str) -> int:
    """The major version in a cache header's digits: 8600 -> 8, 100100 -> 10, 110000 -> 11."""
    n = int(digits)
    return n // 10000 if n >= 100000 else n // 1000 if n >= 1000 else n


def float_type(c) -> str:
    """A recipe's calibration.float_type, or its default for calibration.trt_version."""
    if c.float_type:
        return c.float_type
    return "fp16" if trt_major(c.trt_version) >= FP16_FROM_MAJOR else "fp32"


def write_fp16(qdq_from: Path, amax: dict, ranges: dict, c, stage: Path, algo: str, plugins) -> dict:
    """Write `<stem>.<algo>.fp16.qdq.onnx` into `stage`; what the report says of it (file, FP32 layers, casts),
    with the model under "evaluate" where ONNX Runtime can run it (not a model with plugin nodes)."""
    name = f"{qdq_from.stem}.{algo}.fp16.qdq.onnx"
    f = make_fp16_model(onnx.load(str(qdq_from)), amax, ranges, "the calibration pass", int8_weights=c.int8_weights,
                        io_type=c.io_type, label=str(qdq_from))
    atomic_write_bytes(stage / name, f.model.SerializeToString())
    log.info("wrote %s (%s; %s)", name, f.describe(), weight_coverage(f.model).describe())
    out = {"file": name, "algorithm": algo, "io_type": c.io_type, "casts": f.casts, "fp32_layers": f.fp32_table(),
           "ranges_from": f.ranges_from, "text": f.describe()}
    if plugins:
        log.warning("%s: not simulated (ONNX Runtime cannot run its plugin nodes)", name)
    else:
        out["evaluate"] = f.model
    return out
