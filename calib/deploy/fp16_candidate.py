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


def float_type(c) -> str:
    """A recipe's calibration.float_type, or its default for calibration.trt_version."""
    from calib.runners.tensorrt.compat import cache_major

    if c.float_type:
        return c.float_type
    return "fp16" if cache_major(c.trt_version) >= FP16_FROM_MAJOR else "fp32"


def write_fp16(model: onnx.ModelProto, qdq_from: Path, amax: dict, ranges: dict, c, stage: Path, algo: str,
               plugins) -> dict:
    """Write `<stem>.<algo>.fp16.qdq.onnx` of `model` (the file `qdq_from`) into `stage`; what the report says of
    it (file, FP32 layers, casts), with the model under "evaluate" where ONNX Runtime can run it (not a model with
    plugin nodes)."""
    name = f"{qdq_from.stem}.{algo}.fp16.qdq.onnx"
    f = make_fp16_model(model, amax, ranges, "the calibration pass", int8_weights=c.int8_weights,
                        stem_output=c.stem_output == "int8", io_type=c.io_type, label=str(qdq_from),
                        residual_branch=c.residual_branch)
    atomic_write_bytes(stage / name, f.model.SerializeToString())
    log.info("wrote %s (%s; %s)", name, f.describe(), weight_coverage(f.model).describe())
    out = f.entry(algo, c.io_type, name)
    if plugins:
        log.warning("%s: not simulated (ONNX Runtime cannot run its plugin nodes)", name)
    else:
        out["evaluate"] = f.model
    return out
