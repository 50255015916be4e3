"""Control flow before calibration: an If that --const decides is folded (its branch inlined, names kept) and
calibrated; what stays inside If/Loop bodies is said in one line with its share of the multiply-adds."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli import main
from calib.quantize.cache import read_cache
from calib.quantize.control import control_flow, fold_ifs

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _branch(name, w):
    """x -> Conv(w) -> Relu -> y, reading x and w from the outer graph."""
    return helper.make_graph(
        [helper.make_node("Conv", ["x", w], [f"{name}_conv"], name=f"{name}/conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", [f"{name}_conv"], [f"{name}_relu"], name=f"{name}/relu")],
        name, [], [helper.make_tensor_value_info(f"{name}_relu", F32, None)])


def if_model(path=None, cond_from_input=True, cond_from_data=False):
    """The whole network inside an If on `sr == 16000` (sr: a scalar input, or a constant; or on the data:
    mean(x) > -100)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w16"),
             numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w8"),
             numpy_helper.from_array(np.array(16000, np.int64), "rate")]
    inputs = [helper.make_tensor_value_info("x", F32, ["N", 3, 8, 8])]
    if cond_from_data:
        inits.append(numpy_helper.from_array(np.array(-100.0, np.float32), "floor"))
    elif cond_from_input:
        inputs.append(helper.make_tensor_value_info("sr", I64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(16000, np.int64), "sr"))
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", keepdims=0),
             helper.make_node("Greater", ["mean", "floor"], ["is16k"], name="is16k")] if cond_from_data else \
        [helper.make_node("Equal", ["sr", "rate"], ["is16k"], name="is16k")]
    nodes += [
             helper.make_node("If", ["is16k"], ["feat"], name="by_rate", then_branch=_branch("wide", "w16"),
                              else_branch=_branch("narrow", "w8")),
             helper.make_node("GlobalAveragePool", ["feat"], ["pooled"], name="pool"),
             helper.make_node("Flatten", ["pooled"], ["y"], name="flat")]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F32, ["N", 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    if path is not None:
        onnx.save(m, str(path))
    return m


def _run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_an_if_the_constants_decide_is_folded_with_its_names():
    m = if_model()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    for sr, taken, other in ((16000, "wide", "narrow"), (8000, "narrow", "wide")):
        f, which = fold_ifs(m, {"sr": np.array(sr, np.int64)})
        assert which == [("by_rate", "then" if sr == 16000 else "else")]
        names = [n.name for n in f.graph.node]
        assert names == ["is16k", f"{taken}/conv", f"{taken}/relu", "pool", "flat"]
        assert f"{taken}_conv" in {o for n in f.graph.node for o in n.output}  # the branch's names kept
        assert "feat" in {o for n in f.graph.node for o in n.output}  # the If's output keeps its name
        onnx.checker.check_model(f)
        sr_a = np.array(sr, np.int64)
        np.testing.assert_allclose(_run(f, {"x": x, "sr": sr_a}), _run(m, {"x": x, "sr": sr_a}), rtol=1e-6)
        assert control_flow(f) is None
    f, which = fold_ifs(m, {})  # sr varies: the If stays
    assert which == [] and [n.op_type for n in f.graph.node].count("If") == 1
    f, which = fold_ifs(if_model(cond_from_input=False))  # a condition the model's own constants decide
    assert which == [("by_rate", "then")]


def test_what_stays_in_bodies_is_counted_with_its_multiply_adds():
    cf = control_flow(if_model())
    assert cf.bodies == {"If": 1} and cf.nodes == 4
    assert cf.share == pytest.approx(1.0)  # both Convs inside; nothing else multiplies
    line = cf.describe()
    assert line.startswith("4 nodes inside the bodies of 1 If (100.0 % of the model's multiply-adds) stay float")
    # a Loop around a MatMul, after a MatMul outside it of the same size: half the multiply-adds inside
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w"], ["h_out"], name="step"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", F32, [1, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F32, [1, 8])])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"], name="first"),
             helper.make_node("Loop", ["steps", "", "h0"], ["h"], name="loop", body=body)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 8])],
                          [helper.make_tensor_value_info("h", F32, [1, 8])],
                          [w, numpy_helper.from_array(np.array(3, np.int64), "steps")])
    cf = control_flow(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert cf.bodies == {"Loop": 1} and cf.nodes == 2 and cf.share == pytest.approx(0.5)


def _data(tmp_path, n=16):
    p = tmp_path / "x.npy"
    np.save(p, np.random.default_rng(2).standard_normal((n, 3, 8, 8)).astype(np.float32))
    return p


def test_calibrate_folds_the_if_and_calibrates_its_branch(tmp_path):
    m, data = tmp_path / "m.onnx", _data(tmp_path)
    if_model(m)
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(m), "--data", str(data), "--const", "sr=16000",
                                  "--algo", "minmax", "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    amax = read_cache(tmp_path / "c" / "minmax.cache").amaxes()
    assert {"wide_conv", "feat", "y"} <= set(amax) and "narrow_conv" not in amax
    folded = tmp_path / "c" / "m.folded.onnx"
    assert folded.is_file() and "If" not in {n.op_type for n in onnx.load(str(folded)).graph.node}
    side = json.loads((tmp_path / "c" / "minmax.json").read_text())
    assert side["model_sha256"] != __import__("hashlib").sha256(m.read_bytes()).hexdigest()  # the folded model's
    r = CliRunner().invoke(main, ["--quiet", "evaluate", str(m), "--cache", str(tmp_path / "c" / "minmax.cache"),
                                  "--data", str(data), "--const", "sr=16000", "--no-layerwise",
                                  "-o", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output  # the same --const folds to the same model: the cache's hash matches
    rep = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert rep["model_sha256"] == side["model_sha256"]


def test_an_if_left_in_place_is_said_in_one_line(tmp_path):
    m, data = tmp_path / "m.onnx", _data(tmp_path)
    if_model(m, cond_from_data=True)  # the data decide the branch: nothing to fold
    r = CliRunner().invoke(main, ["calibrate", str(m), "--data", str(data), "--algo", "minmax",
                                  "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.output.splitlines() if "stay float" in ln]
    assert len(said) == 1 and (f"{m}: 4 nodes inside the bodies of 1 If (100.0 % of the model's multiply-adds) "
                               "stay float") in said[0]
    assert " 0 MB of activations" not in r.output
    amax = read_cache(tmp_path / "c" / "minmax.cache").amaxes()
    assert "wide_conv" not in amax and "feat" in amax and not (tmp_path / "c" / "m.folded.onnx").exists()


def test_run_writes_the_folded_model_and_quantizes_its_branch(tmp_path):
    if_model(tmp_path / "m.onnx")
    _data(tmp_path, 40)
    (tmp_path / "r.yaml").write_text(
        "name: k\nmodel: m.onnx\ncalibration_data: {kind: npy, path: x.npy, limit: 16}\n"
        "evaluation_data: {kind: npy, path: x.npy, offset: 16}\n"
        "calibration: {algorithms: [minmax], batch_size: 8}\n"
        "inputs: {sr: {const: 8000}}\noutput: out\n")
    r = CliRunner().invoke(main, ["--quiet", "run", str(tmp_path / "r.yaml")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    rep = json.loads((out / "report.json").read_text())
    assert "m.folded.onnx" in rep["files"] and (out / "m.folded.onnx").is_file()
    assert rep["model_file"].endswith("out/m.folded.onnx")
    q = onnx.load(str(out / rep["qdq_model"]))
    ops = [n.op_type for n in q.graph.node]
    assert "If" not in ops and "narrow_conv" in {o for n in q.graph.node for o in n.output}  # sr=8000: else
    quantized = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert "x" in quantized and "w8" in quantized  # the branch's Conv reads INT8


def test_an_if_inside_the_taken_branch_is_folded_too():
    m = if_model()
    inner = helper.make_node("If", ["c2"], ["feat_t"], name="inner", then_branch=_branch("wide", "w16"),
                             else_branch=_branch("narrow", "w8"))
    then = helper.make_graph([helper.make_node("Identity", ["is16k"], ["c2"], name="c2"), inner], "outer_then", [],
                             [helper.make_tensor_value_info("feat_t", F32, None)])
    nodes = [helper.make_node("If", ["is16k"], ["feat"], name="outer", then_branch=then,
                              else_branch=_branch("other", "w8")) if n.op_type == "If" else n for n in m.graph.node]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.checker.check_model(m)
    f, which = fold_ifs(m, {"sr": np.array(16000, np.int64)})
    assert which == [("outer", "then"), ("inner", "then")]
    assert [n.name for n in f.graph.node] == ["is16k", "c2", "wide/conv", "wide/relu", "pool", "flat"]


def test_evaluate_simulates_the_folded_branch_in_int8_and_names_the_folded_model(tmp_path):
    """`calib evaluate --const` folds the If; the deployed build's precision model, the FP16+INT8 rows and the
    report's deploy commands are for the folded model, so the branch's Conv is simulated in INT8 (an implicit
    precision model of the unfolded model named no layer of the branch: nothing was quantized)."""
    m, data = tmp_path / "m.onnx", _data(tmp_path)
    if_model(m)
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(m), "--data", str(data), "--const", "sr=16000",
                                  "--algo", "minmax", "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--quiet", "evaluate", str(m), "--cache", str(tmp_path / "c" / "minmax.cache"),
                                  "--data", str(data), "--const", "sr=16000", "--no-layerwise", "--float-type", "fp16",
                                  "-o", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "ev" / "report.json").read_text())
    rows = rep["summary"]["rows"]
    for row in ("minmax", "minmax qdq", "minmax qdq-fp16"):
        assert np.isfinite(rows[row]["y_sqnr_db"]), (row, rows[row])  # rounded: INT8 ran in the branch
    assert "wide/conv" not in rep["precision_model"]["float_nodes"] and rep["precision_model"]["counts"]["int8"] >= 1
    assert rep["model_file"] == str(tmp_path / "ev" / "m.folded.onnx") and (tmp_path / "ev" / "m.folded.onnx").is_file()
    md = (tmp_path / "ev" / "report.md").read_text()
    assert f"--model {tmp_path / 'ev' / 'm.folded.onnx'} --to qdq" in md


def test_the_fp16_int8_model_feeds_a_body_fp32_where_it_reads_an_outer_tensor(tmp_path):
    """An If left in place stays FP32; its branches read `xr` from the graph around them by name, not as an input
    of the If. `xr` comes from an FP16 Relu: the body must read an FP32 copy, or the model fails its type checks."""
    from calib.quantize.fp16_model import make_fp16_model

    m = if_model(cond_from_data=True)
    for n in m.graph.node:
        for g in (a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH):
            for b in g.node:
                b.input[:] = ["xr" if t == "x" else t for t in b.input]
    m.graph.node.insert(0, helper.make_node("Relu", ["x"], ["xr"], name="pre"))
    onnx.checker.check_model(m)
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    f = make_fp16_model(m, {"x": 4.0, "xr": 4.0, "mean": 1.0, "feat": 4.0, "pooled": 2.0, "y": 2.0}).model
    onnx.checker.check_model(f)
    got = ort.InferenceSession(f.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = _run(m, {"x": x})
    assert got.shape == ref.shape and np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
