"""Any metric through the hook: strings (exact match, CER) from the built-in CTC head or a postprocess, vectors
(cosine) and the user's own comparison (--metric), ranked with intervals like mAP (calib.evaluate.scores)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli.main import main
from calib.errors import DataError, ModelError
from calib.evaluate.api import evaluate
from calib.evaluate.report import summary
from calib.evaluate.scores.ctc import CtcHead, greedy
from calib.evaluate.scores.tally import cosines
from calib.evaluate.scores.text import compare, edit_distance

T, C = 6, 5  # steps, classes (blank + 4 characters)


def test_edit_distance_and_greedy_ctc_known_answers():
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "abc") == 3 and edit_distance("ab", "ab") == 0
    assert edit_distance("abcd", "acbd") == 2
    exact, edits, lens = compare(["ab", "abc", ""], ["ab", "xbc", "q"])
    assert exact.tolist() == [True, False, False] and edits.tolist() == [0, 1, 1] and lens.tolist() == [2, 3, 0]
    best = np.array([[1, 1, 0, 1, 2, 2], [0, 0, 0, 0, 0, 0], [4, 3, 3, 0, 3, 5]])
    scores = np.eye(6)[best]  # one-hot [N, T, 6]
    assert greedy(scores, ["a", "b", "c", "d"]) == ["aab", "", "dcc "]  # class 5: past the charset, a space
    assert cosines(np.array([[1.0, 0], [1, 1]]), np.array([[2.0, 0], [-1, -1]])).tolist() == [1.0, -1.0]


def _ocr_model(path):
    """probs = Softmax(x @ W), x [N, T, 4] -> [N, T, C]."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.normal(size=(4, C)) * 2).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["logits"]),
                           helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)], "ocr",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", T, 4])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", T, C])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture
def ocr(tmp_path):
    model = _ocr_model(tmp_path / "ocr.onnx")
    x = np.random.default_rng(0).normal(size=(40, T, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "cs.txt").write_text("a\nb\nc\nd\n")
    (tmp_path / "m.py").write_text(
        "import numpy as np\n\n\ndef neg_l1(a, b):\n    return -np.abs(a['probs'] - b['probs']).reshape(len(a['probs']), -1)"
        ".mean(1)\n\n\ndef vec(o):\n    return o['probs'].reshape(len(o['probs']), -1)\n\n\n"
        "def bad(a, b):\n    return [1.0]\n")
    fp32 = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return model, x, fp32, tmp_path


GOOD = {"x": 4.5, "logits": 20.0, "probs": 1.0}
BAD = {"x": 1e4, "logits": 20.0, "probs": 1.0}  # every input rounds to 0: uniform probabilities, blank decoded


def test_ctc_head_ranks_on_exact_match_with_intervals(ocr):
    model, x, fp32, tmp = ocr
    res = evaluate(model, {"good": GOOD, "bad": BAD}, x, postprocess=CtcHead(tmp / "cs.txt"), batch_size=16,
                   layerwise=False)
    assert res["task"] == "text" and res["primary_metric"] == "exact_match_vs_fp32"
    ref = greedy(fp32, ["a", "b", "c", "d"])
    bad = res["configs"]["bad"]["task"]
    assert bad["exact_match_vs_fp32"] == pytest.approx(np.mean([r == "" for r in ref]))
    assert bad["cer_vs_fp32"] == pytest.approx(1.0)  # all of FP32's characters deleted
    iv = res["configs"]["good"]["intervals"]
    assert iv["exact_match_vs_fp32"]["n"] == 40 and iv["exact_match_vs_fp32"]["ci95"] is not None
    assert iv["cer_vs_fp32"]["value"] < 0.5 and iv["cer_vs_fp32"]["ci95"] is not None
    s = summary(res)
    assert s["decision"]["ship"] == "good" and s["rows"]["good"]["exact_match_vs_fp32"] > 0.5
    assert s["paired"] and s["paired"][0]["metric"] == "exact_match_vs_fp32"


def test_user_metric_and_vectors(ocr):
    model, x, fp32, tmp = ocr
    res = evaluate(model, {"good": GOOD, "bad": BAD}, x, metric=f"{tmp / 'm.py'}:neg_l1", batch_size=16,
                   layerwise=False)
    assert res["primary_metric"] == "neg_l1"
    want = -np.abs(fp32 - 1.0 / C).reshape(40, -1).mean(1).mean()  # the bad config: uniform 1/C everywhere
    assert res["configs"]["bad"]["scores"]["neg_l1"] == pytest.approx(want, rel=1e-5)
    assert res["configs"]["bad"]["intervals"]["neg_l1"]["ci95"] is not None
    assert summary(res)["rows"]["bad"]["neg_l1"] == pytest.approx(want, rel=1e-5)
    res = evaluate(model, {"bad": BAD}, x, task="embedding", postprocess=f"{tmp / 'm.py'}:vec", layerwise=False)
    v = fp32.reshape(40, -1)
    want = (v.sum(1) / C / (np.linalg.norm(v, axis=1) * np.sqrt(T * C) / C)).mean()
    assert res["primary_metric"] == "mean_cosine"
    assert res["configs"]["bad"]["task"]["mean_cosine"] == pytest.approx(want, rel=1e-5)
    with pytest.raises(DataError, match=r"m.py:bad returned \[1\]: expected 16 scores, one per sample"):
        evaluate(model, {"bad": BAD}, x, metric=f"{tmp / 'm.py'}:bad", batch_size=16, layerwise=False)
    (tmp / "m2.py").write_text("def mean_cosine(a, b):\n    return 0\n")
    with pytest.raises(ModelError, match="'mean_cosine' is a figure calib reports already"):
        evaluate(model, {"bad": BAD}, x, metric=f"{tmp / 'm2.py'}:mean_cosine")


def _cli(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def test_cli_and_recipe(ocr):
    model, x, fp32, tmp = ocr
    r = _cli("calibrate", model, "--data", tmp / "x.npy", "--algo", "minmax,mse", "--out", tmp / "c")
    assert r.exit_code == 0, r.output
    caches = ["--cache", tmp / "c" / "minmax.cache", "--cache", tmp / "c" / "mse.cache"]
    r = _cli("evaluate", model, *caches, "--data", tmp / "x.npy", "--head", "ctc", "--charset", tmp / "cs.txt",
             "--metric", f"{tmp / 'm.py'}:neg_l1", "--out", tmp / "e")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp / "e" / "report.json").read_text())
    row = rep["summary"]["rows"]["minmax"]
    assert {"exact_match_vs_fp32", "cer_vs_fp32", "neg_l1"} <= set(row)
    assert rep["summary"]["metric"] == "neg_l1" and rep["summary"]["intervals"]["mse"]["cer_vs_fp32"]["ci95"]
    assert "--charset" in rep["rerun"] and "--metric" in rep["rerun"]
    r = _cli("evaluate", model, *caches, "--data", tmp / "x.npy", "--head", "ctc", "--out", tmp / "e2")
    assert r.exit_code == 2 and "--charset" in r.output and r.output.count("error:") == 1
    r = _cli("evaluate", model, *caches, "--data", tmp / "x.npy", "--task", "text", "--out", tmp / "e3")
    assert r.exit_code == 2 and "text needs a decoder" in r.output, r.output
    (tmp / "r.yaml").write_text(
        "model: ocr.onnx\ncalibration_data: {kind: npy, path: x.npy, limit: 16}\n"
        "evaluation_data: {kind: npy, path: x.npy, offset: 16}\ncalibration: {algorithms: [minmax, mse]}\n"
        "evaluation: {task: text, charset: cs.txt, metric: m.py:neg_l1}\noutput: out\n")
    r = _cli("run", tmp / "r.yaml")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp / "out" / "report.json").read_text())
    assert rep["summary"]["metric"] == "neg_l1" and "exact_match_vs_fp32" in rep["summary"]["rows"]["mse"]
