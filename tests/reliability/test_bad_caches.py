"""Bad caches through the command line: one line naming the file, exit 2, nothing written."""
import json

import pytest
from click.testing import CliRunner

from calib.cli import main
from calib.quantize.cache import hex_to_scale
from conftest import conv_relu_gap
from reliability.test_bad_inputs import one_line_failure

TENSORS = ("input", "conv1", "relu1", "pool1", "conv2", "add1", "gap", "flat", "logits")  # conv_relu_gap's
GOOD = "TRT-8600-EntropyCalibration2\n" + "".join(f"{t}: 3c810204\n" for t in TENSORS)
GOOD_AMAX = {t: hex_to_scale("3c810204") * 127 for t in TENSORS}


@pytest.mark.parametrize("text,needle", [
    ("", "empty file"),
    ("TRT-8600-EntropyCalib\ninput 3c010204\n", "line 2"),  # no ': ' separator
    ("HELLO\ninput: 3c010204\n", "line 1"),
    ("TRT-8600-EntropyCalibration2\ninput: 3c010204\ninput: 3c010204\n", "twice"),
    ("TRT-8600-EntropyCalibration2\ninput: 3c01zz04\n", "line 2"),
    ("TRT-8600-EntropyCalibration2\ninput: 7f800000\n", "scale inf"),
    ("TRT-8600-EntropyCalibration2\ninput: 3c0102", "line 2"),  # truncated value
    ("TRT-8600-EntropyCalibration2\nother_model_tensor: 3c010204\n", "not in the model"),
])
def test_bad_cache(tmp_path, text, needle):
    model = conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "c.cache").write_text(text)
    r = CliRunner().invoke(main, ["cache", "convert", str(tmp_path / "c.cache"), "--model", str(model), "--to", "qdq",
                                  "-o", str(tmp_path / "q.onnx")])
    one_line_failure(r, "c.cache", needle)
    assert r.exit_code == 2 and not (tmp_path / "q.onnx").exists()


def test_other_model_hash_and_override(tmp_path):
    model = conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "c.cache").write_text(GOOD)
    (tmp_path / "c.json").write_text(json.dumps({"algorithm": "minmax", "amax": GOOD_AMAX, "model_sha256": "0" * 64}))
    args = ["cache", "convert", str(tmp_path / "c.cache"), "--model", str(model), "--to", "qdq", "-o",
            str(tmp_path / "q.onnx")]
    one_line_failure(CliRunner().invoke(main, args), "c.json", "--ignore-hash")
    assert CliRunner().invoke(main, [*args, "--ignore-hash"]).exit_code == 0


def test_inspect_checks_the_model_hash(tmp_path):
    model = conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "c.cache").write_text(GOOD)
    (tmp_path / "c.json").write_text(json.dumps({"algorithm": "minmax", "amax": GOOD_AMAX, "model_sha256": "0" * 64}))
    args = ["cache", "inspect", str(tmp_path / "c.cache"), "--model", str(model)]
    one_line_failure(CliRunner().invoke(main, args), "c.json", "--ignore-hash")
    r = CliRunner().invoke(main, [*args, "--ignore-hash"])
    assert r.exit_code == 0 and "conv1" in r.output
    assert CliRunner().invoke(main, args[:3]).exit_code == 0  # without --model there is nothing to check


def test_closed_pipe_ends_quietly(tmp_path):
    """`calib cache inspect big.cache | head -1`: no error line once the reader has gone."""
    import subprocess
    import sys

    (tmp_path / "c.cache").write_text("TRT-8600-EntropyCalibration2\n" +
                                      "".join(f"t{i}: 3c010204\n" for i in range(20000)))
    code = "import sys; from calib.cli import main; sys.exit(main())"
    p = subprocess.run(f"'{sys.executable}' -c '{code}' cache inspect '{tmp_path / 'c.cache'}' | head -1",
                       shell=True, capture_output=True, text=True, executable="/bin/bash")
    assert p.stdout.startswith("TRT-8600-EntropyCalibration2") and p.stderr == ""


