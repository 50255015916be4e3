"""`calib recover`: targets named as in report.json, the early stop, fixed-batch models, the recovery steps in INT8
(bias correction known answers), the bounded fallback search, the predicted speed and the one-line errors."""
import json
import time

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli.main import main
from calib.errors import CalibError
from calib.search import target as tg
from calib.search.fallback import Scorer, rank, search
from nets import conv_net
from weights_graphs import two_convs


def sensitive(path, batch=1, opset=13, constant=False):
    """convA multiplies channel 1 by 1000, so one per-tensor INT8 scale at convB's input wipes out channel 0, which
    carries convB's output: convB must stay in float; convA is harmless. A fixed batch of `batch`."""
    wa = np.array([[1.0, 0.0], [0.0, 1000.0]], np.float32).reshape(2, 2, 1, 1)
    wb = np.array([[1.0, 1e-4]], np.float32).reshape(1, 2, 1, 1)
    nodes, inits = [], [numpy_helper.from_array(wb, "wb")]
    if constant:  # the weights as a Constant node, as some exporters write them
        nodes.append(helper.make_node("Constant", [], ["wa"], name="wa_const", value=numpy_helper.from_array(wa)))
    else:
        inits.append(numpy_helper.from_array(wa, "wa"))
    nodes += [helper.make_node("Conv", ["input", "wa"], ["ta"], name="convA"),
              helper.make_node("Conv", ["ta", "wb"], ["out"], name="convB")]
    g = helper.make_graph(nodes, "sens", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 2, 4, 4])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 1, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.save(m, str(path))
    return path


def _data(tmp_path, n=64, shape=(2, 4, 4)):
    p = tmp_path / "x.npy"
    np.save(p, np.random.default_rng(0).uniform(0.1, 1.0, (n, *shape)).astype(np.float32))
    return p


def _recover(tmp_path, model, *args):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["-q", "recover", str(model), "--data", str(_data(tmp_path)), "-o", str(out),
                                  *args])
    return r, out


@pytest.mark.parametrize("opset, constant", [(13, False), (11, True)])
def test_fixed_batch_model_reaches_the_target_with_the_sensitive_layer_in_float(tmp_path, opset, constant):
    """The crash of issue 41 ("Got: 8 Expected: 1"): a model with a fixed batch of 1, read 8 at a time; below
    opset 13 with Constant weights too. The fallback keeps exactly convB in float."""
    m = sensitive(tmp_path / "s.onnx", 1, opset, constant)
    r, out = _recover(tmp_path, m, "--target", "out_sqnr_db>=30", "--steps", "none", "--batch-size", "8")
    assert r.exit_code == 0, r.output
    res = json.loads((out / "recover.json").read_text())
    assert res["met"] and not res["already_met"]
    assert [f["layer"] for f in res["float_layers"]] == ["convB"]
    assert res["value"] >= 30 > res["steps"][0]["value"]
    assert (out / "layer_precisions.txt").read_text() == "convB=fp16\n"
    assert res["int8_macs_share"] == pytest.approx(2 / 3)  # convA: 2x2 per pixel, convB: 2 per pixel
    for f in ("recovered.cache", "recovered.json", "s.recovered.qdq.onnx", "recover.md"):
        assert (out / f).is_file(), f
    assert "trtexec --onnx=" in (out / "recover.md").read_text() and r.output.startswith("meets the target: ")


def test_steps_in_int8_come_first_and_each_is_judged(tmp_path):
    m = sensitive(tmp_path / "s.onnx")
    r, out = _recover(tmp_path, m, "--target", "out_sqnr_db>=30")
    assert r.exit_code == 0, r.output
    res = json.loads((out / "recover.json").read_text())
    names = [s["step"] for s in res["steps"]]
    assert names[0].startswith("all INT8") and names[-1].startswith("fallback")
    assert "cross-layer equalization" in names and "bias correction" in names
    eq = next(s for s in res["steps"] if s["step"] == "cross-layer equalization")
    assert eq["kept"] and eq["value"] > eq["before"] + 5  # channel 1's 1000x moved into convB's weights
    for s in res["steps"]:
        if s["value"] is None:  # a step with nothing to do here, said so
            assert not s["kept"] and s["note"].startswith(("no ", "not tried"))
            continue
        assert s["ci95"] is not None and s["ci95"][0] <= s["value"] <= s["ci95"][1]
    assert res["met"] and [f["layer"] for f in res["float_layers"]] == ["convB"]
    assert (out / "s.recovered.onnx").is_file()  # adjusted weights: the FP32 model the cache is for
    assert res["variants_measured"] >= len(res["steps"]) + 2  # the ranking's, on its subset, counted too


