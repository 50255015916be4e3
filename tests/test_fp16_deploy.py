"""The Deploy section never builds a form the report's own evaluation found significantly worse: where the
FP16+INT8 model loses to the Q/DQ model as written on the same samples, the strongly typed builds take the Q/DQ
model and the report says why."""
import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli import main
from calib.evaluate.deploy_doc import deploy_commands
from test_deploy_commands import commands_by_version, trtexec_problems

F32 = TensorProto.FLOAT


def _report(significant: bool = True, diff: float = -0.917) -> dict:
    rows = ["mse qdq", "mse qdq-fp16"]
    return {"out_dir": "runs/x", "model_file": "m.onnx", "caches": {"mse": "runs/x/mse.cache"},
            "qdq_model": "m.mse.qdq.onnx", "fp16_model": "m.mse.fp16.qdq.onnx", "ranges": "ranges.json",
            "fp16": {"algorithm": "mse", "rows": rows},
            "summary": {"metric": "agreement_top1",
                        "intervals": {"mse qdq": {"agreement_top1": {"value": 0.917}},
                                      "mse qdq-fp16": {"agreement_top1": {"value": 0.917 + diff}}},
                        "paired": [{"a": "mse qdq", "b": "mse qdq-fp16", "diff": -diff, "ci95": [0.85, 0.97],
                                    "n": 48, "p_value": 1e-9 if significant else 0.4, "method": "McNemar exact",
                                    "significant": significant}]}}


def test_a_significantly_worse_fp16_model_is_not_recommended():
    text = deploy_commands(_report(), "mse")
    lines = text.splitlines()
    strong = lines[lines.index("# TensorRT 10.x strongly typed and 11.x: the Q/DQ model as written (float layers "
                               "FP32, quantized layers INT8)"):]
    assert strong[1] == ("# not the FP16+INT8 model: this evaluation found it significantly worse than the Q/DQ "
                         "model as written (top-1 agreement with FP32 0.000 against 0.917, difference -0.917, 95 % CI "
                         "-0.970 to -0.850, McNemar exact p = 1e-09, 48 samples); build the Q/DQ model, float layers "
                         "FP32")
    assert "calib build runs/x/m.mse.qdq.onnx --strongly-typed -o model.qdq.engine" in strong
    assert "trtexec --onnx=runs/x/m.mse.qdq.onnx --saveEngine=model.qdq.engine" in strong
    assert "fp16.qdq" not in text and "cache migrate" not in text
    assert "trtexec --onnx=runs/x/m.mse.qdq.onnx --int8 --saveEngine=model.qdq.engine" in lines  # no --fp16
    found = commands_by_version(text, markdown=False)
    assert not [p for line, versions in found for p in trtexec_problems(line, versions)]
    assert {v[0] for _, versions in found for v in versions} == {8, 10, 11}


def test_a_tie_or_a_better_fp16_model_keeps_the_fp16_deploy():
    for rep in (_report(significant=False), _report(diff=+0.02)):
        text = deploy_commands(rep, "mse")
        assert "trtexec --onnx=runs/x/m.mse.fp16.qdq.onnx --saveEngine=model.fp16.qdq.engine" in text
        assert "not the FP16+INT8 model" not in text and " --int8 --fp16 --saveEngine=model.qdq.engine" in text
    assert "not the FP16+INT8 model" not in deploy_commands(_report(), "minmax")  # another algorithm's rows


def fp16_fragile(path):
    """x + 2048 - 2048 before a Conv classifier: FP16's step at 2048 is 2, so the FP16+INT8 model sees 0 or 2 for
    every pixel in [0, 1]; no FP32 rule catches it (2048 is far from FP16's end, and INT8 layers follow)."""
    rng = np.random.default_rng(0)
    inits = {"big": np.array(2048.0, np.float32), "w": (rng.standard_normal((8, 3, 3, 3))).astype(np.float32),
             "fc": rng.standard_normal((8, 10)).astype(np.float32)}
    nodes = [helper.make_node("Add", ["x", "big"], ["a"], name="add_big"),
             helper.make_node("Sub", ["a", "big"], ["b"], name="sub_big"),
             helper.make_node("Conv", ["b", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["logits"], name="fc")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("logits", F32, ["N", 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_evaluate_fp16_says_the_fp16_model_lost_and_deploys_the_qdq_model(tmp_path):
    m, data = tmp_path / "m.onnx", tmp_path / "x.npy"
    fp16_fragile(m)
    np.save(data, np.random.default_rng(1).random((64, 3, 8, 8), dtype=np.float32))
    run = lambda *a: CliRunner().invoke(main, ["--quiet", *map(str, a)])  # noqa: E731
    r = run("calibrate", m, "--data", data, "--algo", "minmax", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    r = run("evaluate", m, "--cache", tmp_path / "c" / "minmax.cache", "--data", data, "--float-type", "fp16",
            "--task", "classification", "--no-layerwise", "-o", tmp_path / "ev")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "ev" / "report.json").read_text())
    rows = rep["summary"]["intervals"]
    assert rows["minmax qdq-fp16"]["agreement_top1"]["value"] < 0.5 < rows["minmax qdq"]["agreement_top1"]["value"]
    md = (tmp_path / "ev" / "report.md").read_text()
    assert "# not the FP16+INT8 model: this evaluation found it significantly worse" in md
    deploy = md.split("## Deploy")[1].split("## What to try next")[0]
    assert "calib cache migrate" not in deploy and "fp16.qdq.onnx" not in deploy
    assert "trtexec --onnx=m.minmax.qdq.onnx --stronglyTyped --saveEngine=model.qdq.engine" in deploy
    assert "the Deploy section builds the Q/DQ model strongly typed instead" in md