def test_unknown_tensors_override(tmp_path):
    model = conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "c.cache").write_text(GOOD + "ghost: 3c010204\n")
    args = ["cache", "convert", str(tmp_path / "c.cache"), "--model", str(model), "--to", "qdq", "-o",
            str(tmp_path / "q.onnx")]
    one_line_failure(CliRunner().invoke(main, args), "'ghost'", "--allow-unknown")
    assert CliRunner().invoke(main, [*args, "--allow-unknown"]).exit_code == 0


BIG = {"input": 3e4, "conv1": 1.4e5, "relu1": 1.4e5, "pool1": 1.4e5, "conv2": 2.8e5, "add1": 2.7e5, "gap": 1.3e5,
       "flat": 1.3e5, "logits": 2e5}  # a cache whose own amax keeps every layer past FP16 in FP32


@pytest.mark.parametrize("doc,needle", [
    ('{"absmax": {}}', "names none of the tensors"),
    ('{}', "names none of the tensors"),
    ('{"absmax": {"images": 3.0, "out": 5.0}}', "names none of the tensors"),  # another model's
    ('{"absmax": {"input": NaN, "conv1": 1.0}}', "tensor 'input'"),
    ('{"absmax": {"input": 1.0, "conv1": Infinity}}', "tensor 'conv1'"),
    ('{"absmax": {"input": 1.0, "conv1": -1e9}}', "tensor 'conv1'"),
    ('{"absmax": {"input": 1.0, "relu1": true}}', "tensor 'relu1'"),
    ('{"absmax": {"input": 1.0, "relu1": "1e5"}}', "tensor 'relu1'"),
    ('{"absmax": {"input": 1.0, "relu1": null}}', "tensor 'relu1'"),
    ('{"absmax": [1, 2]}', "expected"),
])
def test_ranges_file_that_does_not_fit_is_refused(tmp_path, doc, needle):
    from calib.quantize.cache import write_cache

    from reliability.test_bad_inputs import snapshot

    model = conv_relu_gap(tmp_path / "m.onnx")
    write_cache(tmp_path / "c.cache", BIG)
    (tmp_path / "ranges.json").write_text(doc)
    before = snapshot(tmp_path)
    for args in (["cache", "migrate"], ["cache", "convert", "--to", "qdq", "--float-type", "fp16"]):
        r = CliRunner().invoke(main, ["--quiet", *args, str(tmp_path / "c.cache"), "--model", str(model), "--ranges",
                                      str(tmp_path / "ranges.json"), "-o", str(tmp_path / "q.onnx")])
        one_line_failure(r, "ranges.json", needle)
        assert r.exit_code == 2 and not (tmp_path / "q.onnx").exists()
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("low", [0.0, 1.0, 2048.0, 65504.0])
def test_ranges_below_the_cache_never_send_its_fp32_layers_to_fp16(tmp_path, low):
    import onnx

    from calib.quantize.cache import write_cache

    model = conv_relu_gap(tmp_path / "m.onnx")
    write_cache(tmp_path / "c.cache", BIG)
    (tmp_path / "ranges.json").write_text(json.dumps({"absmax": {t: low for t in ("input", "conv1", "conv2")}}))
    r = CliRunner().invoke(main, ["--quiet", "cache", "migrate", str(tmp_path / "c.cache"), "--model", str(model),
                                  "--ranges", str(tmp_path / "ranges.json"), "-o", str(tmp_path / "q.onnx")])
    assert r.exit_code == 0, r.output
    kept = {line.split()[1] for line in r.output.splitlines() if line.strip().startswith("FP32")}
    assert {"conv1", "relu1", "pool1", "conv2", "add1", "fc"} <= kept, r.output
    q = onnx.load(str(tmp_path / "q.onnx"))
    onnx.checker.check_model(q)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in onnx.shape_inference.infer_shapes(q).graph.value_info}
    assert all(types.get(t) != onnx.TensorProto.FLOAT16 for t in ("conv1", "conv2", "add1")), types


