"""A cache holding a zero scale (a tensor zero on every calibration batch: TensorRT writes `name: 0`) is accepted
wherever a cache is read; that tensor stays unquantized, and no Q/DQ model calib writes holds a zero scale."""
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from calib.cli import main
from calib.deploy.precision import implicit_rules
from calib.deploy.simulate import implicit_qdq
from calib.quantize.cache import read_cache
from calib.quantize.qdq import insert_qdq
from conftest import conv_relu_gap
from test_tensorrt_cli import calib_cli


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def zero_input_cache(tmp_path):
    """The model, and a TensorRT-style cache (no sidecar) of it whose `input` line is TensorRT's `input: 0`."""
    conv_relu_gap(tmp_path / "m.onnx")
    np.save(tmp_path / "a.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / "a.npy", "--algo", "minmax",
               "--out", tmp_path / "c")
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "c" / "minmax.cache").read_text().splitlines()
    lines = [("input: 0" if ln.startswith("input: ") else ln) for ln in lines]
    (tmp_path / "z.cache").write_text("\n".join(lines) + "\n")
    return tmp_path


def scales_and_quantized(model):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    qs = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    scales = np.concatenate([inits[n.input[1]].ravel() for n in qs]) if qs else np.array([1.0])
    return scales, {n.input[0] for n in qs if n.op_type == "QuantizeLinear"}


def test_zero_scale_cache_converts_to_qdq_leaving_the_tensor_float(zero_input_cache):
    t = zero_input_cache
    assert read_cache(t / "z.cache").scales["input"] == 0.0
    r = invoke("cache", "convert", t / "z.cache", "--model", t / "m.onnx", "--to", "qdq", "-o", t / "q.onnx")
    assert r.exit_code == 0, r.output
    scales, quantized = scales_and_quantized(onnx.load(t / "q.onnx"))
    assert "input" not in quantized and "relu1" in quantized  # the zero tensor stays float, the others do not
    assert scales.min() > 0 and np.isfinite(scales).all()


def test_zero_scale_cache_converts_to_cache_and_is_read_back(zero_input_cache):
    t = zero_input_cache
    r = invoke("cache", "convert", t / "z.cache", "--model", t / "m.onnx", "--to", "cache", "-o", t / "z2.cache")
    assert r.exit_code == 0, r.output
    assert read_cache(t / "z2.cache").scales["input"] == 0.0
    for args in (["cache", "inspect", t / "z2.cache", "--model", t / "m.onnx"],
                 ["cache", "diff", t / "z.cache", t / "c" / "minmax.cache"],
                 ["evaluate", t / "m.onnx", "--cache", t / "z2.cache", "--data", t / "a.npy", "-o", t / "rep"]):
        r = invoke(*args)
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output


def test_zero_scale_cache_builds_an_engine(zero_input_cache):
    t = zero_input_cache
    r = calib_cli("build", t / "m.onnx", "--cache", t / "z.cache", "--precision", "int8,fp16", "-o", t / "m.engine")
    assert r.returncode == 0, r.stderr
    assert (t / "m.engine").is_file()


def test_all_zero_calibration_gives_no_activation_qdq(tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    np.save(tmp_path / "zeros.npy", np.zeros((4, 3, 8, 8), np.float32))
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / "zeros.npy", "--algo", "minmax",
               "--out", tmp_path / "c")
    assert r.exit_code == 0, r.output
    r = invoke("cache", "convert", tmp_path / "c" / "minmax.cache", "--model", tmp_path / "m.onnx", "--to", "qdq",
               "-o", tmp_path / "q.onnx")
    assert r.exit_code == 0, r.output
    model = onnx.load(tmp_path / "q.onnx")
    scales, quantized = scales_and_quantized(model)
    weights = {t.name for t in model.graph.initializer}
    assert quantized and quantized <= weights  # only weights: every activation was zero
    assert scales.min() > 0


@pytest.mark.parametrize("amax", [0.0, 1e-44])  # zero, and an amax whose float32 scale underflows to zero
def test_no_zero_scale_in_qdq_or_simulation(tmp_path, amax):
    model = onnx.load(conv_relu_gap(tmp_path / "m.onnx"))
    table = {n: 1.0 for n in ("input", "conv1", "relu1", "pool1", "conv2", "add1", "gap", "flat", "logits")}
    table["input"] = amax
    for q in (insert_qdq(model, table), implicit_qdq(model, table, implicit_rules(model))):
        scales, quantized = scales_and_quantized(q)
        assert "input" not in quantized and scales.min() > 0
        assert quantized - {t.name for t in model.graph.initializer}  # other activations are quantized
