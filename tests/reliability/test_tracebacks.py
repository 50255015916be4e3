"""Faults that gave a traceback, a message over several lines or a silent death now give one `error:` line:
wrongly typed engine JSON, a non-UTF-8 layer precisions file, a name holding a newline, a .npy cut during the
pass."""
import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from calib.cli import main
from conftest import ROOT, conv_relu_gap
from reliability.test_bad_inputs import no_files, one_line_failure


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def made(tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    np.save(tmp_path / "a.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / "a.npy", "--algo", "minmax",
               "--out", tmp_path / "c")
    assert r.exit_code == 0, r.output
    return tmp_path


@pytest.mark.parametrize("doc, needle", [
    ({"layers": [{"fused": [1, 2], "precision": "int8"}]}, "engine layer 0: 'fused' must be a list of layer names"),
    ({"layers": [3]}, "engine layer 0 must be an object"),
    ({"layers": [{"fused": ["conv1"], "precision": 3}]}, "engine layer 0: 'precision' must be one of"),
])
def test_wrongly_typed_engine_json(made, doc, needle):
    t = made
    (t / "e.json").write_text(json.dumps(doc))
    r = invoke("cache", "convert", t / "c" / "minmax.cache", "--model", t / "m.onnx", "--to", "qdq",
               "--like-engine", t / "e.json", "-o", t / "q.onnx")
    one_line_failure(r, "e.json", needle)
    assert not (t / "q.onnx").exists()
    r = invoke("evaluate", t / "m.onnx", "--cache", t / "c" / "minmax.cache", "--data", t / "a.npy",
               "--engine-layers", t / "e.json", "-o", t / "rep")
    one_line_failure(r, "e.json", needle)
    assert no_files(t / "rep")


@pytest.mark.parametrize("doc", [{"Layers": [3]}, {"Layers": [{"Name": 5}]}])
def test_wrongly_typed_inspector_json(made, doc):
    t = made
    (t / "e.json").write_text(json.dumps(doc))
    r = invoke("evaluate", t / "m.onnx", "--cache", t / "c" / "minmax.cache", "--data", t / "a.npy",
               "--engine-layers", t / "e.json", "-o", t / "rep")
    one_line_failure(r, "e.json", "inspector layer 0 must be a name or an object with a string 'Name'")


def test_non_utf8_layer_precisions_file(made):
    (made / "lp.txt").write_bytes(b"op:Gemm=fp32\n\xff\xfeconv1=fp16\n")
    r = invoke("build", made / "m.onnx", "--precision", "fp16", "--layer-precisions-file", made / "lp.txt",
               "-o", made / "m.engine")
    one_line_failure(r, "lp.txt", "layer precisions file is not UTF-8 text (byte 13")
    assert not (made / "m.engine").exists()


def test_a_file_name_holding_a_newline_stays_on_one_line(made):
    r = invoke("cache", "inspect", made / "two\nlines.cache")
    one_line_failure(r, "two\\nlines.cache", "not found")


def test_onnx_runtime_messages_are_joined_not_cut():
    from calib.runners.onnxruntime import whole

    assert whole(RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Load model failed:\nThis is an invalid model (\n"
                              "  detail\n)\n")) == \
        "[ONNXRuntimeError] : 1 : FAIL : Load model failed: | This is an invalid model ( | detail | )"


CUT_DURING_THE_PASS = """
import os, sys
from calib.data.arrays import ArraySource, load_array
from calib.errors import DataError
path = sys.argv[1]
src = ArraySource(load_array(path), "input", batch_size=4, label=path)
it = iter(src)
next(it)
os.truncate(path, os.path.getsize(path) // 2)  # another process cuts the file while the pass runs
try:
    for batch in it:
        batch["input"].sum()
except DataError as exc:
    print("error:", exc)
    sys.exit(2)
print("read to the end")
"""


def test_npy_cut_during_the_pass_is_an_error_not_sigbus(tmp_path):
    np.save(tmp_path / "big.npy", np.ones((64, 3, 64, 64), np.float32))  # 3 MiB: pages past the cut are unmapped
    r = subprocess.run([sys.executable, "-c", CUT_DURING_THE_PASS, str(tmp_path / "big.npy")], capture_output=True,
                       text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "big.npy: cut short while it was read" in r.stdout


def test_npy_cut_before_the_pass(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((8, 3, 8, 8), np.float32))
    conv_relu_gap(tmp_path / "m.onnx")
    with open(tmp_path / "a.npy", "r+b") as fh:
        fh.truncate(1000)
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / "a.npy", "--algo", "minmax",
               "--out", tmp_path / "o")
    one_line_failure(r, "a.npy")
    assert no_files(tmp_path / "o")
