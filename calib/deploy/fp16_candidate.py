"""`calib run`'s FP16+INT8 model (recipe calibration.float_type): written beside the Q/DQ model, run on the CPU
(calib.deploy.emulate) and compared with FP32 as one more row of the report."""
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


def add_fp16_rows(result: dict, algo: str, qdq: onnx.ModelProto, fp16: onnx.ModelProto, model_path, source, recipe,
                  budget, hook) -> list[str]:
    """Compare the Q/DQ model as written (FP32 float layers) and its FP16+INT8 model with FP32 on the evaluation
    data, on the same samples (paired); their rows join `result` as `<algo> qdq` and `<algo> qdq-fp16`."""
    from calib.deploy.emulate import Fp16Runner
    from calib.evaluate.api import evaluate
    from calib.io.memory import release

    release()  # the first evaluation's sessions and copies: handed back before the budget counts what is held
    names = [f"{algo} qdq", f"{algo} qdq-fp16"]
    engines = {names[0]: Fp16Runner(qdq, names[0], backend="onnxruntime (Q/DQ model as written)"),
               names[1]: Fp16Runner(fp16, names[1])}
    release()
    res = evaluate(model_path, {}, source, recipe.evaluation.task, recipe.evaluation.detection, layerwise=False,
                   engines=engines, memory_budget=budget, input_shapes=recipe.input_shapes, postprocess=hook,
                   batch_size=recipe.evaluation.batch_size)
    for n in names:
        result["configs"][n] = res["configs"][n]
    result.setdefault("paired_extra", []).extend(res.get("paired") or [])
    return names


def fp16_engines(model: onnx.ModelProto, configs: dict, exclude, label) -> tuple[dict, list]:
    """`calib evaluate --float-type fp16`: per cache, runners of its Q/DQ model as written and of its FP16+INT8
    model (ranges: the cache's amax), and what the report says of each FP16+INT8 model."""
    from calib.deploy.emulate import Fp16Runner
    from calib.quantize.qdq import insert_qdq

    engines, infos = {}, []
    for name, amax in configs.items():
        q = insert_qdq(model, amax, exclude, label=str(label))
        f = make_fp16_model(model, amax, None, None, exclude, label=str(label))
        rows = [f"{name} qdq", f"{name} qdq-fp16"]
        engines[rows[0]] = Fp16Runner(q, rows[0], backend="onnxruntime (Q/DQ model as written)")
        engines[rows[1]] = Fp16Runner(f.model, rows[1])
        infos.append({"file": None, "algorithm": name, "io_type": "fp32", "casts": f.casts, "rows": rows,
                      "fp32_layers": f.fp32_table(), "ranges_from": f.ranges_from, "text": f.describe()})
    return engines, infos
