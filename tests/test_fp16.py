"""The FP16+INT8 model (calib.quantize.fp16, fp16_keep, fp16_model) and its CPU emulation (calib.deploy.emulate)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from calib.deploy.emulate import Fp16Runner, emulated
from calib.errors import CalibError, ModelError
from calib.quantize.fp16 import _round_scale, to_fp16
from calib.quantize.fp16_keep import fp32_layers
from calib.quantize.fp16_model import check, make_fp16_model, read_ranges
from calib.quantize.model import elem_types
from calib.quantize.opset import model_opset
from conftest import golden

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _model(nodes, inits, outputs, opset=13, shape=(1, 4, 8, 8)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, list(shape))],
                          [helper.make_tensor_value_info(o, F32, list(shape)) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def conv_block(opset=13):
    """x -> Conv -> Relu -> Conv -> Add(residual) -> Softmax(axis 1) -> y; and a tail Sigmoid -> Mul(16) -> boxes."""
    rng = np.random.default_rng(0)
    inits = {"w1": (rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32),
             "w2": (rng.standard_normal((4, 4, 1, 1)) * 0.2).astype(np.float32),
             "sixteen": np.array(16.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
             helper.make_node("Softmax", ["a"], ["y"], name="softmax", axis=1),
             helper.make_node("Sigmoid", ["c2"], ["s"], name="sig"),
             helper.make_node("Mul", ["s", "sixteen"], ["boxes"], name="scale16")]
    return _model(nodes, inits, ["y", "boxes"], opset)


AMAX = {"x": 1.0, "c1": 3.0, "r1": 3.0, "c2": 2.0, "a": 4.0, "y": 1.0, "s": 1.0, "boxes": 16.0}


def _types(m):
    t = elem_types(m)
    t.update({i.name: i.data_type for i in m.graph.initializer})
    return t


def _node(m, name):
    return next(n for n in m.graph.node if n.name == name)


def test_float_layers_become_fp16_and_the_rules_keep_fp32():
    f = make_fp16_model(conv_block(), AMAX, label="block")
    m = f.model
    assert model_opset(m) == 19
    types = _types(m)
    assert types[_node(m, "relu1").output[0]] == F16
    assert types[_node(m, "add").output[0]] == F16
    assert types[_node(m, "conv1").output[0]] == F16  # an INT8 layer writes the type its DQ gives it
    rules = {k.node: k.rule for k in f.kept}
    assert rules == {"softmax": "reduction"}  # `boxes` reaches 16: its decoding holds in FP16
    assert types[_node(m, "softmax").output[0]] == F32
    # model inputs and outputs stay FP32 by default
    assert m.graph.input[0].type.tensor_type.elem_type == F32
    assert {o.type.tensor_type.elem_type for o in m.graph.output} == {F32}
    check(m)


def test_qdq_scales_are_typed_as_their_input_and_reader():
    m = make_fp16_model(conv_block(), AMAX).model
    types = _types(m)
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear":
            assert types[n.input[1]] == types[n.input[0]], n.name  # opset 19: x and y_scale share T1
        if n.op_type == "DequantizeLinear":
            assert types[n.output[0]] == types[n.input[1]]
    # the graph input is FP32: its Q is FP32; conv1 reads FP16 from its DequantizeLinear
    q_in = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    assert types[q_in.input[1]] == F32
    assert {types[t] for t in _node(m, "conv1").input[:2]} == {F16}


def test_scales_are_fp16_values_activations_nearest_weights_up():
    m = make_fp16_model(conv_block(), AMAX).model
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    q_act = [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in ("x", "r1")]
    assert len(q_act) == 2  # conv1 reads x, conv2 reads r1
    for n in q_act:
        s = inits[n.input[1]]
        want = np.float16(np.float32(AMAX[n.input[0]] / 127.0))
        assert float(s) == float(want)
    w = numpy_helper.to_array(conv_block().graph.initializer[0])
    true = np.abs(w).reshape(4, -1).max(axis=1) / 127.0
    ws = next(v for k, v in inits.items() if k.startswith("w1_scale"))
    assert np.all(ws >= true.astype(np.float32)) and np.all(ws <= true * (1 + 2 ** -10) + 1e-12)
    assert np.array_equal(_round_scale(np.array([1e-9], np.float32), up=True),
                          np.array([np.finfo(np.float16).smallest_subnormal], np.float32))  # never zero


def test_output_precision_rule_keeps_a_large_decoding_fp32():
    """After the last INT8 layer, a tensor reaching 2048 (FP16 steps of 2 there) keeps its layer in FP32."""
    f = make_fp16_model(conv_block(), AMAX, {**AMAX, "boxes": 3000.0}, "test ranges")
    why = {k.node: (k.rule, k.reason) for k in f.kept}
    assert why["scale16"] == ("output-precision", "'boxes' reaches 3000 over test ranges after the last INT8 layer "
                                                   "(FP16 steps of 2 there)")
    assert "sig" not in why  # its output reaches 1
    assert _types(f.model)[_node(f.model, "scale16").output[0]] == F32
    f2 = make_fp16_model(conv_block(), AMAX, {**AMAX, "boxes": 3000.0}, "test ranges", tail=False)
    assert "scale16" not in {k.node for k in f2.kept}
    # a large tensor that an INT8 layer reads later is not in the output's tail
    assert "relu1" not in {k.node for k in make_fp16_model(conv_block(), AMAX, {**AMAX, "r1": 3000.0}).kept}


def test_range_rule_keeps_the_producer_and_its_readers_fp32():
    ranges = {**AMAX, "r1": 70000.0, "a": 90000.0}  # past FP16
    f = make_fp16_model(conv_block(), AMAX, ranges, "test ranges")
    why = {k.node: (k.rule, k.reason) for k in f.kept}
    assert why["relu1"][0] == "range" and "70000" in why["relu1"][1] and "test ranges" in why["relu1"][1]
    assert why["add"] == ("range", "'a' reaches 90000 over test ranges (FP16 ends at 65504)")
    assert why["softmax"][0] == "range" and why["softmax"][1].startswith("reads 'a'")  # its reader
    assert "conv1" not in why and "conv2" not in why  # INT8 layers read r1 through a Q, which takes FP32
    types = _types(f.model)
    assert types[_node(f.model, "relu1").output[0]] == F32
    f2 = make_fp16_model(conv_block(), AMAX, {**AMAX, "r1": 1000.0})
    assert "relu1" not in {k.node for k in f2.kept}


def test_variance_of_a_written_out_layernorm_stays_fp32():
    eps = np.array(1e-5, np.float32)
    two = np.array(2.0, np.float32)
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
             helper.make_node("ReduceMean", ["d2"], ["var"], name="var", axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["d", "sd"], ["y"], name="div")]
    m = _model(nodes, {"eps": eps, "two": two}, ["y"], shape=(2, 8))
    rules = {k.node: k.rule for k in fp32_layers(m, tail=False)}
    assert rules == {"pow": "variance", "var": "variance", "add_eps": "variance", "sqrt": "variance",
                     "div": "variance"}


def test_io_type_fp16_and_refusals():
    f = make_fp16_model(conv_block(), AMAX, io_type="fp16")
    assert f.model.graph.input[0].type.tensor_type.elem_type == F16
    assert {o.type.tensor_type.elem_type for o in f.model.graph.output} == {F16}
    check(f.model)
    with pytest.raises(ModelError, match="opset 19"):
        to_fp16(conv_block())  # no Q/DQ model at opset 19
    with pytest.raises(ModelError, match="io type"):
        make_fp16_model(conv_block(), AMAX, io_type="bf16")


def test_emulation_rounds_to_fp16_where_the_model_is_fp16():
    # x + 0 in FP16: 1.0001 is not an FP16 value (the nearest is 1.0); the emulation must give 1.0 exactly
    zero = np.array(0.0, np.float32)
    m = _model([helper.make_node("Add", ["x", "zero"], ["y"], name="add")], {"zero": zero}, ["y"], shape=(1, 3))
    q = onnx.ModelProto()
    q.CopyFrom(m)
    q.opset_import[0].version = 19
    f = to_fp16(q)
    x = np.array([[1.0001, 3.14159, 70000.0]], np.float32)
    y = Fp16Runner(f.model).run({"x": x})["y"]
    assert y[0, 0] == 1.0 and y[0, 1] == np.float32(np.float16(3.14159)) and np.isinf(y[0, 2])
    # the emulated model is FP32 throughout, with a Cast pair after the FP16 Add
    e = emulated(f.model)
    assert {t.data_type for t in e.graph.initializer} == {F32}
    assert [n.op_type for n in e.graph.node].count("Cast") >= 2
    s = ort.InferenceSession(e.SerializeToString(), providers=["CPUExecutionProvider"])
    assert s.run(None, {"x": x})[0][0, 0] == 1.0


def test_emulation_follows_fp32_on_a_real_model_within_fp16_error():
    from calib.quantize.cache import read_cache
    from calib.quantize.qdq import insert_qdq

    model_path, cache_path = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx"), golden("mobilenet_v2",
                                                                                          "entropy2.cache")
    model = onnx.load(str(model_path))
    amax = read_cache(cache_path).amaxes()
    f = make_fp16_model(model, amax, label="mbv2")
    assert not f.kept and not f.fixed  # no range past FP16, no reduction, no tail after the Gemm
    x = np.random.default_rng(0).random((2, 3, 224, 224), dtype=np.float32)
    ref = Fp16Runner(insert_qdq(model, amax)).run({"input": x})
    got = Fp16Runner(f.model).run({"input": x})
    name = model.graph.output[0].name
    err = got[name] - ref[name]
    sqnr = 10 * np.log10((ref[name] ** 2).sum() / (err ** 2).sum())
    assert 15 < sqnr < 80  # FP16 rounding changes some INT8 roundings: close to the FP32-float model, not equal


def test_read_ranges(tmp_path):
    p = tmp_path / "ranges.json"
    p.write_text('{"absmax": {"a": 1.5, "b": 70000}}')
    assert read_ranges(p) == {"a": 1.5, "b": 70000.0}
    p.write_text('{"absmax": {"a": "big"}}')
    with pytest.raises(CalibError, match="ranges"):
        read_ranges(p)


def test_a_constant_past_fp16_keeps_its_readers_fp32():
    """PP-OCRv4's detector holds a BatchNormalization variance of 9.8e7: in FP16 it is infinite and the layer's
    output zero. The layer reading it stays FP32; the same model with a small variance converts whole."""
    rng = np.random.default_rng(0)

    def bn_model(var):
        inits = {"w": (rng.standard_normal((4, 4, 1, 1)) * 0.2).astype(np.float32),
                 "scale": np.full(4, 3000.0, np.float32), "bias": np.zeros(4, np.float32),
                 "mean": np.zeros(4, np.float32), "var": np.full(4, var, np.float32)}
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                 helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], name="bn")]
        return _model(nodes, inits, ["y"])

    f = make_fp16_model(bn_model(9.8e7), {"x": 1.0, "c": 1.0, "y": 1.0}, tail=False)
    why = {k.node: (k.rule, k.reason) for k in f.kept}
    assert why == {"bn": ("range", "reads constant 'var' holds 9.8e+07 (FP16 ends at 65504)")}
    x = np.random.default_rng(1).random((1, 4, 8, 8), dtype=np.float32)
    ref = ort.InferenceSession(bn_model(9.8e7).SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = Fp16Runner(f.model).run({"x": x})["y"]
    assert np.isfinite(got).all() and np.abs(got).max() > 0.5 * np.abs(ref).max()
    assert not make_fp16_model(bn_model(1.0), {"x": 1.0, "c": 1.0, "y": 1.0}, tail=False).kept


def test_the_emulation_runs_a_fixed_batch_model_a_batch_at_a_time():
    """ddddocr's detector takes exactly one image: the evaluation hands its runners several at once."""
    m = make_fp16_model(conv_block(), AMAX).model  # input 'x' fixed at batch 1
    r = Fp16Runner(m)
    assert r.fixed == 1
    x = np.random.default_rng(2).random((3, 4, 8, 8), dtype=np.float32)
    got = r.run({"x": x})
    for k in range(3):
        one = r.run({"x": x[k:k + 1]})
        assert all(np.array_equal(got[o][k:k + 1], one[o]) for o in got)


def test_initializers_listed_as_inputs_stay_weights():
    """An old exporter (IR 4, PyTorch 1.2) lists every initializer among the graph inputs as well, an unused
    int64 `num_batches_tracked` among them. The FP16+INT8 model drops or replaces such initializers (unused, or
    copied to FP16); their input entries must go with them, or ONNX Runtime asks for them as data to feed."""
    m = conv_block()
    tracked = numpy_helper.from_array(np.array(3, np.int64), "bn.num_batches_tracked")
    m.graph.initializer.append(tracked)
    for t in m.graph.initializer:
        m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    m.ir_version = 4
    f = make_fp16_model(m, AMAX, label="old-export")
    inits = {t.name: t.data_type for t in f.model.graph.initializer}
    for gi in f.model.graph.input:
        assert gi.name == "x" or inits.get(gi.name) == gi.type.tensor_type.elem_type, gi.name
    s = ort.InferenceSession(emulated(f.model).SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == ["x"]
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    assert np.isfinite(Fp16Runner(f.model).run({"x": x})["y"]).all()
