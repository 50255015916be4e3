"""Q/DQ placement rules and TensorRT's scale ties on small graphs with known answers."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from calib.quantize.placement import place, residual_adds
from calib.quantize.qdq import count_qdq, insert_qdq
from calib.quantize.ties import tie_amax
from calib.runners.onnxruntime import OrtRunner

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=13):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph(nodes, "g", ins, outs, [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _w(o, i, k=1):
    return RNG.normal(0, 0.3, (o, i, k, k)).astype(np.float32)


def _conv(x, w, y, k=1):
    return helper.make_node("Conv", [x, w], [y], name=y, pads=[k // 2] * 4)


def _sites(m, stem_output=False, **kw):
    """The placement's sites (the stem rule off unless asked: its own test below)."""
    return {(m.graph.node[s.node].name, s.input): (s.kind, s.scale_of)
            for s in place(m, stem_output=stem_output, **kw)}


def _groups(m):
    return {(m.graph.node[s.node].name, s.input): s.group for s in place(m, stem_output=False)}


def inverted_residual(swap=False):
    """x0 = Conv(in); e = Clip(Conv(x0)); p = Conv(e); Add(x0, p): both inputs come from Convs (MobileNetV2)."""
    nodes = [_conv("input", "w0", "x0"), _conv("x0", "w1", "e0"),
             helper.make_node("Clip", ["e0", "lo", "hi"], ["e"], name="clip"), _conv("e", "w2", "p"),
             helper.make_node("Add", ["p", "x0"] if swap else ["x0", "p"], ["y"], name="add"),
             _conv("y", "w3", "out")]
    inits = [("w0", _w(4, 3)), ("w1", _w(8, 4)), ("w2", _w(4, 8)), ("w3", _w(2, 4)),
             ("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32))]
    return _model(nodes, [("input", [1, 3, 4, 4])], ["out"], inits)


def test_residual_add_quantizes_the_skip_connection_when_both_inputs_come_from_convs():
    s = _sites(inverted_residual())
    assert ("add", 0) in s and ("add", 1) not in s  # x0, the skip, not the projection Conv's output
    s = _sites(inverted_residual(swap=True))
    assert ("add", 1) in s and ("add", 0) not in s
    assert not any(name == "clip" for name, _ in s)  # nothing between a Conv and its activation


def test_silu_branch_is_a_conv_backbone():
    nodes = [_conv("input", "w0", "x"), _conv("x", "w1", "c"), helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["m"], name="silu"),
             helper.make_node("Add", ["m", "x"], ["y"], name="add"), _conv("y", "w2", "out")]
    m = _model(nodes, [("input", [1, 3, 4, 4])], ["out"], [("w0", _w(4, 3)), ("w1", _w(4, 4)), ("w2", _w(2, 4))])
    s = _sites(m, residual_branch="float")
    assert ("add", 1) in s and ("add", 0) not in s
    assert not any(name in ("sig", "silu") for name, _ in s)
    assert _sites(m) == _sites(m, residual_branch="conv") != s  # the default quantizes the Conv's output


def test_residual_branch_through_an_activation_quantized_before_or_after_it_on_request():
    """YOLOv8's bottleneck (Conv -> SiLU -> Add with the skip): TensorRT 8.6 does not fuse the Add into the Conv
    there. conv: the Conv's output gets Q/DQ on both its readers (Sigmoid and Mul), one pair; act: the SiLU's output
    at the Add. A Conv feeding its Add directly (the inverted residual) gets nothing more either way."""
    nodes = [_conv("input", "w0", "x"), _conv("x", "w1", "c"), helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["m"], name="silu"),
             helper.make_node("Add", ["m", "x"], ["y"], name="add"), _conv("y", "w2", "out")]
    m = _model(nodes, [("input", [1, 3, 4, 4])], ["out"], [("w0", _w(4, 3)), ("w1", _w(4, 4)), ("w2", _w(2, 4))])
    sites = lambda **kw: {(m.graph.node[x.node].name, x.input): x.tensor for x in place(m, stem_output=False, **kw)}
    base = sites(residual_branch="float")
    conv = sites(residual_branch="conv")
    assert sites() == conv  # the default
    assert set(conv) - set(base) == {("sig", 0), ("silu", 0)} and conv[("sig", 0)] == conv[("silu", 0)] == "c"
    act = sites(residual_branch="act")
    assert set(act) - set(base) == {("add", 0)} and act[("add", 0)] == "m"
    amax = {t: 2.0 for t in ("input", "x", "c", "s", "m", "y")}
    plain = count_qdq(insert_qdq(m, amax, residual_branch="float"))
    assert count_qdq(insert_qdq(m, amax)) == count_qdq(insert_qdq(m, amax, residual_branch="conv")) == plain + 1
    assert count_qdq(insert_qdq(m, amax, residual_branch="act")) == plain + 1
    ir = inverted_residual()
    for where in ("conv", "act"):
        assert len(place(ir, stem_output=False, residual_branch=where)) == len(place(ir, stem_output=False))
    with pytest.raises(ValueError, match="not one of"):
        place(m, residual_branch="both")
    from calib.quantize.placement import RESIDUAL_BRANCH
    from calib.recipe import CalibrationSpec

    assert CalibrationSpec().residual_branch == RESIDUAL_BRANCH == "conv"  # a recipe's default is convert's
    assert residual_adds(m) == ["add"] and residual_adds(ir) == []
    assert residual_adds(m, lambda node: node.name == "add") == []


