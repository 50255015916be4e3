"""Filters that match nothing, or that would change nothing, are errors naming them (exclusions, layer precisions)."""
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from calib.cli import main
from calib.errors import CalibError
from calib.quantize.model import load_model
from calib.quantize.patterns import check_exclusions, check_layer_precisions
from conftest import ROOT


def invoke(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def test_exclusions_against_the_tiny_model(tiny_model):
    m = load_model(tiny_model)
    assert check_exclusions(m, ["conv*", "op:GlobalAveragePool"], "tiny").names == ("conv*",)
    with pytest.raises(CalibError, match=r"'op:Reluu' matches no node of tiny \(did you mean 'Relu'\?\)"):
        check_exclusions(m, ["conv1", "op:Reluu"], "tiny")
    with pytest.raises(CalibError, match="'head.*' matches no node or output name of tiny"):
        check_exclusions(m, ["head.*"], "tiny")
    # the Relu reads the Conv's float output: no Q/DQ on its input, so keeping it in float changes nothing
    with pytest.raises(CalibError, match=r"'op:Relu' matches 1 node \(relu1 \(Relu\)\) with no quantized input"):
        check_exclusions(m, ["op:Relu"], "tiny")
    with pytest.raises(CalibError, match="'relu\\*' matches 1 node"):
        check_exclusions(m, ["relu*"], "tiny")


def test_layer_precisions_against_the_tiny_model(tiny_model):
    m = load_model(tiny_model)
    check_layer_precisions(m, ["conv1=fp16", "re:^conv=fp32", "op:Gemm=fp32", "op:CONVOLUTION=fp16", "relu1=int8"],
                           "tiny")
    for rule, msg in [("convv1=fp16", "'convv1' matches no layer (node or output name) of tiny (did you mean"),
                      ("op:Softmax=fp32", "'op:Softmax' matches no layer of tiny (its op types: Add, Conv"),
                      ("re:^head=fp16", "'re:^head' matches no layer"), ("conv1", "expected PATTERN=PRECISION"),
                      ("re:([=fp16", "not a regular expression")]:
        with pytest.raises(CalibError) as e:
            check_layer_precisions(m, [rule], "tiny")
        assert msg in str(e.value), (rule, str(e.value))


def test_cli_filters(tiny_model, tiny_data, tmp_path):
    assert invoke("calibrate", tiny_model, "--data", tiny_data, "--algo", "minmax", "-o", tmp_path).exit_code == 0
    cache = tmp_path / "minmax.cache"
    for cmd in (["cache", "convert", cache, "--model", tiny_model, "--to", "qdq", "-o", tmp_path / "q.onnx"],
                ["evaluate", tiny_model, "--cache", cache, "--data", tiny_data, "-o", tmp_path / "rep"]):
        r = invoke(*cmd, "--exclude", "op:Relu")
        assert r.exit_code == 2 and "with no quantized input" in r.output and r.output.count("\n") == 1, r.output
        r = invoke(*cmd, "--exclude", "op:Sigmoid")
        assert r.exit_code == 2 and "'op:Sigmoid' matches no node" in r.output, r.output
    assert not (tmp_path / "q.onnx").exists() and not (tmp_path / "rep").exists()
    def pairs(*exclude):
        r = invoke("cache", "convert", cache, "--model", tiny_model, "--to", "qdq", *exclude, "-o", tmp_path / "q.onnx")
        assert r.exit_code == 0, r.output
        return int(r.output.split("(")[-1].split()[0])

    assert pairs("--exclude", "conv2") < pairs()  # a pattern that passes the check changes the model


def test_build_checks_layer_precisions_without_tensorrt(tiny_model, tmp_path):
    """No TensorRT here (no stand-in on the path): a misspelt pattern is found before TensorRT is needed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "calib", "-q", "build", str(tiny_model), "--precision", "fp16",
                        "--layer-precision", "op:Sigmoidd=fp32", "-o", str(tmp_path / "x.engine")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 2 and "--layer-precision pattern 'op:Sigmoidd' matches no layer" in r.stderr, r.stderr