@pytest.mark.parametrize("scale", [65536.0, 7e4, 1e6, 1e30])
@pytest.mark.parametrize("command", [["cache", "migrate"], ["cache", "convert", "--to", "qdq", "--float-type", "fp16"]])
def test_a_scale_past_fp16_keeps_its_qdq_pair_fp32_and_says_so(tmp_path, scale, command):
    """A cache scale of 1e6 was written as 65504 (15x too small), with numpy's raw overflow warning."""
    import warnings

    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from calib.quantize.cache import write_cache

    model = conv_relu_gap(tmp_path / "m.onnx")
    amax = dict(BIG, pool1=scale * 127, conv1=scale * 127, relu1=scale * 127)
    write_cache(tmp_path / "c.cache", amax)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = CliRunner().invoke(main, [*command, str(tmp_path / "c.cache"), "--model", str(model),
                                      "-o", str(tmp_path / "q.onnx")])
    assert r.exit_code == 0, r.output
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    assert "overflow" not in r.output and "fp16.py" not in r.output
    said = [line for line in r.output.splitlines() if "past FP16's largest value" in line]
    assert len(said) == 1 and "pool1" in said[0], r.output
    q = onnx.load(str(tmp_path / "q.onnx"))
    onnx.checker.check_model(q)
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    for n in q.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] in inits:
            s = inits[n.input[1]]
            assert not np.any(s == np.float16(65504)), (n.name, s)  # never clipped to FP16's largest
            if n.input[0].startswith("pool1"):
                assert s.dtype == np.float32 and float(s) == pytest.approx(np.float32(scale), rel=1e-6)
    sess = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    sess.run(None, {"input": np.zeros((1, 3, 8, 8), np.float32)})


@pytest.mark.parametrize("digits", ["\u0668\u0666\u0660\u0660", "\u0968\u0966\u0966\u0966", "８６００", "86\u00b2",
                                    "8\u0666\u0660\u0660", "\U0001d7e0600"])
def test_a_header_whose_version_digits_are_not_ascii_is_refused_and_never_written(tmp_path, digits):
    """Python's \\d (and str.isdigit) take Arabic-Indic, Devanagari, full-width or superscript digits; TensorRT's
    parser reads ASCII 0-9 only."""
    from reliability.test_bad_inputs import snapshot

    model = conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "c.cache").write_text(GOOD.replace("8600", digits, 1), encoding="utf-8")
    before = snapshot(tmp_path)
    for args in (["cache", "inspect", tmp_path / "c.cache"],
                 ["cache", "convert", tmp_path / "c.cache", "--model", model, "--to", "cache", "-o",
                  tmp_path / "out.cache"],
                 ["cache", "convert", tmp_path / "c.cache", "--model", model, "--to", "qdq", "-o", tmp_path / "q.onnx"],
                 ["cache", "migrate", tmp_path / "c.cache", "--model", model, "-o", tmp_path / "q.onnx"]):
        r = CliRunner().invoke(main, ["--quiet", *map(str, args)])
        one_line_failure(r, "c.cache", "line 1", "ASCII")
        assert r.exit_code == 2 and snapshot(tmp_path) == before
    (tmp_path / "c.cache").write_text(GOOD)
    before = snapshot(tmp_path)
    r = CliRunner().invoke(main, ["--quiet", "cache", "convert", str(tmp_path / "c.cache"), "--model", str(model),
                                  "--to", "cache", "--trt-version", digits, "-o", str(tmp_path / "out.cache")])
    one_line_failure(r, "--trt-version", "ASCII")
    assert r.exit_code == 2 and snapshot(tmp_path) == before


@pytest.mark.parametrize("peak", [7e4, 2.4e6, 1e30])
def test_io_type_fp16_on_an_output_past_fp16_is_said(tmp_path, peak):
    """--io-type fp16 on a model whose output the cache shows at 2.4e6 overflowed to inf without a word."""
    from calib.quantize.cache import write_cache

    model = conv_relu_gap(tmp_path / "m.onnx")
    write_cache(tmp_path / "c.cache", dict(GOOD_AMAX, logits=peak))
    r = CliRunner().invoke(main, ["cache", "migrate", str(tmp_path / "c.cache"), "--model", str(model),
                                  "--io-type", "fp16", "-o", str(tmp_path / "q.onnx")])
    assert r.exit_code == 0, r.output
    said = [line for line in r.output.splitlines() if "--io-type fp16" in line]
    assert len(said) == 1 and "'logits'" in said[0] and "65504" in said[0], r.output
    r = CliRunner().invoke(main, ["cache", "migrate", str(tmp_path / "c.cache"), "--model", str(model),
                                  "-o", str(tmp_path / "q32.onnx")])
    assert r.exit_code == 0 and "--io-type fp16" not in r.output, r.output