def test_stops_at_once_when_all_int8_meets_the_target(tmp_path):
    """The wasted search of issue 41: 234 variants before saying the all-INT8 model met the budget."""
    m = conv_net(tmp_path / "c.onnx", [1, 3, 8, 8])
    out = tmp_path / "out"
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).uniform(0, 1, (48, 3, 8, 8)).astype(np.float32))
    r = CliRunner().invoke(main, ["-q", "recover", str(m), "--data", str(x), "-o", str(out), "--target",
                                  "output_sqnr>=10"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("already meets the target")
    res = json.loads((out / "recover.json").read_text())
    assert res["already_met"] and res["float_layers"] == [] and len(res["steps"]) == 1
    assert res["variants_measured"] <= 4 and res["metric"] == "min_output_sqnr_db"


@pytest.mark.parametrize("args, flag", [
    (["--target", "nonsense_metric>=0.9"], "--target: unknown metric 'nonsense_metric'"),
    (["--target", "map50_95>=0.95"], "--target: unknown metric 'map50_95'"),
    (["--target", "out_sqnr_db=30"], "--target: 'out_sqnr_db=30'"),
    (["--max-drop", "0.01", "--target", "out_sqnr_db"], "--max-drop: FP32 has no value of out_sqnr_db"),
    (["--target", "out_sqnr_db>=30", "--time-budget", "0.001"], "--time-budget"),
    (["--target", "out_sqnr_db>=30", "--time-budget", "-5"], "--time-budget: '-5'"),
    (["--target", "out_sqnr_db>=30", "--limit", "40"], "evaluation samples cannot tell"),
    (["--target", "out_sqnr_db>=30", "--steps", "adaround,gptq"], "--steps: unknown step 'gptq'"),
])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, args, flag):
    m = sensitive(tmp_path / "s.onnx")
    r, out = _recover(tmp_path, m, *args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and flag in lines[-1], r.output
    assert not out.exists() or not any(out.iterdir())


def test_target_names_follow_report_json():
    pts = {"map50_95_vs_fp32": 0.6, "map50_vs_fp32": 0.8, "recall_vs_fp32": 0.9, "min_output_sqnr_db": 12.0,
           "fp32:map50_95_labels": 0.4, "map50_95_labels": 0.3, "cer_vs_fp32": 0.1}
    for name, key in (("map50_95", "map50_95_vs_fp32"), ("map50_95_vs_fp32", "map50_95_vs_fp32"),
                      ("recall", "recall_vs_fp32"), ("output_sqnr", "min_output_sqnr_db"), ("cer", "cer_vs_fp32")):
        assert tg.resolve(tg.parse_target(f"{name}{'<=' if 'cer' in name else '>='}0.5", None), pts, "x") == key
    t = tg.parse_target(None, 0.05)  # the task's primary figure, FP32 minus the drop
    assert tg.resolve(t, pts, "map50_95_vs_fp32") == "map50_95_vs_fp32"
    assert tg.threshold(t, "map50_95_vs_fp32", pts, 50, 80) == pytest.approx(0.95)
    t = tg.parse_target("map50_95_labels", 0.02)  # against labels: FP32's own value minus the drop
    assert tg.threshold(t, "map50_95_labels", pts, 50, 80) == pytest.approx(0.38)
    with pytest.raises(CalibError, match="FP32 finds no boxes"):
        tg.threshold(tg.parse_target("map50_95>=0.9", None), "map50_95_vs_fp32", pts, 50, 0)
    with pytest.raises(CalibError, match="is better lower"):
        tg.parse_target("cer>=0.1", None)
    assert tg.sign("cer_vs_fp32") == -1


def test_bias_correction_takes_the_weight_rounding_shift_off(tmp_path):
    """One 1x1 Conv whose small weight (0.004 next to 1.0) rounds to 1/127 in INT8: the output mean moves by
    (1/127 - 0.004) x mean(x1); the corrected bias takes it off."""
    from calib.calibrate import calibrate
    from calib.search.bias import correct, revert
    from calib.search.measure import Measure
    from calib.quantize.model import inspect_model

    w = np.array([[1.0, 0.004]], np.float32).reshape(1, 2, 1, 1)
    g = helper.make_graph([helper.make_node("Conv", ["input", "w"], ["out"], name="conv")], "b",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 2, 4, 4])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1, 4, 4])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    p = tmp_path / "b.onnx"
    onnx.save(m, str(p))
    x = np.random.default_rng(0).uniform(0.0, 1.0, (32, 2, 4, 4)).astype(np.float32)
    x[:, 1] = 100.0  # a constant second channel: its rounding error is all bias
    amax = calibrate(p, x, ["minmax"]).amax["minmax"]
    meas = Measure(m, inspect_model(p), [{"input": x}], precision=None)
    fixed, done = correct(m, amax, [{"input": x[:16]}, {"input": x[16:]}], ["conv"])
    # the weight: 0.004 rounds to 1/127 (x1 = 100); channel 0: x0 in [0, 1) rounds to 0 or one step of 100/127
    s0 = 100 / 127
    x0 = x[:, 0].astype(np.float64)
    shift = (1 / 127 - 0.004) * 100 + (np.rint(x0 / s0) * s0 - x0).mean()
    assert done["conv"] == pytest.approx(abs(shift), rel=1e-3)
    from calib.runners.onnxruntime import OrtRunner

    ref = OrtRunner(m).run({"input": x})["out"]
    before = OrtRunner(meas.variant(amax)).run({"input": x})["out"]
    after = OrtRunner(meas.variant(amax, (), fixed)).run({"input": x})["out"]
    assert (before - ref).mean() == pytest.approx(shift, rel=0.02)  # what the INT8 simulation does
    assert abs((after - ref).mean()) < 0.02 * abs(shift)
    back = revert(fixed, m, ["conv"])  # in float the layer computes FP32's output again
    np.testing.assert_allclose(OrtRunner(back).run({"input": x})["out"], ref, rtol=1e-6)


