"""The underflow rule: an epsilon that FP16 flushes to 0 or to a subnormal keeps the layer it decides FP32."""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from calib.deploy.emulate import Fp16Runner
from calib.quantize.fp16 import to_fp16
from calib.quantize.fp16_keep import fp32_layers
from calib.quantize.fp16_model import make_fp16_model
from calib.quantize.opset import FP16_QDQ_OPSET, at_qdq_opset
from calib.quantize.qdq import insert_qdq

F32 = TensorProto.FLOAT


def front_end(eps: float = 1e-10, guard: str = "add"):
    """x (a power spectrum: zero on silent frames) -> + eps | Max(x, eps) | Clip(x, eps) -> Log -> Conv -> y."""
    rng = np.random.default_rng(0)
    inits = {"w2": (rng.standard_normal((4, 4, 1, 1)) * 0.5).astype(np.float32),
             "eps": np.array(eps, np.float32)}
    guard_node = (helper.make_node("Add", ["x", "eps"], ["pe"], name="add_eps") if guard == "add" else
                  helper.make_node("Max", ["x", "eps"], ["pe"], name="floor") if guard == "max" else
                  helper.make_node("Clip", ["x", "eps"], ["pe"], name="clip"))
    nodes = [guard_node,
             helper.make_node("Log", ["pe"], ["lg"], name="log"),
             helper.make_node("Conv", ["lg", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info(o, F32, [1, 4, 8, 8]) for o in ("y", "lg")],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


AMAX = {"x": 4.0, "pe": 4.0, "lg": 24.0, "y": 30.0}


def _x():
    rng = np.random.default_rng(1)
    x = np.abs(rng.standard_normal((1, 4, 8, 8))).astype(np.float32) + 0.05
    x[rng.random(x.shape) < 0.3] = 0.0  # silent frames
    return x


def test_an_epsilon_flushed_by_fp16_keeps_the_add_and_its_log_fp32():
    f = make_fp16_model(front_end(), AMAX, tail=False)
    why = {k.node: (k.rule, k.reason) for k in f.kept}
    assert set(why) == {"add_eps", "log"}
    assert why["add_eps"] == ("underflow", "constant 'eps' (1e-10) is 0 in FP16 before a Log (FP16's smallest normal "
                                           "is 6.1e-05)")
    assert why["log"][0] == "underflow" and why["log"][1].startswith("reads 'pe'")
    x = _x()
    q = insert_qdq(at_qdq_opset(front_end(), "m", FP16_QDQ_OPSET), AMAX)
    ref = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.isfinite(ref[1]).all() and ref[1].min() < -23  # float layers FP32: log(0 + 1e-10) = -23
    got = Fp16Runner(f.model).run({"x": x})
    assert np.abs(got["lg"] - ref[1]).max() < 0.02 and np.abs(got["y"] - ref[0]).max() < 0.02 * np.abs(ref[0]).max()
    # the same model with every float layer FP16: log(0) = -inf on the silent frames
    bad = Fp16Runner(to_fp16(q, {}).model).run({"x": x})["lg"]
    assert np.isneginf(bad).sum() == (x == 0).sum() > 0


def test_subnormal_bounds_of_max_and_clip_and_a_safe_epsilon():
    for guard, node in (("max", "floor"), ("clip", "clip")):
        kept = {k.node: k for k in fp32_layers(front_end(1e-6, guard), tail=False)}
        assert set(kept) == {node, "log"}, guard
        assert "a subnormal in FP16" in kept[node].reason
    assert not fp32_layers(front_end(1e-3), tail=False)  # 1e-3 is a normal FP16 number
    assert not fp32_layers(front_end(0.0), tail=False)  # nothing to flush


def test_an_add_that_no_log_reads_stays_fp16():
    m = front_end()
    log = next(n for n in m.graph.node if n.name == "log")
    log.op_type = "Relu"  # x + 1e-10 read by a Relu: FP16's rounding decides nothing there
    assert not fp32_layers(m, tail=False)
