"""Inputs that are not one array per sample on axis 0: a state with its batch on axis 1, a scalar fed with every
sample, constants from the command line, a recipe or a file (calib.quantize.layout, calib.data.feeding)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.calibrate import calibrate
from calib.cli.main import main
from calib.errors import DataError, ModelError
from calib.evaluate.api import evaluate
from calib.quantize.layout import infer_layout


def _stream_model(path, batch="batch", state_batch="batch", fixed: int | None = None):
    """out = (input @ W + sum(state, 0)) * sr / 16000, [B, 3]; stateN = state + out, [2, B, 3]."""
    b = fixed or batch
    sb = fixed or state_batch
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "W")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes0")
    k = numpy_helper.from_array(np.array(16000.0, np.float32), "k")
    nodes = [helper.make_node("MatMul", ["input", "W"], ["x"]),
             helper.make_node("ReduceSum", ["state", "axes0"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"]),
             helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "k"], ["scale"]),
             helper.make_node("Mul", ["y", "scale"], ["out"]),
             helper.make_node("Unsqueeze", ["out", "axes0"], ["out3"]),
             helper.make_node("Add", ["state", "out3"], ["stateN"])]
    g = helper.make_graph(nodes, "stream",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [b, 4]),
                           helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, sb, 3]),
                           helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [b, 3]),
                           helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, sb, 3])],
                          [w, axes, k])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(2, n, 3)).astype(np.float32),
            np.array(16000, np.int64))


def test_layout_is_read_from_the_model_and_the_options(tmp_path):
    m = onnx.load(str(_stream_model(tmp_path / "m.onnx")))
    lay = infer_layout(m)
    assert lay.axis("input") == 0 and lay.axis("state") == 1 and lay.axis("sr") is None
    assert lay.output_axis("stateN") == 1 and lay.output_axis("out") == 0
    # an unnamed free dim: the only free one, since another input's batch is free
    m2 = onnx.load(str(_stream_model(tmp_path / "m2.onnx", state_batch=None)))
    assert infer_layout(m2).axis("state") == 1
    # a fixed batch: nothing to tell the batch from; the option says it
    m3 = onnx.load(str(_stream_model(tmp_path / "m3.onnx", fixed=1)))
    assert infer_layout(m3).axis("state") == 0
    assert infer_layout(m3, {"state": 1, "stateN": 1}).axis("state") == 1
    with pytest.raises(ModelError, match="--batch-axis state=3: 'state' has 3 dimensions"):
        infer_layout(m3, {"state": 3})
    with pytest.raises(ModelError, match="--batch-axis nope=1: the model has no input or output 'nope'"):
        infer_layout(m3, {"nope": 1})
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)  # canonical: 4 samples of [2, 3]
    feed = lay.to_model({"state": x, "sr": np.full(4, 7)})
    assert feed["state"].shape == (2, 4, 3) and np.array_equal(feed["state"][:, 1], x[1])
    assert feed["sr"].shape == () and feed["sr"] == 7
    assert lay.from_model({"stateN": feed["state"]})["stateN"].shape == (4, 2, 3)


def _reference(model, inp, state, sr):
    import onnxruntime as ort

    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return s.run(None, {"input": inp, "state": state, "sr": sr})


def test_an_npz_laid_out_as_onnx_runtime_takes_the_inputs(tmp_path):
    model = _stream_model(tmp_path / "m.onnx")
    inp, state, sr = _data()
    np.savez(tmp_path / "d.npz", input=inp, state=state, sr=sr)
    res = calibrate(model, tmp_path / "d.npz", ["minmax"], batch_size=5)
    assert res.samples == 12
    out, new = _reference(model, inp, state, sr)
    # the statistics saw the model's own values: the output's absmax is FP32's over the 12 samples
    assert res.amax["minmax"]["out"] == pytest.approx(float(np.abs(out).max()), rel=1e-6)
    assert res.amax["minmax"]["stateN"] == pytest.approx(float(np.abs(new).max()), rel=1e-6)
    ev = evaluate(model, {"minmax": res.amax["minmax"]}, tmp_path / "d.npz", batch_size=5, layerwise=False)
    assert ev["samples"] == 12
    iv = ev["configs"]["minmax"]["intervals"]
    assert iv["stateN_sqnr_db"]["n"] == 12 and iv["out_sqnr_db"]["n"] == 12  # one row per sample, state included


def test_constants_from_options_fill_what_the_file_lacks(tmp_path):
    model = _stream_model(tmp_path / "m.onnx")
    inp, state, _ = _data()
    np.savez(tmp_path / "x.npz", input=inp)
    h0 = np.zeros((2, 1, 3), np.float32)
    np.save(tmp_path / "h0.npy", h0)
    res = calibrate(model, tmp_path / "x.npz", ["minmax"], consts={"sr": 8000, "state": tmp_path / "h0.npy"})
    out, _ = _reference(model, inp, np.zeros((2, 12, 3), np.float32), np.array(8000, np.int64))
    assert res.amax["minmax"]["out"] == pytest.approx(float(np.abs(out).max()), rel=1e-6)
    res0 = calibrate(model, tmp_path / "x.npz", ["minmax"], consts={"sr": 8000, "state": 0})  # fills [2, 3]
    assert res0.amax["minmax"]["out"] == res.amax["minmax"]["out"]
    with pytest.raises(DataError, match=r"sr: a value of shape \[2\] does not fit input 'sr' \[\]"):
        calibrate(model, tmp_path / "x.npz", ["minmax"], consts={"sr": [1, 2], "state": 0})
    with pytest.raises(DataError, match="the value .* is not whole"):
        calibrate(model, tmp_path / "x.npz", ["minmax"], consts={"sr": 0.5, "state": 0})
    with pytest.raises(DataError, match="no data for model input 'state'.*--const state=VALUE"):
        calibrate(model, tmp_path / "x.npz", ["minmax"], consts={"sr": 8000})


def test_a_fixed_batch_state_needs_its_axis_and_the_error_says_so(tmp_path):
    model = _stream_model(tmp_path / "m.onnx", fixed=1)
    inp, state, sr = _data(6)
    np.savez(tmp_path / "d.npz", input=inp, state=state, sr=sr)
    with pytest.raises(DataError) as e:
        calibrate(model, tmp_path / "d.npz", ["minmax"], option_names={"inputs.batch_axis": "--batch-axis",
                                                                          "inputs.const": "--const"})
    msg = str(e.value)
    assert "'state' [2, 6, 3] (samples on axis 0: 2)" in msg and "--batch-axis state=AXIS" in msg, msg
    res = calibrate(model, tmp_path / "d.npz", ["minmax"], batch_axes={"state": 1, "stateN": 1})
    assert res.samples == 6
    out, _ = _reference(model, inp[:1], state[:, :1], sr)
    assert res.amax["minmax"]["input"] == pytest.approx(float(np.abs(inp).max()))


def _cli(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def test_cli_batch_axis_and_const_in_calibrate_and_evaluate(tmp_path):
    model = _stream_model(tmp_path / "m.onnx", fixed=1)
    inp, state, _ = _data(6)
    np.savez(tmp_path / "d.npz", input=inp, state=state)
    r = _cli("calibrate", model, "--data", tmp_path / "d.npz", "--algo", "minmax", "--out", tmp_path / "c")
    assert r.exit_code == 2 and r.output.count("error:") == 1
    assert "input 'sr'" in r.output and "--const sr=VALUE" in r.output, r.output
    args = ["--data", tmp_path / "d.npz", "--batch-axis", "state=1", "--batch-axis", "stateN=1", "--const", "sr=16000"]
    r = _cli("calibrate", model, *args, "--algo", "minmax", "--out", tmp_path / "c")
    assert r.exit_code == 0, r.output
    r = _cli("evaluate", model, "--cache", tmp_path / "c" / "minmax.cache", *args, "--out", tmp_path / "e")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "e" / "report.json").read_text())
    assert rep["evaluation"]["samples"] == 6
    assert "--batch-axis state=1" in rep["rerun"] and "--const sr=16000" in rep["rerun"]
    r = _cli("calibrate", model, *args[:2], "--batch-axis", "state=x", "--out", tmp_path / "c2")
    assert r.exit_code == 2 and "--batch-axis 'state=x': expected NAME=AXIS" in r.output


def test_recipe_inputs(tmp_path):
    model = _stream_model(tmp_path / "m.onnx", fixed=1)
    inp, state, _ = _data(8)
    np.savez(tmp_path / "d.npz", input=inp, state=state)
    (tmp_path / "r.yaml").write_text(
        "model: m.onnx\ncalibration_data: {kind: npz, path: d.npz, limit: 4}\n"
        "evaluation_data: {kind: npz, path: d.npz, offset: 4}\ncalibration: {algorithms: [minmax]}\n"
        "inputs: {state: {batch_axis: 1}, stateN: {batch_axis: 1}, sr: {const: 16000}}\noutput: out\n")
    r = _cli("run", tmp_path / "r.yaml")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["evaluation"]["samples"] == 4
    (tmp_path / "r2.yaml").write_text((tmp_path / "r.yaml").read_text().replace("const: 16000", "cosnt: 16000"))
    r = _cli("run", tmp_path / "r2.yaml")
    assert r.exit_code == 2 and "inputs.sr.cosnt: unknown key" in r.output, r.output