def test_macs_per_layer_and_the_int8_share(tmp_path):
    from calib.quantize.model import inspect_model
    from calib.search.macs import int8_share, layer_macs

    p = conv_net(tmp_path / "c.onnx", ["N", 3, 8, 8])
    macs = layer_macs(onnx.load(str(p)), inspect_model(p), ["conv1", "conv2"])
    assert macs == {"conv1": 64 * 4 * 27, "conv2": 64 * 4 * 36}
    assert int8_share(macs, ["conv2"]) == pytest.approx(27 / 63)
    assert int8_share({}, ["conv2"]) is None


def test_ranking_stops_early_and_the_search_answers_when_time_runs_out(tmp_path):
    from calib.calibrate import calibrate

    m = onnx.load(str(sensitive(tmp_path / "s.onnx", batch=16)))
    x = np.random.default_rng(0).uniform(0.1, 1.0, (16, 2, 4, 4)).astype(np.float32)
    amax = calibrate(tmp_path / "s.onnx", x, ["minmax"]).amax["minmax"]
    scorer = Scorer(m, amax, [({"input": x}, None)], "output_sqnr")
    ranking = rank(scorer, ["convB", "convA"], both=False, stop_at=30.0)
    assert [r["layer"] for r in ranking] == ["convB", "convA"] and ranking[1] == {"layer": "convA", "ranked": False}
    assert scorer.runs == 2  # all INT8 and convB alone in float: convA never measured
    scorer.deadline = time.monotonic() - 1  # spent: only variants measured already
    found = search(scorer, ranking, 30.0)  # the ranking measured the answer already
    assert not found["out_of_time"] and found["met"] and found["float_layers"] == ["convB"] and scorer.runs == 2
    found = search(scorer, ranking, 1e9)
    assert found["out_of_time"] and not found["met"] and found["float_layers"] == ["convB"]  # the best so far


def test_two_convs_with_constant_weights_recover(tmp_path):
    m = two_convs("constant", opset=13)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    p = tmp_path / "t.onnx"
    onnx.save(m, str(p))
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(2).normal(size=(48, 4, 6, 6)).astype(np.float32))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["-q", "recover", str(p), "--data", str(x), "-o", str(out), "--target",
                                  "out_sqnr_db>=60"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "recover.json").read_text())
    assert res["met"] and res["float_layers"]  # 60 dB needs float layers; the fewest that reach it


