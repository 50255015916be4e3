"""The command line through click's CliRunner: outputs, determinism, one-line errors, nothing half-written."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from calib import __version__
from calib.cli import main
from calib.quantize.cache import read_cache


def invoke(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def test_version_and_help_everywhere():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output
    for cmd in (["run"], ["calibrate"], ["evaluate"], ["cache"], ["cache", "inspect"], ["cache", "diff"],
                ["cache", "convert"], ["zoo"], ["zoo", "list"], ["zoo", "fetch"]):
        r = CliRunner().invoke(main, [*cmd, "--help"])
        assert r.exit_code == 0 and "Usage" in r.output, cmd


def test_calibrate_writes_all_caches_and_is_deterministic(tiny_model, tiny_data, tmp_path):
    r = invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path / "a", "--batch-size", 3)
    assert r.exit_code == 0, r.output
    r2 = invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path / "b", "--batch-size", 7)
    assert r2.exit_code == 0, r2.output
    r3 = invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path / "c", "--batch-size", 3)
    assert r3.exit_code == 0, r3.output
    for algo in ("minmax", "entropy", "percentile", "mse"):
        a = (tmp_path / "a" / f"{algo}.cache").read_bytes()
        assert a == (tmp_path / "c" / f"{algo}.cache").read_bytes()  # deterministic
        if algo != "entropy":  # entropy, as TensorRT's, takes its histogram range from the first batch
            assert a == (tmp_path / "b" / f"{algo}.cache").read_bytes()  # batch size does not change the result
        side = json.loads((tmp_path / "a" / f"{algo}.json").read_text())
        assert side["algorithm"] == algo and len(side["model_sha256"]) == 64 and side["samples"] == 20
        c = read_cache(tmp_path / "a" / f"{algo}.cache")
        assert c.header == "TRT-8600-EntropyCalibration2"
        assert list(c.scales) == ["input", "conv1", "relu1", "pool1", "conv2", "add1", "gap", "flat", "logits"]
    x = np.load(tiny_data)
    mm = read_cache(tmp_path / "a" / "minmax.cache")
    assert mm.amax("input") == pytest.approx(float(np.abs(x).max()), rel=1e-6)


def test_calibrate_errors_are_one_line(tiny_model, tiny_data, tmp_path):
    cases = [
        (["calibrate", tmp_path / "none.onnx", "--data", tiny_data], "model file not found"),
        (["calibrate", tiny_model, "--data", tmp_path / "none.npy"], "data file not found"),
        (["calibrate", tiny_model, "--data", tiny_data, "--algo", "minmax,kl"], "unknown algorithm 'kl'"),
    ]
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((4, 3, 9, 9), np.float32))
    cases.append((["calibrate", tiny_model, "--data", bad], "input 'input' has shape [4, 3, 9, 9]"))
    for args, msg in cases:
        out = tmp_path / "out"
        r = invoke(*args, "--out", out)
        assert r.exit_code == 2, r.output
        assert msg in r.output and r.output.count("\n") == 1 and "Traceback" not in r.output
        assert not out.exists() or not any(out.iterdir())


def test_cache_inspect_diff_convert(tiny_model, tiny_data, tmp_path):
    assert invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path).exit_code == 0
    r = invoke("cache", "inspect", tmp_path / "entropy.cache", "--model", tiny_model)
    assert r.exit_code == 0 and "TRT-8600-EntropyCalibration2  (9 tensors)" in r.output and "algorithm entropy" in r.output
    assert "algorithm entropy (" in r.output and "num_bins=2048" in r.output and "{" not in r.output  # no raw dict
    r = invoke("cache", "diff", tmp_path / "minmax.cache", tmp_path / "entropy.cache")
    assert r.exit_code == 0 and "9 in both" in r.output
    r = invoke("cache", "convert", tmp_path / "minmax.cache", "--model", tiny_model, "--to", "qdq", "-o",
               tmp_path / "q.onnx")
    assert r.exit_code == 0 and "Q/DQ pairs" in r.output and (tmp_path / "q.onnx").is_file()
    r = invoke("cache", "convert", tmp_path / "minmax.cache", "--model", tiny_model, "--to", "cache",
               "--carrier", "MinMaxCalibration", "-o", tmp_path / "mm.cache")
    assert r.exit_code == 0 and read_cache(tmp_path / "mm.cache").header == "TRT-8600-MinMaxCalibration"


def test_evaluate_reports(tiny_model, tiny_data, tmp_path):
    assert invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path).exit_code == 0
    r = invoke("evaluate", tiny_model, "--cache", tmp_path / "minmax.cache", "--cache", tmp_path / "mse.cache",
               "--data", tiny_data, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    sq = rep["evaluation"]["configs"]["minmax"]["outputs"]["logits"]["sqnr_db"]
    assert 15 < sq < 80
    assert "<img src=\"data:image/png;base64," in (tmp_path / "rep" / "report.html").read_text()


def test_evaluate_with_layers_kept_in_float(tiny_model, tiny_data, tmp_path):
    assert invoke("calibrate", tiny_model, "--data", tiny_data, "--out", tmp_path, "--algo", "minmax").exit_code == 0
    outs = {}
    for name, extra in (("all", []), ("fp_head", ["--exclude", "fc", "--exclude", "op:GlobalAveragePool"])):
        r = invoke("evaluate", tiny_model, "--cache", tmp_path / "minmax.cache", "--data", tiny_data, "--out",
                   tmp_path / name, *extra)
        assert r.exit_code == 0, r.output
        rep = json.loads((tmp_path / name / "report.json").read_text())
        outs[name] = rep["evaluation"]["configs"]["minmax"]["outputs"]["logits"]["sqnr_db"]
    assert outs["fp_head"] > outs["all"]  # fewer quantised layers, less error


def test_evaluate_accepts_a_cache_written_by_tensorrt(tmp_path):
    from conftest import golden

    r = invoke("evaluate", golden("cnn", "cnn.onnx"), "--cache", golden("cnn", "int8-entropy2.cache"), "--data",
               golden("cnn", "cnn_calib.npy"), "--out", tmp_path)
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "report.json").read_text())
    trt_rel_l2 = json.loads(golden("cnn", "report.json").read_text())["int8-entropy2"]["rel_l2_vs_fp32"]["logits"]
    ours = rep["evaluation"]["configs"]["int8-entropy2"]["outputs"]["logits"]["rel_l2"]
    assert ours == pytest.approx(trt_rel_l2, rel=0.25)  # TensorRT 0.0101, the simulation 0.0094
