"""Models below opset 13: converted in memory with their names kept wherever calib inserts Q/DQ, the Q/DQ model
says its opset, caches made for the original file stay valid; an op that blocks the conversion is named."""
import hashlib

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli import main
from calib.deploy import precision as pr
from calib.deploy.simulate import simulated_model
from calib.errors import ModelError
from calib.quantize.opset import _blocking_op, at_qdq_opset, check_convertible, describe_opset
from calib.quantize.qdq import insert_qdq
from calib.runners.onnxruntime import OrtRunner

X = np.random.default_rng(2).random((4, 3, 8, 8), dtype=np.float32)


def old_model(opset: int):
    """input [N,3,8,8] -> conv1 -> Relu -> up (Upsample at 9, Resize at 11) -> MaxPool -> conv2 -> Clip(0, 6)
    -> GlobalAveragePool -> Flatten -> Gemm -> Softmax, written as an opset 9 or 11 exporter writes it."""
    rng = np.random.default_rng(0)
    init = numpy_helper.from_array
    inits = [init(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w1"),
             init(rng.normal(size=(6, 4, 3, 3)).astype(np.float32) * 0.3, "w2"),
             init(rng.normal(size=(5, 6)).astype(np.float32), "fc_w"), init(np.zeros(5, np.float32), "fc_b"),
             init(np.array([1, 1, 2, 2], np.float32), "scales")]
    if opset < 11:
        up = helper.make_node("Upsample", ["relu1", "scales"], ["up"], name="up", mode="nearest")
        clip = helper.make_node("Clip", ["conv2"], ["clip"], name="clip", min=0.0, max=6.0)
    else:
        inits += [init(np.zeros(0, np.float32), "roi"), init(np.array(0, np.float32), "lo"),
                  init(np.array(6, np.float32), "hi")]
        up = helper.make_node("Resize", ["relu1", "roi", "scales"], ["up"], name="up", mode="nearest")
        clip = helper.make_node("Clip", ["conv2", "lo", "hi"], ["clip"], name="clip")
    nodes = [helper.make_node("Conv", ["input", "w1"], ["conv1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"), up,
             helper.make_node("MaxPool", ["up"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["pool", "w2"], ["conv2"], name="conv2", pads=[1, 1, 1, 1]), clip,
             helper.make_node("GlobalAveragePool", ["clip"], ["gap"], name="gap"),
             helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
             helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1)]
    g = helper.make_graph(nodes, f"opset{opset}", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=6)
    onnx.checker.check_model(m)
    return m


def _fp32(model) -> dict:
    return OrtRunner(model, expose=["up", "pool", "logits"], optimize=False).run({"input": X})


def _amax(model) -> dict:
    ref = OrtRunner(model, expose=[n.output[0] for n in model.graph.node], optimize=False).run({"input": X})
    return {k: float(np.abs(v).max()) for k, v in ref.items()} | {"input": float(X.max())}


@pytest.mark.parametrize("opset", [9, 11])
def test_conversion_keeps_every_name_and_value(opset):
    m = old_model(opset)
    c = at_qdq_opset(m, "old.onnx")
    assert c.opset_import[0].version == 13 and m.opset_import[0].version == opset  # the original is untouched
    made = {t for n in c.graph.node for t in n.output}
    assert {t for n in m.graph.node for t in n.output} <= made  # opset 9's Upsample output is 'up', not '_v_10'
    assert {n.name for n in m.graph.node} <= {n.name for n in c.graph.node}
    assert next(n for n in c.graph.node if n.name == "up").op_type == "Resize"
    a, b = _fp32(m), _fp32(c)
    for k in a:
        assert np.allclose(a[k], b[k], atol=1e-6), k
    assert at_qdq_opset(c) is c  # opset 13 already: nothing done


@pytest.mark.parametrize("opset", [9, 11])
def test_the_qdq_model_and_the_simulations_of_an_old_model_run(opset):
    m = old_model(opset)
    amax = _amax(m)
    q = insert_qdq(m, amax, label="old.onnx")
    onnx.checker.check_model(q)
    assert describe_opset(q) == f"opset 13, converted from {opset}"
    assert {p.key: p.value for p in q.metadata_props} == {"calib.opset": "13", "calib.converted_from_opset": str(opset)}
    made = {o: n for n in q.graph.node for o in n.output}
    conv1 = next(n for n in q.graph.node if n.name == "conv1")
    assert made[conv1.input[1]].op_type == "DequantizeLinear"  # per channel: the axis opset 9 cannot say
    assert next(a.i for a in made[conv1.input[1]].attribute if a.name == "axis") == 0
    assert any(n.op_type == "QuantizeLinear" and n.input[0] == "up" for n in q.graph.node)  # the cache's name
    ref = _fp32(m)["logits"]
    got = OrtRunner(q, expose=["logits"], optimize=False).run({"input": X})["logits"]
    assert 0 < np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
    for pm in (pr.implicit_rules(m), pr.explicit_rules(m)):
        sim = simulated_model(m, amax, pm)
        assert sim.opset_import[0].version == 13
        out = OrtRunner(sim, expose=["logits"], optimize=False).run({"input": X})["logits"]
        assert 0 < np.abs(out - ref).max() < 0.05 * np.abs(ref).max()


def test_calibrate_evaluate_convert_an_opset_9_file(tmp_path):
    path, data = tmp_path / "old.onnx", tmp_path / "x.npy"
    onnx.save(old_model(9), str(path))
    np.save(data, X)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()

    def run(*args):
        return CliRunner().invoke(main, ["--quiet", *map(str, args)])

    r = run("calibrate", path, "--data", data, "--algo", "minmax", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    cache = tmp_path / "c" / "minmax.cache"
    r = run("evaluate", path, "--cache", cache, "--data", data, "-o", tmp_path / "rep")  # the sidecar's hash holds
    assert r.exit_code == 0, r.output
    r = run("cache", "convert", cache, "--model", path, "--to", "qdq", "-o", tmp_path / "q.onnx")
    assert r.exit_code == 0 and "opset 13, converted from 9" in r.output, r.output
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert q.opset_import[0].version == 13 and describe_opset(q) == "opset 13, converted from 9"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # the user's file is what it was


def _image_scaler_model():
    m = old_model(9)
    m.graph.node.insert(0, helper.make_node("ImageScaler", ["input"], ["scaled"], name="prep", scale=0.5,
                                            bias=[0.0, 0.0, 0.0]))
    m.graph.node[1].input[0] = "scaled"
    return m


def test_an_op_that_blocks_the_conversion_is_named_before_the_pass(tmp_path):
    with pytest.raises(ModelError, match=r"^old.onnx: opset 9 cannot be converted to opset 13.*: op ImageScaler "
                                         r"\('prep'\) has no opset 13 version; re-export"):
        check_convertible(_image_scaler_model(), "old.onnx")
    check_convertible(old_model(9), "old.onnx")
    path, data = tmp_path / "scaler.onnx", tmp_path / "x.npy"
    onnx.save(_image_scaler_model(), str(path))
    np.save(data, X)
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(path), "--data", str(data), "-o", str(tmp_path / "c")])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "op ImageScaler ('prep')" in r.output, r.output
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_a_converter_error_names_the_op_it_glues_to_the_versions():
    m = _image_scaler_model()
    err = RuntimeError("convert.cc:101: convert_graph: Assertion failed: Op '%s' has no registered schema; cannot "
                       "convert it from version %lld to %lld.ImageScaler913")
    assert _blocking_op(m, err) == "op ImageScaler"
    assert _blocking_op(m, RuntimeError("something else\nmore")) == "the converter says: something else"