def test_a_recipe_brings_its_model_data_and_task(tmp_path):
    """The sensitivity search's reported case, through a recipe: fixed batch 1, evaluation.batch_size left at 8."""
    sensitive(tmp_path / "s.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0.1, 1.0, (64, 2, 4, 4)).astype(np.float32))
    (tmp_path / "r.yaml").write_text("name: s\nmodel: s.onnx\ncalibration_data: {kind: npy, path: x.npy}\n"
                                     "calibration: {algorithms: [minmax, mse]}\noutput: out\n")
    out = tmp_path / "rec"
    r = CliRunner().invoke(main, ["-q", "recover", str(tmp_path / "r.yaml"), "--target", "out_sqnr_db>=30",
                                  "--steps", "none", "-o", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "recover.json").read_text())
    assert [f["layer"] for f in res["float_layers"]] == ["convB"] and res["evaluation_samples"] == 32
    assert set(res["all_int8"]) == {"minmax", "mse"}  # the recipe's algorithms
    assert res["fallback_curve"][0] == {"float_layers": 0, "value": res["steps"][0]["value"],
                                        "int8_macs_share": 1.0}
    r = CliRunner().invoke(main, ["-q", "recover", str(tmp_path / "r.yaml"), "--target", "out_sqnr_db>=30",
                                  "--data", "x.npy", "-o", str(tmp_path / "rec2")])
    assert r.exit_code == 2 and "error: --data: " in r.output and "is a recipe" in r.output, r.output
    r = CliRunner().invoke(main, ["-q", "recover", str(tmp_path / "s.onnx"), "--target", "out_sqnr_db>=30",
                                  "--set", "output=x", "--data", str(tmp_path / "x.npy"), "-o", str(tmp_path / "r3")])
    assert r.exit_code == 2 and "error: --set: only with a recipe" in r.output, r.output


def test_sensitivity_runs_a_fixed_batch_model_and_stops_when_all_int8_meets_the_budget(tmp_path):
    """Issue 41's two reports on `calib sensitivity`: "Got: 8 Expected: 1" on a model with a fixed batch of 1, and
    234 variants ranked before saying that the all-INT8 model met the budget."""
    sensitive(tmp_path / "s.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0.1, 1.0, (16, 2, 4, 4)).astype(np.float32))
    (tmp_path / "r.yaml").write_text("name: s\nmodel: s.onnx\ncalibration_data: {kind: npy, path: x.npy}\n"
                                     "sensitivity: {metric: output_sqnr, min_sqnr_db: 30, samples: 8}\noutput: out\n")
    r = CliRunner().invoke(main, ["--quiet", "sensitivity", str(tmp_path / "r.yaml")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "sensitivity" / "exclude.txt").read_text() == "convB\n"
    r = CliRunner().invoke(main, ["--quiet", "sensitivity", str(tmp_path / "r.yaml"), "--set",
                                  "sensitivity.min_sqnr_db=-100", "--out", str(tmp_path / "easy")])
    assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "easy" / "sensitivity.json").read_text())
    assert got["float_layers"] == [] and got["ranking"] == [] and got["variants_run"] <= 4


def test_a_target_on_boxes_fp32_never_finds_is_refused(tmp_path):
    from heads_graphs import fixed_outputs

    boxes = np.tile(np.array([[[4.0, 4.0, 20.0, 20.0]]], np.float32), (1, 8, 1))
    scores = np.full((1, 8, 2), 0.01, np.float32)  # below every confidence threshold: FP32 finds no box
    m = fixed_outputs(tmp_path / "d.onnx", {"boxes": boxes, "scores": scores}, hw=(16, 16))
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).uniform(0, 1, (48, 3, 16, 16)).astype(np.float32))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["-q", "recover", str(m), "--data", str(x), "--head", "boxes-scores", "--target",
                                  "map50_95>=0.9", "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1].startswith("error: --target: map50_95_vs_fp32 cannot be measured: "
                                                        "FP32 finds no boxes"), r.output
    assert not out.exists() or not any(out.iterdir())


