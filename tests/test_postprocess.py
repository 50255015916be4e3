"""--postprocess FILE.py:FUNCTION (recipe evaluation.postprocess): the user's decoding feeds the task metrics; a bad
hook is refused in one line naming the file and the function."""
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT
from heads_graphs import fixed_outputs, yolox_raw

from calib.cli import main
from calib.errors import DataError, ModelError, RecipeError
from calib.evaluate import heads, postprocess
from calib.recipe import load_recipe

BOXES = [(8, 1, 1, 0.5, 0.5, 1.0, 1.0, 0.9, 0, 0.9), (16, 2, 1, 0.5, 0.5, np.log(2), np.log(2), 0.9, 1, 0.8)]


def docs_hook(folder, size=(64, 64)):
    """The YOLOX example of docs/own-models.md, as written there, for a `size` input."""
    text = (ROOT / "docs" / "own-models.md").read_text()
    code = re.search(r"```python\n(import numpy as np\n\ndef decode\(outputs.*?)```", text, re.S).group(1)
    assert "size=(416, 416)" in code and len(code.strip().splitlines()) <= 15
    path = folder / "yolox_post.py"
    path.write_text(code.replace("size=(416, 416)", f"size={size}"))
    return path


@pytest.fixture
def detector(tmp_path):
    model = fixed_outputs(tmp_path / "yolox.onnx", {"output": yolox_raw(boxes=BOXES)})
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((4, 3, 64, 64), dtype=np.float32))
    r = CliRunner().invoke(main, ["calibrate", str(model), "--data", str(tmp_path / "x.npy"), "--algo", "minmax",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    return model, tmp_path / "x.npy", tmp_path / "c" / "minmax.cache"


def one_line_error(r, message: str) -> None:
    """Exit code 2, no traceback, and the error in one line (the command's last) that holds `message`."""
    lines = r.output.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert r.exit_code == 2 and "Traceback" not in r.output and errors == lines[-1:], r.output
    assert message in errors[0], r.output


def _evaluate(model, data, cache, out, *extra):
    return CliRunner().invoke(main, ["evaluate", str(model), "--cache", str(cache), "--data", str(data),
                                     "--no-layerwise", *extra, "--out", str(out)])


def test_docs_hook_decodes_as_the_yolox_head(tmp_path):
    hook = postprocess.load(f"{docs_hook(tmp_path)}:decode")
    y = np.concatenate([yolox_raw(boxes=BOXES), yolox_raw(boxes=BOXES[:1])])
    kind, got = hook({"output": y})
    assert kind == "detection" and len(got) == 2
    want = heads.resolve("yolox", {"output": y}, (64, 64)).candidates({"output": y})
    for (b, s, c), (wb, ws, wc) in zip(got, want):
        np.testing.assert_allclose(b, wb, rtol=1e-6)
        np.testing.assert_allclose(s, ws, rtol=1e-6)
        assert (c == wc).all()


def test_evaluate_with_a_postprocess_hook_from_the_cli(detector, tmp_path):
    model, data, cache = detector
    hook = docs_hook(tmp_path)
    r = _evaluate(model, data, cache, tmp_path / "rep", "--postprocess", f"{hook}:decode")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["summary"]["task"] == "detection" and rep["decoder"] == "postprocess yolox_post.py:decode"
    assert rep["summary"]["fp32_boxes"] == 2 * 4  # the two known boxes in each of the four images
    t = rep["evaluation"]["configs"]["minmax"]["task"]["vs_fp32"]
    assert t["map50_95"] == pytest.approx(1.0) and t["recall"] == pytest.approx(1.0)
    assert "Decoded by postprocess yolox_post.py:decode" in (tmp_path / "rep" / "report.md").read_text()
    # the same model, task asked for: the hook's detections, not a built-in head's
    r = _evaluate(model, data, cache, tmp_path / "rep2", "--task", "detection", "--postprocess", f"{hook}:decode")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "rep2" / "report.json").read_text())["decoder"].startswith("postprocess")


