"""Weights that are constants without being initializers are quantized per channel like one (Q/DQ model and
simulations); the Q/DQ writer counts weighted layers and quantized weights and refuses float weights."""
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli import main
from calib.deploy import precision as pr
from calib.deploy.simulate import simulated_model
from calib.errors import ModelError
from calib.quantize.cache import write_cache
from calib.quantize.coverage import check_float_weights, weight_coverage
from calib.quantize.qdq import insert_qdq, quantized_inputs
from calib.quantize.weights import FOLDED
from calib.runners.onnxruntime import OrtRunner
from weights_graphs import two_convs, weight

AMAX = {"input": 3.0, "c1": 6.0, "r1": 6.0, "out": 9.0}
PATHS = ["constant", "identity", "cast", "reshape", "transpose", "chain"]
X = np.random.default_rng(3).normal(size=(2, 4, 6, 6)).astype(np.float32)


def _run(model) -> np.ndarray:
    return OrtRunner(model, optimize=False).run({"input": X})["out"]


def _weight_dq(q, layer: str, index: int = 1):
    """The DequantizeLinear feeding input `index` of node `layer`, and its scale's values."""
    made = {o: n for n in q.graph.node for o in n.output}
    node = next(n for n in q.graph.node if n.name == layer)
    dq = made[node.input[index]]
    assert dq.op_type == "DequantizeLinear", (layer, node.input[index])
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    return dq, inits[dq.input[1]]


def _axis(node):
    return next((a.i for a in node.attribute if a.name == "axis"), None)


@pytest.mark.parametrize("how", PATHS)
def test_a_weight_behind_nodes_is_quantized_per_channel_like_an_initializer(how):
    m, base = two_convs(how), two_convs("initializer")
    conv1 = [n.name for n in m.graph.node].index("conv1")
    assert (conv1, 1, "weight") in quantized_inputs(m)
    q, qb = insert_qdq(m, AMAX), insert_qdq(base, AMAX)
    onnx.checker.check_model(q)
    dq, scale = _weight_dq(q, "conv1")
    want = np.abs(weight(0)).max(axis=(1, 2, 3)) / 127  # one scale per output channel
    assert _axis(dq) == 0 and scale.shape == (4,) and np.allclose(scale, want, rtol=1e-6)
    assert np.array_equal(scale, _weight_dq(qb, "conv1")[1])
    assert np.array_equal(_run(q), _run(qb))  # the same INT8 model as with an initializer
    assert not any(n.op_type in FOLDED for n in q.graph.node)  # the nodes that made the weight are gone
    assert {t.name for t in q.graph.initializer} == {t.name for t in qb.graph.initializer} - {"w1"} | {"w1_folded"}
    cov = weight_coverage(q)
    assert (cov.layers, cov.quantized, cov.float_weights) == (2, 2, ())
    q8 = insert_qdq(m, AMAX, int8_weights=True)  # INT8 initializers behind a DequantizeLinear: the same values
    assert np.array_equal(_run(q8), _run(qb))
    assert numpy_helper.to_array(next(t for t in q8.graph.initializer if t.name == "w1_int8")).dtype == np.int8


@pytest.mark.parametrize("how", PATHS)
def test_the_simulations_quantize_them_too(how):
    m, base = two_convs(how), two_convs("initializer")
    fp32 = _run(m)
    for rules in (pr.implicit_rules, pr.explicit_rules, None):  # None: calib's placement
        pm, pm_base = (rules(m), rules(base)) if rules else (None, None)
        got, want = _run(simulated_model(m, AMAX, pm)), _run(simulated_model(base, AMAX, pm_base))
        assert np.array_equal(got, want), (how, rules)
        assert not np.allclose(got, fp32, atol=1e-5)
    sim = simulated_model(m, AMAX, pr.implicit_rules(m))
    assert _axis(_weight_dq(sim, "conv1")[0]) == 0


@pytest.mark.parametrize("how", ["initializer", "constant"])
def test_a_weight_shared_by_two_convs_is_quantized_for_both(how):
    q = insert_qdq(two_convs(how, shared=True), AMAX)
    (dq1, s1), (dq2, s2) = _weight_dq(q, "conv1"), _weight_dq(q, "conv2")
    assert np.allclose(s1, np.abs(weight(0)).max(axis=(1, 2, 3)) / 127) and np.array_equal(s1, s2)
    assert weight_coverage(q).quantized == 2
    assert np.array_equal(_run(q), _run(insert_qdq(two_convs("initializer", shared=True), AMAX)))


def test_a_weight_shared_along_two_axes_gets_a_pair_per_axis():
    """Gemm(transB=1) reads W's rows as output channels, MatMul its columns: each gets its own scales."""
    w = np.random.default_rng(5).normal(size=(4, 4)).astype(np.float32) * np.arange(1, 5, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], name="w_const", value=numpy_helper.from_array(w, "wv")),
         helper.make_node("Gemm", ["input", "w"], ["g"], name="gemm", transB=1),
         helper.make_node("MatMul", ["g", "w"], ["out"], name="mm")],
        "shared_axes", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    q = insert_qdq(m, {"input": 2.0, "g": 40.0})
    (dg, sg), (dm, sm) = _weight_dq(q, "gemm"), _weight_dq(q, "mm")
    assert _axis(dg) == 0 and np.allclose(sg, np.abs(w).max(axis=1) / 127)
    assert _axis(dm) == 1 and np.allclose(sm, np.abs(w).max(axis=0) / 127)
    x = np.random.default_rng(6).normal(size=(2, 4)).astype(np.float32)
    got = OrtRunner(q, optimize=False).run({"input": x})["out"]

    def fq(v, s):  # fake quantization, as a Q/DQ pair computes it
        return np.clip(np.rint(v / s), -127, 127) * s

    sg, sm = (np.abs(w).max(axis=1) / 127).astype(np.float32), (np.abs(w).max(axis=0) / 127).astype(np.float32)
    gq = fq(fq(x, np.float32(2 / 127)) @ fq(w, sg[:, None]).T, np.float32(40 / 127))
    assert np.allclose(got, gq @ fq(w, sm[None, :]), rtol=1e-5, atol=1e-5)


