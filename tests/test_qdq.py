"""Q/DQ placement and numerics: exact against hand-computed int8."""
import numpy as np
import onnx
import pytest

from calib.quantize.qdq import Exclusions, count_qdq, excluded_from, insert_qdq, quantized_inputs
from calib.runners.onnxruntime import OrtRunner
from conftest import conv_relu_gap, single_conv


def test_single_conv_matches_hand_computed_int8(tmp_path):
    w = np.array([[[[0.5, -0.25], [1.0, 0.125]]], [[[2.0, 0.0], [-1.0, 0.3]]]], np.float32)  # [2,1,2,2]
    m = onnx.load(str(single_conv(tmp_path / "c.onnx", w)))
    x = np.array([[[[0.1, 0.7], [-0.33, 1.27]]]], np.float32)
    q = insert_qdq(m, {"input": 1.27})
    got = OrtRunner(q, optimize=False).run({"input": x})["out"]
    sx = np.float32(1.27 / 127)
    xq = np.clip(np.rint(x / sx), -127, 127) * sx
    sw = np.abs(w).reshape(2, -1).max(1) / 127  # per output channel
    wq = np.clip(np.rint(w / sw[:, None, None, None]), -127, 127) * sw[:, None, None, None]
    want = np.einsum("nchw,ochw->no", xq, wq).reshape(1, 2, 1, 1)
    assert np.allclose(got, want, atol=1e-6)
    assert not np.allclose(got, np.einsum("nchw,ochw->no", x, w).reshape(1, 2, 1, 1), atol=1e-4)


def test_placement_follows_tensorrt(tmp_path):
    m = onnx.load(str(conv_relu_gap(tmp_path / "t.onnx")))
    q = quantized_inputs(m)
    names = [(m.graph.node[n].name, i, k) for n, i, k in q]
    assert ("conv1", 0, "act") in names and ("conv1", 1, "weight") in names
    assert ("pool1", 0, "act") in names and ("gap", 0, "act") in names
    assert ("add1", 1, "act") in names  # residual input, not the Conv output
    assert ("fc", 0, "act") in names and ("fc", 1, "weight") in names
    assert not any(n == "relu1" for n, _, _ in names)


def test_exclusions_and_shared_pairs(tmp_path):
    m = onnx.load(str(conv_relu_gap(tmp_path / "t.onnx")))
    amax = {t: 1.0 for t in ["input", "relu1", "pool1", "add1", "flat"]}
    full = insert_qdq(m, amax)
    onnx.checker.check_model(full)
    # pool1 feeds conv2 and add1 through one shared pair
    assert sum(1 for n in full.graph.node if n.name == "pool1_QuantizeLinear") == 1
    fewer = insert_qdq(m, amax, excluded_from(["fc", "op:MaxPool"]))
    # fc: its input, its weight and the Flatten input that carries fc's input scale; MaxPool: its input
    assert count_qdq(fewer) == count_qdq(full) - 4
    assert Exclusions(("conv*",)).excludes(m.graph.node[0])


def test_qdq_model_runs_close_to_fp32(tmp_path, tiny_data):
    p = conv_relu_gap(tmp_path / "t.onnx")
    x = np.load(tiny_data)
    ref = OrtRunner(p).run({"input": x})["logits"]
    from calib.calibrate import calibrate

    res = calibrate(p, x, ["minmax"])
    got = OrtRunner(insert_qdq(onnx.load(str(p)), res.amax["minmax"])).run({"input": x})["logits"]
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert 1e-4 < err < 0.05


def test_low_opset_is_converted_not_refused(tmp_path):
    """Below opset 13 the Q/DQ model is made of a converted copy (tests/test_opset.py has the rules)."""
    m = onnx.load(str(conv_relu_gap(tmp_path / "t.onnx")))
    m.opset_import[0].version = 11
    q = insert_qdq(m, {t: 1.0 for t in ["input", "relu1", "pool1", "add1", "flat"]})
    assert q.opset_import[0].version == 13 and m.opset_import[0].version == 11
    assert {p.key: p.value for p in q.metadata_props}["calib.converted_from_opset"] == "11"


def test_like_engine_leaves_the_implicit_engines_float_layers_without_qdq(tmp_path):
    """The real implicit engine of MobileNetV2 (H200, TensorRT 8.6) ran its 7x7 tail in FP16: a Q/DQ model made
    --like-engine has no Q/DQ on exactly those four layers and the same Q/DQ everywhere else."""
    import onnx

    from conftest import golden
    from test_cli import invoke

    d = golden("mobilenet_v2")
    model, cache, side = d / "mobilenet_v2_imagenet.onnx", d / "entropy2.cache", d / "implicit-percentile.engine.json"
    r_all = invoke("cache", "convert", cache, "--model", model, "--to", "qdq", "-o", tmp_path / "all.onnx")
    r_like = invoke("cache", "convert", cache, "--model", model, "--to", "qdq", "--like-engine", side,
                    "-o", tmp_path / "like.onnx")
    assert r_all.exit_code == 0 and r_like.exit_code == 0, r_like.output
    assert "4 layers left in float" in r_like.output

    def quantized(path):
        g = onnx.load(path).graph
        dq = {n.output[0] for n in g.node if n.op_type == "DequantizeLinear"}
        return {n.name for n in g.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                and any(i in dq for i in n.input)}

    tail = {"/features/features.17/conv/conv.2/Conv", "/features/features.18/features.18.0/Conv",
            "/GlobalAveragePool", "/classifier/classifier.1/Gemm"}
    q_all, q_like = quantized(tmp_path / "all.onnx"), quantized(tmp_path / "like.onnx")
    assert tail <= q_all and not tail & q_like
    assert q_all - q_like == tail | {"/Flatten"}  # the Flatten between pool and Gemm carried the pool's scale


def test_like_engine_refuses_an_engine_of_another_model(tiny_model, tiny_data, tmp_path):
    from conftest import golden
    from test_cli import invoke

    assert invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path, "--algo", "minmax").exit_code == 0
    side = golden("mobilenet_v2") / "implicit-percentile.engine.json"
    r = invoke("cache", "convert", tmp_path / "minmax.cache", "--model", tiny_model, "--to", "qdq", "--like-engine",
               side, "-o", tmp_path / "q.onnx")
    assert r.exit_code != 0 and "name none of the model's nodes" in r.output and r.output.count("\n") == 1
    assert not (tmp_path / "q.onnx").exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"layers": 3}')
    r = invoke("cache", "convert", tmp_path / "minmax.cache", "--model", tiny_model, "--to", "qdq", "--like-engine",
               bad, "-o", tmp_path / "q.onnx")
    assert r.exit_code != 0 and "bad.json: holds no engine inspector layers" in r.output
