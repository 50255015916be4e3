"""User hooks that misbehave (--postprocess, recipe evaluation.postprocess): an exit or any BaseException in the
file or the function, and NaN or Inf in what it returns, stop the command in one line naming the hook, exit code 2;
loading a hook writes nothing beside it (no __pycache__)."""
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from calib.cli import main
from conftest import conv_relu_gap
from reliability.test_bad_inputs import TINY, no_files, one_line_failure, snapshot

CLASS_SCORES = 'def post(outputs):\n    return outputs["logits"]\n'
DETECTIONS = ("def post(outputs):\n    n = len(outputs['logits'])\n"
              "    return [(np.array([[1.0, 1, 4, 4]]) * {box}, np.array([0.9]) * {score}, np.array([0])) "
              "for _ in range(n)]\n")


@pytest.fixture
def made(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as a user's Python writes bytecode by default
    conv_relu_gap(tmp_path / "m.onnx")
    np.save(tmp_path / "a.npy", np.random.default_rng(0).random((8, 3, 8, 8), dtype=np.float32))
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "a.npy"),
                                  "--algo", "minmax", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    (tmp_path / "hooks").mkdir()
    return tmp_path


def evaluate(t, hook_file, *extra):
    return CliRunner().invoke(main, ["--quiet", "evaluate", str(t / "m.onnx"), "--cache", str(t / "c" / "minmax.cache"),
                                     "--data", str(t / "a.npy"), "--postprocess", f"{hook_file}:post", *extra,
                                     "--out", str(t / "rep")])


BAD_HOOKS = [
    ("import sys\ndef post(outputs):\n    sys.exit(0)\n", "SystemExit"),
    ("import sys\ndef post(outputs):\n    sys.exit(1)\n", "SystemExit"),
    ("def post(outputs):\n    raise SystemExit\n", "SystemExit"),
    ("def post(outputs):\n    raise GeneratorExit('x')\n", "GeneratorExit"),
    ("class Odd(BaseException):\n    pass\ndef post(outputs):\n    raise Odd('odd')\n", "Odd"),
    ("import sys\nsys.exit(0)\n" + CLASS_SCORES, "SystemExit"),  # at import
    ("raise SystemExit('bye')\n" + CLASS_SCORES, "SystemExit"),
    ("import numpy as np\ndef post(outputs):\n    return np.full_like(outputs['logits'], np.nan)\n", "NaN or Inf"),
    ("import numpy as np\ndef post(outputs):\n    x = outputs['logits'].copy(); x[:, 1] = np.inf\n    return x\n",
     "NaN or Inf"),
    ("import numpy as np\ndef post(outputs):\n    x = outputs['logits'].copy(); x[3, 0] = -np.inf\n    return x\n",
     "NaN or Inf"),
    ("import numpy as np\n" + DETECTIONS.format(box="np.nan", score="1"), "NaN or Inf in its boxes"),
    ("import numpy as np\n" + DETECTIONS.format(box="1", score="np.nan"), "NaN or Inf in its scores"),
    ("import numpy as np\n" + DETECTIONS.format(box="np.inf", score="1"), "NaN or Inf in its boxes"),
]


@pytest.mark.parametrize("body,needle", BAD_HOOKS)
def test_a_hook_that_exits_raises_or_returns_nonfinite_values_is_an_error_naming_it(made, body, needle):
    t = made
    (t / "hooks" / "h.py").write_text(body)
    before = snapshot(t, [t / "rep"])
    r = evaluate(t, t / "hooks" / "h.py")
    one_line_failure(r, "h.py", "post" if "import" not in body.split("def")[0] else "h.py", needle)
    assert r.exit_code == 2 and "100.0 %" not in r.output
    assert no_files(t / "rep")
    assert snapshot(t, [t / "rep"]) == before  # the hook's folder too: no __pycache__ beside the user's file


@pytest.mark.parametrize("body,needle", BAD_HOOKS[:2] + BAD_HOOKS[5:8])
def test_a_recipe_hook_that_misbehaves_is_an_error_naming_it(made, body, needle):
    t = made
    (t / "hooks" / "h.py").write_text(body)
    text = TINY.format(kind="npy", path="a.npy").replace("tiny.onnx", "m.onnx").replace(
        "preprocess: {resize: [8, 8], mode: exact}\n", "") + "evaluation: {postprocess: hooks/h.py:post}\n"
    (t / "r.yaml").write_text(text)
    before = snapshot(t, [t / "out"])
    r = CliRunner().invoke(main, ["--quiet", "run", str(t / "r.yaml")])
    one_line_failure(r, "h.py", needle)
    assert r.exit_code == 2 and no_files(t / "out")
    assert snapshot(t, [t / "out"]) == before


def test_a_good_hook_leaves_its_folder_as_it_was(made):
    t = made
    (t / "hooks" / "h.py").write_text(CLASS_SCORES)
    before = snapshot(t / "hooks")
    r = evaluate(t, t / "hooks" / "h.py")
    assert r.exit_code == 0, r.output
    assert "top-1 agreement" in r.output
    assert snapshot(t / "hooks") == before