def test_learned_rounding_beats_nearest_on_correlated_inputs():
    """Two weights 10.45 and 20.35 (on a scale of 1: the row's largest is 127) fed the same input: nearest rounding
    loses 0.8 of it, the first rounded up only 0.2; the same with 10.3 and 20.45 the other way round."""
    from calib.search.adaround import learn

    w = np.array([[127.0, 10.45, 20.35], [127.0, 10.3, 20.45], [127.0, -3.5, 50.0]])
    g = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    q = learn(w, g)
    np.testing.assert_array_equal(q[:2], [[127, 11, 20], [127, 10, 21]])
    assert abs(q[2, 1] + q[2, 2] - 46.5) <= 0.5 and q[2, 0] == 127  # the scale stays: 127 stays 127


def test_learned_rounding_keeps_the_scale_and_writes_grid_weights(tmp_path):
    from calib.search.adaround import adaround
    from calib.quantize.qdq import weight_scales

    m = conv_net(tmp_path / "c.onnx", ["N", 3, 8, 8])
    x = np.random.default_rng(3).normal(size=(16, 3, 8, 8)).astype(np.float32)
    proto = onnx.load(str(m))
    new, done = adaround(proto, [{"images": x}], ["conv1", "conv2"])
    assert set(done) == {"conv1", "conv2"} and all(r <= 1.0 for r in done.values())
    for layer, w0 in (("conv1", "w1"), ("conv2", "w2")):
        a = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == w0))
        b = numpy_helper.to_array(next(t for t in new.graph.initializer if t.name == f"{layer}.adarounded"))
        s = weight_scales(a, 0).reshape(-1, 1, 1, 1)
        np.testing.assert_allclose(weight_scales(b, 0), weight_scales(a, 0), rtol=1e-6)  # same per-channel scale
        k = b / s
        np.testing.assert_allclose(k, np.rint(k), atol=1e-3)  # on the INT8 grid
        assert np.abs(k - a / s).max() < 1.0 + 1e-3  # each weight rounded up or down, never further
    one_by_one, _ = adaround(proto, [{"images": x}], ["conv1", "conv2"], gram_bytes=1)  # a pass per layer
    for t in ("conv1.adarounded", "conv2.adarounded"):
        got = [numpy_helper.to_array(next(i for i in mm.graph.initializer if i.name == t)) for mm in (new, one_by_one)]
        np.testing.assert_array_equal(*got)


def test_a_float_layer_fp16_cannot_hold_is_fp32(tmp_path):
    """Inputs up to 100: convA's output (convB's input) reaches 1e5, past FP16's 65504: convB stays FP32."""
    m = sensitive(tmp_path / "s.onnx")
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).uniform(10, 100.0, (64, 2, 4, 4)).astype(np.float32))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["-q", "recover", str(m), "--data", str(x), "--target", "out_sqnr_db>=30",
                                  "--steps", "none", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "layer_precisions.txt").read_text() == "convB=fp32\n"
    res = json.loads((out / "recover.json").read_text())
    assert res["float_layers"][0]["precision"] == "fp32" and "65504" in res["float_layers"][0]["why_fp32"]
    assert "1 layer in float" in r.output


def outlier_matmul(path):
    """x [N, 8] -> MatMul(W [8, 4]) -> out: channel 0 of x runs 100x the others (an outlier channel)."""
    w = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["out"], name="mm")], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def test_smoothing_levels_an_outlier_channel_and_keeps_fp32(tmp_path):
    from calib.runners.onnxruntime import OrtRunner
    from calib.search.smooth import smooth

    m = onnx.load(str(outlier_matmul(tmp_path / "m.onnx")))
    x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    x[:, 0] *= 100
    new, done = smooth(m, [{"x": x}], ["mm"])
    # held out (scales set on 32 rows, measured on the other 32, both ways): 28.6 -> 33.9 dB at alpha 0.65
    assert set(done) == {"mm"} and done["mm"].after_db > done["mm"].before_db + 4 and done["mm"].alpha == 0.65
    np.testing.assert_allclose(OrtRunner(new).run({"x": x})["out"], OrtRunner(m).run({"x": x})["out"], rtol=1e-4,
                               atol=1e-3)
    leveled = OrtRunner(new, expose=["mm.smoothed.input"]).run({"x": x})["mm.smoothed.input"]
    mx = np.abs(leveled).max(0)
    before = np.abs(x).max(0)
    assert mx.max() / np.median(mx) < before.max() / np.median(before) / 5  # the outlier channel is level now
    x2 = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)  # no outlier: nothing to do
    assert smooth(m, [{"x": x2}], ["mm"])[1] == {}


