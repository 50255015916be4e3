"""What would be silently wrong is refused: a tensor name holding a line break (a cache is one line per tensor),
and a model holding Q/DQ nodes given where an FP32 model is to be quantized (unless the user says so)."""
import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from calib.cli import main
from conftest import conv_relu_gap
from reliability.test_bad_inputs import no_files, one_line_failure


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def renamed(path, old, new):
    """The model at `path` with tensor `old` renamed `new` everywhere."""
    m = onnx.load(path)
    for node in m.graph.node:
        node.input[:] = [new if t == old else t for t in node.input]
        node.output[:] = [new if t == old else t for t in node.output]
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("brk", ["\n", "\r", "\u2028", "\u2029", "\x85", "\x0b", "\x1e"])
def test_tensor_name_with_a_line_break_is_refused_at_calibration(tmp_path, brk):
    model = renamed(conv_relu_gap(tmp_path / "m.onnx"), "relu1", f"relu{brk}1")
    np.save(tmp_path / "a.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    r = invoke("--quiet", "calibrate", model, "--data", tmp_path / "a.npy", "--algo", "minmax", "--out", tmp_path / "o")
    one_line_failure(r, "m.onnx", f"tensor {ascii('relu' + brk + '1')}", "line break")
    assert no_files(tmp_path / "o")


def test_tensor_name_with_a_line_break_is_refused_in_a_cache():
    from calib.errors import CacheError
    from calib.quantize.cache import format_cache, parse_cache

    with pytest.raises(CacheError, match=r"tensor 'a\\u2028b' holds a line break \(U\+2028\)"):
        format_cache({"a\u2028b": 1.0})
    assert list(parse_cache(format_cache({"a: b c": 1.0})).scales) == ["a: b c"]  # other odd names round-trip


@pytest.fixture
def qdq(tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    np.save(tmp_path / "a.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / "a.npy", "--algo", "minmax",
               "--out", tmp_path / "c")
    assert r.exit_code == 0, r.output
    r = invoke("cache", "convert", tmp_path / "c" / "minmax.cache", "--model", tmp_path / "m.onnx", "--to", "qdq",
               "-o", tmp_path / "q.onnx")
    assert r.exit_code == 0, r.output
    return tmp_path


def test_qdq_model_refused_as_fp32_input(qdq):
    t = qdq
    r = invoke("--quiet", "calibrate", t / "q.onnx", "--data", t / "a.npy", "--algo", "minmax", "--out", t / "o")
    one_line_failure(r, "q.onnx", "QuantizeLinear/DequantizeLinear", "--allow-qdq")
    assert no_files(t / "o")
    r = invoke("cache", "convert", t / "c" / "minmax.cache", "--model", t / "q.onnx", "--to", "qdq", "--allow-unknown",
               "-o", t / "qq.onnx")
    one_line_failure(r, "q.onnx", "QuantizeLinear/DequantizeLinear", "--allow-qdq")
    assert not (t / "qq.onnx").exists()
    r = invoke("evaluate", t / "q.onnx", "--cache", t / "c" / "minmax.cache", "--data", t / "a.npy", "--allow-unknown",
               "-o", t / "rep")
    one_line_failure(r, "q.onnx", "QuantizeLinear/DequantizeLinear", "--allow-qdq")
    assert no_files(t / "rep")


def test_qdq_model_accepted_when_the_user_says_so(qdq):
    t = qdq
    r = invoke("--quiet", "calibrate", t / "q.onnx", "--data", t / "a.npy", "--algo", "minmax", "--allow-qdq",
               "--out", t / "o")
    assert r.exit_code == 0, r.output
    assert (t / "o" / "minmax.cache").is_file()


def test_qdq_model_in_a_recipe_needs_the_key(qdq):
    t = qdq
    recipe = ("name: q\nmodel: q.onnx\ncalibration_data: {kind: npy, path: a.npy}\n"
              "calibration: {algorithms: [minmax], batch_size: 4%s}\noutput: out\n")
    (t / "r.yaml").write_text(recipe % "")
    one_line_failure(invoke("--quiet", "run", t / "r.yaml"), "q.onnx", "calibration.allow_qdq")
    assert no_files(t / "out")
    (t / "r.yaml").write_text(recipe % ", allow_qdq: true")
    r = invoke("--quiet", "run", t / "r.yaml")
    assert r.exit_code == 0, r.output