def _weight_normed(opset: int = 13):
    """conv1's weight made by a Mul of two constants (a weight norm): not a chain calib folds."""
    m = two_convs("initializer", opset=opset)
    w = next(t for t in m.graph.initializer if t.name == "w1")
    w.name = "w1_v"
    m.graph.initializer.append(numpy_helper.from_array(np.ones((4, 1, 1, 1), np.float32), "w1_g"))
    m.graph.node.insert(0, helper.make_node("Mul", ["w1_v", "w1_g"], ["w1"], name="w1_norm"))
    return m


def test_a_layer_left_with_a_float_weight_is_counted_and_refused():
    m = _weight_normed()
    cov = weight_coverage(insert_qdq(m, AMAX))  # no scale for w1: its Q/DQ input stays, its weight is float
    assert (cov.layers, cov.quantized) == (2, 1) and cov.float_weights[0][:2] == ("conv1", "w1")
    assert "made by Mul 'w1_norm'" in cov.float_weights[0][2]
    with pytest.raises(ModelError, match=r"m.onnx: layer 'conv1' gets Q/DQ on its input but keeps a float weight"
                                         r".*Mul 'w1_norm'.*1 of 2 layer weights quantized.*--allow-float-weights"):
        check_float_weights(cov, "m.onnx", False, "--allow-float-weights")
    check_float_weights(cov, "m.onnx", True, "--allow-float-weights")  # accepted
    full = weight_coverage(insert_qdq(m, {**AMAX, "w1": 2.0}))  # a scale for it: quantized as a tensor
    assert (full.quantized, full.float_weights) == (2, ())


def _invoke(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def test_cache_convert_prints_the_counts_and_refuses_a_float_weight(tmp_path):
    paddle = tmp_path / "paddle.onnx"
    onnx.save(two_convs("constant"), str(paddle))
    write_cache(tmp_path / "c.cache", AMAX)
    r = _invoke("cache", "convert", tmp_path / "c.cache", "--model", paddle, "--to", "qdq", "-o", tmp_path / "p.onnx")
    assert r.exit_code == 0 and "(4 Q/DQ pairs; 2 of 2 layer weights quantized; opset 13)" in r.output, r.output
    normed = tmp_path / "normed.onnx"
    onnx.save(_weight_normed(), str(normed))
    out = tmp_path / "n.onnx"
    r = _invoke("cache", "convert", tmp_path / "c.cache", "--model", normed, "--to", "qdq", "--allow-partial",
                "-o", out)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "layer 'conv1' gets Q/DQ" in r.output, r.output
    assert "--allow-float-weights writes the model anyway" in r.output and not out.exists()
    r = _invoke("cache", "convert", tmp_path / "c.cache", "--model", normed, "--to", "qdq", "--allow-partial",
                "--allow-float-weights", "-o", out)
    assert r.exit_code == 0 and "1 of 2 layer weights quantized, 1 with a Q/DQ input left with a float weight" \
        in r.output and out.is_file(), r.output


def test_a_recipe_refuses_a_float_weight_before_the_pass_unless_its_key_accepts_it(tmp_path):
    from PIL import Image

    m = two_convs("constant")
    const = m.graph.node[0]  # a sparse Constant: not a value calib folds
    w = weight(0)
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(w.reshape(-1), "w1_values"),
                                       numpy_helper.from_array(np.arange(w.size, dtype=np.int64), "w1_indices"),
                                       list(w.shape))
    del const.attribute[:]
    const.attribute.append(helper.make_attribute("sparse_value", sparse))
    onnx.save(m, str(tmp_path / "m.onnx"))
    (tmp_path / "imgs").mkdir()
    for i in range(2):
        Image.fromarray(np.zeros((6, 6, 3), np.uint8)).save(tmp_path / "imgs" / f"{i}.png")
    p = tmp_path / "r.yaml"
    p.write_text("name: r\nmodel: m.onnx\ncalibration_data: {kind: folder, path: imgs}\n"
                 "preprocess: {resize: [6, 6], mode: exact}\noutput: out\n")
    r = CliRunner().invoke(main, ["--quiet", "run", str(p)])
    assert r.exit_code == 2 and "layer 'conv1' gets Q/DQ on its input but keeps a float weight" in r.output, r.output
    assert "calibration.allow_float_weights: true (in " in r.output and not (tmp_path / "out").exists()
    r = CliRunner().invoke(main, ["--quiet", "run", str(p), "--set", "calibration.allow_float_weights=true"])
    assert "keeps a float weight" not in r.output  # past the check (the tiny model's channels are not images')