def test_a_hook_returning_class_scores_makes_a_classification(tiny_model, tiny_data, tmp_path):
    hook = tmp_path / "cls.py"
    log = tmp_path / "calls.txt"
    hook.write_text("import numpy as np\n\ndef scores(outputs):\n"
                    f"    with open({str(log)!r}, 'a') as f:\n"
                    "        f.write(' '.join(f'{k} {v.shape}' for k, v in outputs.items()) + '\\n')\n"
                    "    return np.tile(np.float32([0, 1]), (len(outputs['logits']), 1))\n")
    r = CliRunner().invoke(main, ["calibrate", str(tiny_model), "--data", str(tiny_data), "--algo", "minmax",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    cache = tmp_path / "c" / "minmax.cache"
    r = _evaluate(tiny_model, tiny_data, cache, tmp_path / "rep", "--postprocess", f"{hook}:scores")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["summary"]["task"] == "classification" and rep["summary"]["metric"] == "agreement_top1"
    t = rep["evaluation"]["configs"]["minmax"]["task"]
    assert t["samples"] == 20 and t["agreement_top1"] == 1.0  # the hook's constant class, whatever the logits
    calls = log.read_text().splitlines()  # 20 samples in batches of 8: the first FP32 batch once more for its kind
    assert calls == ["logits (8, 5)"] * 5 + ["logits (4, 5)"] * 2, calls
    r = _evaluate(tiny_model, tiny_data, cache, tmp_path / "rep2", "--task", "detection",
                  "--postprocess", f"{hook}:scores")
    one_line_error(r, f"error: {hook}:scores returned class scores [N, C], which task 'detection' cannot score "
                      "(task classification does)")


@pytest.mark.parametrize("body,func,message", [
    (None, "decode", "--postprocess {file}:decode: file not found: {file}"),
    ("def decode(outputs):\n    return [\n", "decode", "--postprocess {file}:decode: the file failed to load "
                                                      "(SyntaxError: "),
    ("import not_a_module_calib_knows\n", "decode", "failed to load (ModuleNotFoundError: No module named"),
    ("def other(outputs):\n    return []\n", "decode", "--postprocess {file}:decode: hook.py has no function "
                                                        "'decode'"),
    ("decode = 3\n", "decode", "has no function 'decode' ('decode' is a int)"),
    ("def decode(outputs):\n    return {'boxes': 1}\n", "decode",
     "{file}:decode returned a dict: expected a list of 4 (boxes [K, 4] xyxy, scores [K], classes [K]), one per "
     "image, or class scores [4, C]"),
    ("import numpy as np\ndef decode(outputs):\n    return [(np.zeros((1, 3)), [0.5], [0])] * 4\n", "decode",
     "{file}:decode returned boxes [1, 3], scores [1], classes [1] for image 0: expected boxes [K, 4] xyxy"),
    ("def decode(outputs):\n    raise KeyError('output0')\n", "decode", "{file}:decode raised KeyError: 'output0'"),
])
def test_a_bad_hook_is_refused_in_one_line(detector, tmp_path, body, func, message):
    model, data, cache = detector
    file = tmp_path / "hook.py"
    if body is not None:
        file.write_text(body)
    r = _evaluate(model, data, cache, tmp_path / "rep", "--postprocess", f"{file}:{func}")
    one_line_error(r, message.format(file=file))
    assert not (tmp_path / "rep").exists()


def test_hook_spec_and_results_checked():
    with pytest.raises(ModelError, match="--postprocess 'decode.py': expected FILE.py:FUNCTION"):
        postprocess.parse("decode.py")
    with pytest.raises(DataError, match="returned classes that are not whole numbers"):
        postprocess.check([(np.zeros((1, 4)), [0.5], [0.5])], 1, "h.py:f")
    kind, got = postprocess.check([{"boxes": [[0, 0, 1, 1]], "scores": [0.9], "classes": [2]}, ((), (), ())], 2,
                                  "h.py:f")
    assert kind == "detection" and got[0][2].tolist() == [2] and got[1][0].shape == (0, 4)
    assert postprocess.check(np.zeros((3, 5)), 3, "h.py:f")[0] == "classification"
    with pytest.raises(DataError, match=r"returned an array \[2, 5\]: expected a list of 3"):
        postprocess.check(np.zeros((2, 5)), 3, "h.py:f")


def test_recipe_key_resolves_against_the_recipe_and_calib_run_uses_it(detector, tmp_path):
    model, data, _ = detector
    docs_hook(tmp_path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""
name: hooked
model: {model.name}
calibration_data: {{kind: npy, path: {data.name}}}
calibration: {{algorithms: [minmax, mse], batch_size: 4}}
evaluation: {{postprocess: yolox_post.py:decode, batch_size: 4}}
output: out
""")
    assert load_recipe(recipe).evaluation.postprocess == f"{tmp_path / 'yolox_post.py'}:decode"
    with pytest.raises(RecipeError, match=r"evaluation.postprocess: file not found: .*missing.py"):
        load_recipe(recipe, ["evaluation.postprocess=missing.py:decode"])
    with pytest.raises(RecipeError, match="evaluation.postprocess: expected FILE.py:FUNCTION, got 'yolox_post.py'"):
        load_recipe(recipe, ["evaluation.postprocess=yolox_post.py"])
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["summary"]["task"] == "detection" and rep["decoder"] == "postprocess yolox_post.py:decode"
    assert "close to FP32: mAP50:95 vs FP32 1.000 (threshold 0.950)" in r.output
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet", "--set", "evaluation.postprocess=yolox_post.py:nope"])
    one_line_error(r, f"{recipe}: evaluation.postprocess {tmp_path / 'yolox_post.py'}:nope: yolox_post.py has no "
                      "function 'nope'")


def test_a_head_no_built_in_decoder_fits_is_scored_through_the_hook_in_evaluate_and_the_search(tmp_path):
    from calib.errors import ModelError
    from calib.evaluate.api import evaluate
    from calib.quantize.model import load_model
    from calib.recipe import DetectionSpec
    from calib.search.fallback import Scorer

    model = fixed_outputs(tmp_path / "flat.onnx", {"flat": yolox_raw(boxes=BOXES).reshape(1, -1)})
    hook_file = tmp_path / "flat_post.py"
    hook_file.write_text("from calib.evaluate import heads\n\n\ndef decode(outputs):\n"
                         "    y = outputs['flat'].reshape(len(outputs['flat']), 84, 7)\n"
                         "    return heads.Head('yolox', ('o',), ((8, 8), (4, 4), (2, 2))).candidates({'o': y})\n")
    hook = postprocess.load(f"{hook_file}:decode")
    x = np.random.default_rng(0).random((4, 3, 64, 64), dtype=np.float32)
    with pytest.raises(ModelError, match="needs outputs boxes .* or a postprocess hook"):
        evaluate(model, {"a": {}}, x, task="detection")
    res = evaluate(model, {"a": {}}, x, task="detection", postprocess=hook)
    assert res["fp32_boxes"] == 8 and res["configs"]["a"]["task"]["vs_fp32"]["recall"] == 1.0
    batches = [({"images": x}, None)]
    with pytest.raises(ModelError, match="no built-in head fits the outputs flat"):
        Scorer(load_model(model), {}, batches, "map50")
    assert Scorer(load_model(model), {}, batches, "map50", DetectionSpec(), hook).fp32_score == 1.0
