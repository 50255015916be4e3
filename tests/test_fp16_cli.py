"""The FP16+INT8 model through the commands: `calib cache convert --float-type fp16`, `calib cache migrate` on
TensorRT 8.6's own caches (tests/golden), `calib evaluate --float-type fp16` and `calib run` with
calibration.float_type."""
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from calib.cli import main
from calib.quantize.cache import read_cache
from calib.quantize.fp16_model import check
from conftest import ROOT, golden
from test_recipe_run import _images


def invoke(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def _scales(model) -> dict:
    """Activation tensor -> the scale of its QuantizeLinear."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n.input[0]: inits[n.input[1]] for n in model.graph.node
            if n.op_type == "QuantizeLinear" and n.input[0] not in inits and n.input[1] in inits}


@pytest.mark.parametrize("folder,cache,model", [
    ("cnn", "int8-entropy2.cache", "cnn.onnx"),
    ("mobilenet_v2", "entropy2.cache", "mobilenet_v2_imagenet.onnx"),
    ("mobilenet_v2", "minmax.cache", "mobilenet_v2_imagenet.onnx"),
])
def test_migrate_tensorrt_86_caches_to_the_tensorrt_11_model(tmp_path, folder, cache, model):
    """TensorRT's own caches (header TRT-8600-..., `(Unnamed Layer* N)` names for layers it adds) + the model: the
    FP16+INT8 model whose activation scales are the cache's, as FP16 values."""
    c, m = golden(folder, cache), golden(folder, model)
    assert any("Unnamed Layer" in n for n in read_cache(c).scales)
    out = tmp_path / "m.fp16.qdq.onnx"
    r = invoke("cache", "migrate", c, "--model", m, "-o", out)
    assert r.exit_code == 0, r.output
    assert "opset 19" in r.output and "float layers FP16" in r.output
    q = onnx.load(str(out))
    check(q)
    want = read_cache(c).scales
    got = _scales(q)
    assert got and set(got) <= set(want)
    for t, s in got.items():
        assert s.dtype in (np.float16, np.float32)
        assert float(s) == float(np.float16(np.float32(want[t]))), t  # the cache's scale, rounded to FP16
    # the inputs and outputs stay FP32
    assert {i.type.tensor_type.elem_type for i in q.graph.input} == {onnx.TensorProto.FLOAT}


def test_convert_fp16_with_ranges_names_the_fp32_layers(tmp_path):
    c, m = golden("cnn", "int8-entropy2.cache"), golden("cnn", "cnn.onnx")
    proto = onnx.load(str(m))
    relu = next(n for n in proto.graph.node if n.op_type == "Relu")
    ranges = tmp_path / "ranges.json"
    ranges.write_text(json.dumps({"absmax": {relu.output[0]: 1e5}}))
    out = tmp_path / "q.onnx"
    r = invoke("cache", "convert", c, "--model", m, "--to", "qdq", "--float-type", "fp16", "--ranges", ranges,
               "-o", out)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.strip().startswith("FP32"))
    assert (relu.name or relu.output[0]) in line and "range" in line and "100000" in line
    r = invoke("cache", "convert", c, "--model", m, "--to", "qdq", "--float-type", "fp16", "--io-type", "fp16",
               "-o", tmp_path / "h.onnx")
    assert r.exit_code == 0, r.output
    assert onnx.load(str(tmp_path / "h.onnx")).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


@pytest.mark.parametrize("args,message", [
    (["--to", "cache", "--float-type", "fp16"], "apply to --to qdq only"),
    (["--to", "qdq", "--io-type", "fp16"], "apply to --float-type fp16 only"),
    (["--to", "qdq", "--float-type", "fp16", "--ranges", "RANGES"], "--ranges"),
])
def test_convert_refusals_are_one_line(tmp_path, args, message):
    bad = tmp_path / "ranges.json"
    bad.write_text('{"absmax": {"x": "big"}}')
    args = [str(bad) if a == "RANGES" else a for a in args]
    out = tmp_path / "o.onnx"
    r = invoke("cache", "convert", golden("cnn", "int8-entropy2.cache"), "--model", golden("cnn", "cnn.onnx"),
               *args, "-o", out)
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not out.exists()


def test_evaluate_float_type_fp16_adds_the_two_rows(tmp_path):
    m, c = golden("cnn", "cnn.onnx"), golden("cnn", "int8-minmax.cache")
    data = tmp_path / "x.npy"
    np.save(data, np.load(golden("cnn", "cnn_calib.npy"))[:16])
    r = invoke("evaluate", m, "--cache", c, "--data", data, "--float-type", "fp16", "--no-layerwise",
               "-o", tmp_path / "ev")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "ev" / "report.json").read_text())
    rows = rep["evaluation"]["configs"]
    assert {"int8-minmax", "int8-minmax qdq", "int8-minmax qdq-fp16"} <= set(rows)
    assert rep["summary"]["best"] == "int8-minmax"  # the rows are not candidates to ship
    assert rows["int8-minmax qdq-fp16"]["backend"] == "onnxruntime (FP16 emulated)"
    md = (tmp_path / "ev" / "report.md").read_text()
    assert "## Strongly typed model (FP16+INT8)" in md and "--float-type fp16" in rep["rerun"]


def test_run_with_float_type_fp16_writes_the_model_ranges_and_rows(tmp_path, tiny_model):
    _images(tmp_path / "imgs")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""
name: tiny
model: {tiny_model.name}
calibration_data: {{kind: folder, path: imgs}}
preprocess: {{resize: [8, 8], mode: exact}}
calibration: {{algorithms: [minmax, mse], batch_size: 4, trt_version: "110000"}}
evaluation: {{task: classification, batch_size: 4}}
output: out
""")
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    rep = json.loads((out / "report.json").read_text())
    best = rep["summary"]["best"]
    assert rep["fp16_model"] == f"tiny.{best}.fp16.qdq.onnx" and (out / rep["fp16_model"]).is_file()
    assert rep["fp16"]["rows"] == [f"{best} qdq", f"{best} qdq-fp16"]
    assert set(rep["fp16"]["rows"]) <= set(rep["evaluation"]["configs"])
    assert [c for c in rep["summary"]["paired"] if {c["a"], c["b"]} == set(rep["fp16"]["rows"])]  # the Deploy's
    ranges = json.loads((out / "ranges.json").read_text())["absmax"]
    assert 0.5 < ranges["input"] <= 1.0  # /255 pixels
    check(onnx.load(str(out / rep["fp16_model"])))
    assert rep["fp16_model"] in rep["files"] and "ranges.json" in rep["files"]
    # the TensorRT 11 default; an 8.6 recipe writes no FP16+INT8 model unless asked
    recipe.write_text(recipe.read_text().replace('trt_version: "110000"', 'trt_version: "8600"'))
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet", "--out", str(tmp_path / "o86")])
    assert r.exit_code == 0, r.output
    assert "fp16_model" not in json.loads((tmp_path / "o86" / "report.json").read_text())
    assert not list((tmp_path / "o86").glob("*.fp16.qdq.onnx"))


def test_docs_document_the_migration():
    text = (ROOT / "docs" / "tensorrt-versions.md").read_text()
    assert "calib cache migrate" in text and "--float-type fp16" in text
