"""Memory given back between phases: the statistics pass's arena before the evaluation's sessions."""
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# a chain of 1x1 convolutions on 8x512x512 maps: 8 MB per activation and sample, about 200 MB of exposed
# tensors in a micro-batch of 4, all of them held in ONNX Runtime's arena while the pass reads them
LAYERS, CH, HW = 6, 8, 512


def _model(path):
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "input"
    for i in range(LAYERS):
        w = numpy_helper.from_array(rng.normal(0, 0.3, (CH, CH, 1, 1)).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}"))
        x = f"c{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                         [None, CH, HW, HW])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


def _rss_growth(model, data, give_back: bool) -> float:
    """MB that stay resident after the pass, in a fresh process (its imports and session set-up excluded)."""
    code = f"""
import numpy as np
from calib.calibrate import collect
from calib.data.arrays import as_source
from calib.io.memory import release, rss_mb
from calib.quantize.model import inspect_model
from calib.runners.onnxruntime import OrtRunner
info = inspect_model({str(model)!r})
src = as_source({str(data)!r}, info.inputs, 4)
warm = OrtRunner({str(model)!r}).run({{"input": np.zeros((1, {CH}, {HW}, {HW}), np.float32)}})  # ORT's own set-up
del warm
release()
before = rss_mb()
res = collect({str(model)!r}, src, micro_batch=4, info=info, give_back={give_back})
release()
print(rss_mb() - before)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return float(r.stdout.strip().splitlines()[-1])


def test_the_pass_gives_its_arena_back(tmp_path):
    model, data = tmp_path / "chain.onnx", tmp_path / "x.npy"
    _model(model)
    np.save(data, np.random.default_rng(1).normal(size=(8, CH, HW, HW)).astype(np.float32))
    exposed = LAYERS * CH * HW * HW * 4 * 4 / 2**20  # one micro-batch's exposed tensors, MB
    kept = _rss_growth(model, data, give_back=False)
    back = _rss_growth(model, data, give_back=True)
    assert kept > 0.8 * exposed, (kept, exposed)  # the arena holds them after the pass...
    assert kept - back > 0.8 * exposed, (kept, back, exposed)  # ...unless the pass gives it back
