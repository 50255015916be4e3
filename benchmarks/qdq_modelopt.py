"""ModelOpt's INT8 Q/DQ model from a TensorRT calibration cache (a benchmark baseline, run from ModelOpt's own
environment by benchmarks/qdq_prepare.py; calib never imports ModelOpt).

    python benchmarks/qdq_modelopt.py MODEL.onnx CACHE CALIB_F32.npy OUT.onnx [fp32|fp16]

ModelOpt 0.47 (modelopt.onnx.quantization.int8) quantizes only the nodes whose inputs the cache names, still
runs ONNX Runtime's static calibration on the data it is given (random data when none: its CLI takes a cache or
data, not both), then overwrites each activation scale the cache holds (replace_scale_values). So this gives it
calib's calibration data too, with its fast 'max' method: the scales that matter come from the cache. The graph
stays FP32 (high_precision_dtype='fp32', not ModelOpt's default fp16: TensorRT 8.6 takes only FP32 Q/DQ scales),
as calib's Q/DQ model does; both are built with the INT8 and FP16 flags. The fifth argument fp16 gives ModelOpt's
default instead, its FP16+INT8 model for strongly typed builds (benchmarks/fp16_modelopt.py).
Prints a JSON line: ModelOpt version, seconds, and how many activation QuantizeLinear scales equal the cache's.
"""
import json
import os
import shutil
import struct
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper


def cache_scales(path):
    lines = open(path).read().splitlines()[1:]
    return {n: struct.unpack("!f", bytes.fromhex(h))[0] for n, h in (ln.split(": ") for ln in lines if ": " in ln)}


def main():
    model, cache, data, out = sys.argv[1:5]
    dtype = sys.argv[5] if len(sys.argv) > 5 else "fp32"
    import modelopt
    from modelopt.onnx.quantization import quantize

    x = np.load(data)
    name = onnx.load(model, load_external_data=False).graph.input[0].name
    tmp = tempfile.mkdtemp()
    copy = os.path.join(tmp, os.path.basename(model))  # ModelOpt rewrites the model it is given: hand it a copy
    shutil.copy(model, copy)
    t0 = time.time()
    quantize(copy, quantize_mode="int8", calibration_data={name: x}, calibration_method="max",
             calibration_cache_path=cache, calibration_eps=["cpu"], output_path=out, high_precision_dtype=dtype)
    secs = time.time() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    q = onnx.load(out)
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    want = cache_scales(cache)
    cast_of = {n.output[0]: n.input[0] for n in q.graph.node if n.op_type == "Cast"}  # the FP16 conversion's casts
    same = differ = weights = 0
    for n in q.graph.node:
        if n.op_type != "QuantizeLinear":
            continue
        src = cast_of.get(n.input[0], n.input[0])
        if src not in want:
            weights += n.input[0] in inits
            continue
        s = float(np.asarray(inits.get(n.input[1], np.nan)).reshape(-1)[0])
        if np.isclose(s, want[src], rtol=1e-3):  # 1e-3: FP16 scales when high_precision_dtype is fp16
            same += 1
        else:
            differ += 1
    print(json.dumps({"version": modelopt.__version__, "seconds": round(secs, 1), "act_scales_from_cache": same,
                      "act_scales_other": differ, "weight_quantize_nodes": weights,
                      "qdq_nodes": sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in q.graph.node),
                      "call": "modelopt.onnx.quantization.quantize(quantize_mode='int8', calibration_method='max', "
                              "calibration_cache_path=CACHE, calibration_data={input: calib data}, "
                              f"calibration_eps=['cpu'], high_precision_dtype='{dtype}')"}))


if __name__ == "__main__":
    main()