def test_cache_convert_says_which_residual_placement_it_wrote(tmp_path):
    """The bottleneck model through calib calibrate and cache convert: the line names the Add and the option."""
    from click.testing import CliRunner

    from calib.cli import main

    nodes = [_conv("input", "w0", "x"), _conv("x", "w1", "c"), helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["m"], name="silu"),
             helper.make_node("Add", ["m", "x"], ["y"], name="add"), _conv("y", "w2", "out")]
    m = _model(nodes, [("input", [1, 3, 4, 4])], ["out"], [("w0", _w(4, 3)), ("w1", _w(4, 4)), ("w2", _w(2, 4))])
    import onnx

    onnx.save(m, str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", RNG.normal(0, 1, (16, 3, 4, 4)).astype(np.float32))
    run = lambda *a: CliRunner().invoke(main, [str(x) for x in a])
    assert run("calibrate", tmp_path / "m.onnx", "--data", tmp_path / "x.npy", "--out", tmp_path).exit_code == 0
    said = {}
    for where in ("float", "conv", "act"):
        r = run("cache", "convert", tmp_path / "minmax.cache", "--model", tmp_path / "m.onnx", "--to", "qdq",
                "--residual-branch", where, "-o", tmp_path / f"{where}.onnx")
        assert r.exit_code == 0, r.output
        said[where] = next(line for line in r.output.splitlines() if "residual Add" in line)
        q = onnx.load(str(tmp_path / f"{where}.onnx"))
        quantized = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
        assert ("c" in quantized) == (where == "conv") and ("m" in quantized) == (where == "act")
    assert "1 residual Add behind an activation (add): Conv branch kept float (--residual-branch float)" in said["float"]
    assert "The default, --residual-branch conv, quantizes the Conv's output" in said["float"]
    assert "quantized at the Conv's output (--residual-branch conv (the default)); --residual-branch float" in said["conv"]
    assert "quantized at the activation's output (--residual-branch act); --residual-branch float" in said["act"]
    r = run("cache", "convert", tmp_path / "minmax.cache", "--model", tmp_path / "m.onnx", "--to", "qdq",
            "-o", tmp_path / "default.onnx")
    assert "(--residual-branch conv (the default))" in r.output


def test_decoder_add_without_a_conv_input_stays_float():
    """YOLO box decoding: xy = Sigmoid(reshaped head) * stride + grid; x2y2 = xy + wh."""
    nodes = [_conv("input", "w0", "h"), helper.make_node("Reshape", ["h", "shape"], ["r"], name="reshape"),
             helper.make_node("Sigmoid", ["r"], ["xy"], name="sig"), helper.make_node("Exp", ["r"], ["wh"], name="exp"),
             helper.make_node("Add", ["xy", "wh"], ["x2y2"], name="x2y2"),
             helper.make_node("Mul", ["xy", "stride"], ["xys"], name="mul")]
    m = _model(nodes, [("input", [1, 3, 4, 4])], ["x2y2", "xys"],
               [("w0", _w(4, 3)), ("shape", np.array([1, 4, 16], np.int64)), ("stride", np.array(8, np.float32))])
    s = _sites(m)
    assert {n for n, _ in s} == {"h"}  # the head Conv's input and weight, nothing after it
    assert not any(name in ("x2y2", "mul", "sig", "exp", "reshape") for name, _ in s)


def upsample_concat():
    """a = LeakyRelu(Conv(in)) 4x4; mp = MaxPool(a) 2x2; b = Resize(LeakyRelu(Conv(mp))) 4x4; c = Concat(b, a);
    Conv(c); and Gemm(Reshape(mp))."""
    nodes = [_conv("input", "w0", "a0"), helper.make_node("LeakyRelu", ["a0"], ["a"], name="lr0", alpha=0.1),
             helper.make_node("MaxPool", ["a"], ["mp"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             _conv("mp", "w1", "b0"), helper.make_node("LeakyRelu", ["b0"], ["b1"], name="lr1", alpha=0.1),
             helper.make_node("Resize", ["b1", "", "scales"], ["b"], name="up", mode="nearest"),
             helper.make_node("Concat", ["b", "a"], ["c"], name="cat", axis=1),
             _conv("c", "w2", "out"),
             helper.make_node("Reshape", ["mp", "flat"], ["mpr"], name="reshape"),
             helper.make_node("Gemm", ["mpr", "wg"], ["logits"], name="fc", transB=1)]
    inits = [("w0", _w(4, 3)), ("w1", _w(4, 4)), ("w2", _w(2, 8)), ("scales", np.array([1, 1, 2, 2], np.float32)),
             ("flat", np.array([1, -1], np.int64)), ("wg", RNG.normal(0, 0.3, (5, 16)).astype(np.float32))]
    return _model(nodes, [("input", [1, 3, 4, 4])], ["out", "logits"], inits)


def test_concat_inputs_and_value_moving_layers_share_the_output_scale():
    s = _sites(upsample_concat())
    assert s[("cat", 0)] == ("act", "c") and s[("cat", 1)] == ("act", "c")
    assert s[("up", 0)] == ("act", "c")  # through the Resize, the Concat's scale reaches the LeakyRelu output
    assert s[("out", 0)] == ("act", "c")
    assert s[("pool", 0)][0] == "act" and s[("reshape", 0)][0] == "act"
    assert not any(name in ("lr0", "lr1") for name, _ in s)
    groups = _groups(upsample_concat())
    one = {groups[k] for k in [("cat", 0), ("cat", 1), ("up", 0), ("out", 0), ("pool", 0), ("reshape", 0), ("fc", 0)]}
    assert one == {("a", "b", "b1", "c", "mp", "mpr")}  # joined through the Concat and the value-moving layers
    assert groups[("a0", 0)] == ()  # the first Conv's input is on its own


def test_ties_follow_tensorrt():
    m = upsample_concat()
    amax = {"input": 1.0, "a0": 3.0, "a": 2.0, "b0": 5.0, "b1": 4.0, "b": 4.5, "c": 9.0, "mp": 1.5, "mpr": 7.0}
    t = tie_amax(m, amax)  # a cache, as TensorRT's own EntropyCalibration2 caches have it
    assert t["b"] == 4.0  # nearest Resize output: its input's
    assert t["c"] == 9.0  # Concat output: its own (YOLOv3-tiny's route Concat in TensorRT's cache, the probe)
    assert t["mp"] == 2.0 and t["mpr"] == 2.0  # MaxPool, then Reshape: a chain carries one scale
    assert t["a0"] == 3.0 and t["a"] == 2.0 and t["b1"] == 4.0  # activations keep their own
    assert tie_amax(m, t) == t
    q = tie_amax(m, amax, qdq=True)  # a Q/DQ model: one scale for the Concat and its inputs
    assert q["c"] == 4.0 and q["b"] == 4.0 and q["mpr"] == 2.0
    assert tie_amax(m, q, qdq=True) == q


def test_ties_of_a_model_file_are_worked_out_once(tmp_path, monkeypatch):
    """compute_all's ties come from the pass's parse of the model file (calib.quantize.ties.file_tie_sources), not from
    loading it again; the same answer as from the graph."""
    import os

    from calib.io.files import file_key
    import calib.quantize.ties as ties

    m = upsample_concat()
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    amax = {"input": 1.0, "a0": 3.0, "a": 2.0, "b0": 5.0, "b1": 4.0, "b": 4.5, "c": 9.0, "mp": 1.5, "mpr": 7.0}
    first = ties.file_tie_sources(path, m)
    monkeypatch.setattr(ties, "load_model", lambda p: (_ for _ in ()).throw(AssertionError("loaded again")))
    assert ties.file_tie_sources(path) is first
    assert tie_amax(None, amax, sources=first) == tie_amax(m, amax)
    os.utime(path, ns=(1, 1))  # rewritten: another key
    assert (str(path), file_key(path)) not in ties._FILES
    monkeypatch.undo()
    assert ties.file_tie_sources(path) == first


def test_cache_ties_leave_a_linear_resize_and_a_split_their_own():
    from onnx import helper

    m = upsample_concat()
    up = next(n for n in m.graph.node if n.name == "up")
    next(a for a in up.attribute if a.name == "mode").s = b"linear"
    amax = {"input": 1.0, "a0": 3.0, "a": 2.0, "b0": 5.0, "b1": 4.0, "b": 4.5, "c": 9.0, "mp": 1.5, "mpr": 7.0}
    assert tie_amax(m, amax)["b"] == 4.5 and tie_amax(m, amax, qdq=True)["b"] == 4.0
    g = helper.make_graph([helper.make_node("Split", ["x"], ["y0", "y1"], axis=1, num_outputs=2)], "s",
                          [helper.make_tensor_value_info("x", 1, [1, 4])],
                          [helper.make_tensor_value_info(y, 1, [1, 2]) for y in ("y0", "y1")])
    sm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    t = {"x": 5.0, "y0": 1.0, "y1": 3.0}
    assert tie_amax(sm, t) == t and tie_amax(sm, t, qdq=True) == {"x": 5.0, "y0": 5.0, "y1": 5.0}


def test_one_scale_per_concat_in_the_qdq_model():
    m = upsample_concat()
    amax = {"input": 1.0, "a0": 3.0, "a": 2.0, "b0": 5.0, "b1": 4.0, "b": 4.5, "c": 9.0, "mp": 1.5, "mpr": 7.0}
    q = insert_qdq(m, amax, stem_output=False)  # the stem rule (its own test) would add a0's pair
    scales = {t.name: float(numpy_helper.to_array(t)) for t in q.graph.initializer
              if t.name.endswith("_scale") and not t.dims}
    # b1 -> Resize -> Concat <- a -> MaxPool -> Reshape -> Gemm: one group, one scale (the Concat's, tied: 4.0)
    group = [k for k in scales if k.split("_as_")[0] in ("a", "b", "b1", "mp", "mpr", "c")]
    assert len(group) == 6 and all(np.isclose(scales[k], 4.0 / 127) for k in group)
    assert np.isclose(scales["input_scale"], 1.0 / 127)
    assert count_qdq(q) == 7 + 4  # input, b1, b, a, c, mp, mpr; four weights


def attention():
    """scores = (x Wq)(x Wk)^T / 2 + mask; Softmax; (.)(x Wv): both batched MatMuls quantized, mask Add not."""
    mm = lambda a, b, y: helper.make_node("MatMul", [a, b], [y], name=y)  # noqa: E731
    nodes = [mm("x", "wq", "q"), mm("x", "wk", "k"), mm("x", "wv", "v"),
             helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]), mm("q", "kt", "s0"),
             helper.make_node("Div", ["s0", "two"], ["s1"], name="scale"),
             helper.make_node("Add", ["s1", "mask"], ["s2"], name="mask_add"),
             helper.make_node("Softmax", ["s2"], ["p"], name="softmax", axis=-1), mm("p", "v", "o")]
    inits = [(n, RNG.normal(0, 0.3, (8, 8)).astype(np.float32)) for n in ("wq", "wk", "wv")] + \
        [("two", np.array(2, np.float32))]
    return _model(nodes, [("x", [1, 4, 8]), ("mask", [1, 4, 4])], ["o"], inits)


def test_attention_matmuls_quantized_softmax_and_mask_float():
    s = _sites(attention())
    for name in ("q", "k", "v"):
        assert s[(name, 0)] == ("act", "x") and s[(name, 1)][0] == "weight"
    assert ("s0", 0) in s and ("s0", 1) in s and ("o", 0) in s and ("o", 1) in s
    assert s[("kt", 0)] == ("act", "kt")  # the Transpose carries Q*K^T's input scale back to K
    assert not any(name in ("mask_add", "softmax", "scale") for name, _ in s)


def test_int8_weight_initializers_give_the_same_outputs_and_a_smaller_file():
    m = inverted_residual()
    amax = {"input": 1.0, "x0": 2.0, "e": 6.0, "y": 3.0}
    x = RNG.random((1, 3, 4, 4), dtype=np.float32)
    a = insert_qdq(m, amax)
    b = insert_qdq(m, amax, int8_weights=True)
    assert count_qdq(b) == count_qdq(a) - 4  # no QuantizeLinear on the four weights
    ints = [t for t in b.graph.initializer if t.data_type == TensorProto.INT8 and t.dims and len(t.dims) == 4]
    assert len(ints) == 4
    assert not any(t.name in ("w0", "w1", "w2", "w3") for t in b.graph.initializer)
    ya = OrtRunner(a, optimize=False).run({"input": x})["out"]
    yb = OrtRunner(b, optimize=False).run({"input": x})["out"]
    np.testing.assert_allclose(ya, yb, rtol=0, atol=1e-6)


def test_every_cache_calib_writes_carries_the_ties(tmp_path, tiny_model, tiny_data):
    """MaxPool and Flatten outputs take their inputs' scale in every algorithm's cache, as in TensorRT's own."""
    from calib.calibrate import calibrate
    from calib.quantize.cache import read_cache

    res = calibrate(tiny_model, tiny_data, ["minmax", "entropy", "percentile", "mse"], out=tmp_path)
    for algo, amax in res.amax.items():
        c = read_cache(tmp_path / f"{algo}.cache").scales
        assert c["pool1"] == c["relu1"] and c["flat"] == c["gap"], algo
        assert amax["pool1"] == amax["relu1"]
    gap_own = res.stats.histogram("gap")  # the GlobalAveragePool output keeps its own (smaller) range
    assert res.amax["minmax"]["gap"] == pytest.approx(gap_own.absmax, rel=1e-6)
    assert res.amax["minmax"]["gap"] < res.amax["minmax"]["add1"]


def stem(act="LeakyRelu", channels=3, readers=1):
    """input (channels) -> Conv -> act -> MaxPool -> Conv: YOLOv3-tiny's layer0."""
    nodes = [_conv("input", "w0", "c0"), helper.make_node(act, ["c0"], ["a0"], name="act"),
             helper.make_node("MaxPool", ["a0"], ["p0"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             _conv("p0", "w1", "out")]
    outs = ["out"] + (["c0"] if readers > 1 else [])
    if readers > 1:
        nodes.append(helper.make_node("Relu", ["c0"], ["side"], name="side"))
        outs.append("side")
    return _model(nodes, [("input", [1, channels, 8, 8])], outs, [("w0", _w(4, channels)), ("w1", _w(2, 4))])


def test_stem_output_is_quantized_before_its_leaky_relu_by_default():
    m = stem()
    plain = {(m.graph.node[s.node].name, s.input) for s in place(m, stem_output=False)}
    asked = {(m.graph.node[s.node].name, s.input): s.tensor for s in place(m)}
    assert ("act", 0) not in plain
    assert asked[("act", 0)] == "c0" and set(asked) - plain == {("act", 0)}
    # not a stem (16 channels), not a LeakyRelu, or a Conv output read twice: no pair
    for other in (stem(channels=16), stem(act="Relu"), stem(readers=2)):
        assert not any(other.graph.node[s.node].name == "act" for s in place(other, stem_output=True))
    x = RNG.normal(0, 0.5, (1, 3, 8, 8)).astype(np.float32)
    probe = type(m)()
    probe.CopyFrom(m)
    probe.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("c0", "a0", "p0"))
    seen = OrtRunner(probe).run({"input": x})
    amax = {"input": float(np.abs(x).max()), **{t: float(np.abs(seen[t]).max()) for t in ("c0", "a0", "p0")}}
    q = insert_qdq(m, amax)
    assert count_qdq(q) == count_qdq(insert_qdq(m, amax, stem_output=False)) + 1
    ref = seen["out"]
    got = OrtRunner(q).run({"input": x})["out"]
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()


@pytest.mark.parametrize("where", ["float", "conv"])
def test_recipe_residual_branch_reaches_the_run_q_dq_model(tmp_path, where):
    """calibration.residual_branch in a recipe: `calib run` writes its Q/DQ model with the pair where asked."""
    import json

    import onnx
    from click.testing import CliRunner

    from calib.cli import main

    nodes = [_conv("input", "w0", "x"), _conv("x", "w1", "c"), helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["m"], name="silu"),
             helper.make_node("Add", ["m", "x"], ["y"], name="add"), _conv("y", "w2", "out")]
    onnx.save(_model(nodes, [("input", ["N", 3, 4, 4])], ["out"],
                     [("w0", _w(4, 3)), ("w1", _w(4, 4)), ("w2", _w(2, 4))]), str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", RNG.normal(0, 1, (32, 3, 4, 4)).astype(np.float32))
    (tmp_path / "r.yaml").write_text(
        "name: b\nmodel: m.onnx\ncalibration_data: {kind: npy, path: x.npy, limit: 16}\n"
        "evaluation_data: {kind: npy, path: x.npy, offset: 16}\n"
        f"calibration: {{algorithms: [minmax], batch_size: 8, residual_branch: {where}}}\noutput: out\n")
    r = CliRunner().invoke(main, ["--quiet", "run", str(tmp_path / "r.yaml")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    q = onnx.load(str(tmp_path / "out" / rep["qdq_model"]))
    quantized = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert ("c" in quantized) == (where == "conv") and "x" in quantized
    # the report's rows: every form of the choice run on the same samples, the written one as `minmax qdq`
    choice = next(c for c in rep["placement"]["choices"] if c["choice"] == "residual")
    assert choice["tensors"] == ["add"] and choice["written"] == where
    assert choice["rows"] == {"float": "minmax qdq" if where == "float" else "minmax qdq residual-float",
                              "conv": "minmax qdq" if where == "conv" else "minmax qdq residual-conv",
                              "act": "minmax qdq residual-act"}
    sqnr = {f: rep["summary"]["rows"][n]["out_sqnr_db"] for f, n in choice["rows"].items()}
    assert len(set(sqnr.values())) == 3  # three different models, each really run
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Placement choice: residual Adds behind an activation" in md
    assert f"| `minmax qdq` | {where} (the Q/DQ model written) |" in md
    assert "`calib cache convert --residual-branch act; recipe calibration.residual_branch: act`" in md
    (tmp_path / "bad.yaml").write_text((tmp_path / "r.yaml").read_text().replace(where, "both"))
    r = CliRunner().invoke(main, ["--quiet", "run", str(tmp_path / "bad.yaml")])
    assert r.exit_code == 2 and "residual_branch" in r.output