def test_recover_keeps_smoothing_where_it_helps(tmp_path):
    p = outlier_matmul(tmp_path / "m.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, size=(160, 8)).astype(np.float32)  # bounded: no clipping
    x[:, 0] *= 100
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["-q", "recover", str(p), "--data", str(tmp_path / "x.npy"), "--target",
                                  "out_sqnr_db>=40", "--algo", "minmax", "--steps", "smoothquant", "--deploy", "qdq",
                                  "--calib-samples", "64", "-o", str(out)])  # MIN_ROWS rows to choose alpha on
    assert r.exit_code == 0, r.output
    res = json.loads((out / "recover.json").read_text())
    step = next(s for s in res["steps"] if s["step"].startswith("activation smoothing"))
    assert step["kept"] and step["value"] > step["before"] + 8  # 38.5 -> 48.1 dB
    assert res["met"] and res["float_layers"] == [] and res["weights_changed"] == ["smoothquant"]
    assert (out / "m.recovered.onnx").is_file()


def test_a_target_only_float_reaches_is_said_to_leave_no_int8(tmp_path):
    m = sensitive(tmp_path / "s.onnx")
    r, out = _recover(tmp_path, m, "--target", "out_sqnr_db>=200", "--steps", "none")
    assert r.exit_code == 0, r.output
    res = json.loads((out / "recover.json").read_text())
    assert res["met"] and res["int8_macs_share"] == 0 and len(res["float_layers"]) == 2
    assert r.output.startswith("meets the target only with no multiply-adds left in INT8 (not faster than FP16")


def test_the_search_stops_early_enough_for_the_last_measurement_and_the_files():
    from calib.search.recover_state import Clock

    c = Clock(100.0)
    c.keep(30.0)
    assert abs(c.deadline - (c.t0 + 70.0)) < 1e-9
    c.keep(500.0)
    assert c.deadline == c.t0 and c.out() is (c.elapsed() > 0)
    unbounded = Clock(None)
    unbounded.keep(30.0)
    assert unbounded.deadline is None and not unbounded.out()


def test_a_share_of_the_time_left():
    import time

    from calib.search.recover_state import Clock

    c = Clock(100.0)
    t = c.share(0.25)
    assert abs(t - (time.monotonic() + 0.25 * (c.deadline - time.monotonic()))) < 0.05
    assert Clock(None).share(0.25) is None


def test_deploy_fp16_searches_the_fp16_int8_model(tmp_path):
    """--deploy fp16 judges the FP16+INT8 model (TensorRT 11's only INT8 form): its float layers run in FP16, whose
    rounding caps the outputs' SQNR far below 100 dB; the Q/DQ model's float layers are FP32 and reach it. With
    --precision fp32 the FP16+INT8 model keeps the fallback's layers in FP32 and reaches it too."""
    m = sensitive(tmp_path / "s.onnx")
    runs = {}
    for name, extra in (("qdq", ["--deploy", "qdq"]), ("fp16", ["--deploy", "fp16"]),
                        ("fp16-fp32", ["--deploy", "fp16", "--precision", "fp32"])):
        (tmp_path / name).mkdir()
        r, out = _recover(tmp_path / name, m, "--target", "out_sqnr_db>=100", "--steps", "none", *extra)
        assert r.exit_code == 0, r.output
        runs[name] = json.loads((out / "recover.json").read_text())
    assert runs["qdq"]["met"] and runs["fp16-fp32"]["met"]
    assert not runs["fp16"]["met"] and runs["fp16"]["value"] < 100
    assert runs["fp16"]["simulated"] == "fp16" and runs["qdq"]["simulated"] == "qdq"
    assert all(f["precision"] == "fp32" for f in runs["fp16-fp32"]["float_layers"])
    # both convs in FP16: FP16's 11-bit significand rounds each output to about 70 dB (71.3 measured)
    assert 60 < runs["fp16"]["value"] < 80
    assert "the FP16+INT8 model (--deploy fp16" in (tmp_path / "fp16" / "out" / "recover.md").read_text()
