"""`calib recover --backend tensorrt` on TensorRT's stand-in (tests/standin: its INT8 engines run calib's Q/DQ
simulation of the layers they hold in INT8): the FP16, all-INT8 and recovered engines built from the files recover
wrote, each measured on the held-out samples and timed against FP16. The same path runs on real TensorRT on a GPU."""
import json

import numpy as np
import pytest

from test_recover import sensitive
from test_tensorrt_cli import calib_cli


def _data(tmp_path):
    p = tmp_path / "x.npy"
    np.save(p, np.random.default_rng(0).uniform(0.1, 1.0, (64, 2, 4, 4)).astype(np.float32))
    return p


@pytest.mark.parametrize("deploy", ["implicit", "qdq"])
def test_the_recovered_configuration_is_measured_on_engines(tmp_path, deploy):
    m = sensitive(tmp_path / "s.onnx")
    out = tmp_path / "out"
    r = calib_cli("recover", m, "--data", _data(tmp_path), "--target", "out_sqnr_db>=30", "--steps", "none",
                  "--deploy", deploy, "--backend", "tensorrt", "-o", out, simulate=True)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "recover.json").read_text())
    rows = {row["engine"]: row for row in res["engines"]["rows"]}
    # the search measured both layers in float on the way: that point of its curve is an engine too
    assert set(rows) == {"fp16", "all INT8", "recovered", "curve: 2 in float"}
    assert res["engines"]["metric"] == "out_sqnr_db"
    assert all(row["cuda_graph"] and row["median_ms"] > 0 for row in rows.values())
    # the stand-in's engines compute what calib simulates: the engine's figure is the simulation's
    assert rows["recovered"]["value"] == pytest.approx(res["value"], abs=0.5) and rows["recovered"]["value"] >= 30
    assert rows["all INT8"]["value"] == pytest.approx(res["steps"][0]["value"], abs=0.5)
    assert rows["all INT8"]["value"] < 30  # convB in INT8 wipes out the channel that carries the output
    assert rows["recovered"]["simulated"] == res["value"]
    assert "int8" not in rows["fp16"]["layer_summary"] and "int8" in rows["all INT8"]["layer_summary"]
    both = rows["curve: 2 in float"]
    assert "int8" not in both["layer_summary"] and both["float_layers"] == 2 and both["int8_macs_share"] == 0
    assert both["simulated"] == dict((c["float_layers"], c["value"]) for c in res["fallback_curve"])[2]
    assert both["value"] == pytest.approx(both["simulated"], abs=0.5)
    assert [rows[n]["float_layers"] for n in ("fp16", "all INT8", "recovered")] == [None, 0, 1]
    assert 0 < rows["recovered"]["int8_macs_share"] < 1 and rows["all INT8"]["int8_macs_share"] == 1
    md = (out / "recover.md").read_text()
    assert "## On TensorRT engines" in md and "| recovered | 1 | " in md and "| curve: 2 in float | 2 | 0.0 % |" in md
    r = calib_cli("recover", m, "--data", _data(tmp_path), "--target", "out_sqnr_db>=30", "--steps", "none",
                  "--deploy", deploy, "--backend", "tensorrt", "--no-engine-curve", "-o", tmp_path / "o2",
                  simulate=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "o2" / "recover.json").read_text())["engines"]["rows"]
    assert [row["engine"] for row in rows] == ["fp16", "all INT8", "recovered"]


def test_the_fp16_int8_model_needs_a_strongly_typed_tensorrt(tmp_path):
    m = sensitive(tmp_path / "s.onnx")
    out = tmp_path / "out"
    r = calib_cli("recover", m, "--data", _data(tmp_path), "--target", "out_sqnr_db>=30", "--steps", "none",
                  "--deploy", "fp16", "--backend", "tensorrt", "-o", out, simulate=True)
    assert r.returncode == 0, r.stderr
    e = json.loads((out / "recover.json").read_text())["engines"]
    assert [row["engine"] for row in e["rows"]] == ["fp16"]
    assert "TensorRT 8.6.0 does not type networks strongly" in e["note"]
    r = calib_cli("recover", m, "--data", _data(tmp_path), "--target", "out_sqnr_db>=30", "--steps", "none",
                  "--deploy", "fp16", "--backend", "tensorrt", "-o", tmp_path / "o10", simulate=True, version="10.3.0")
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "o10" / "recover.json").read_text())["engines"]["rows"]
    assert [row["engine"] for row in rows] == ["fp16", "all INT8", "recovered", "curve: 2 in float"]
    rows = {row["engine"]: row for row in rows}
    assert rows["recovered"]["value"] >= 30 > rows["all INT8"]["value"]


def test_no_tensorrt_is_said_before_the_search(tmp_path):
    m = sensitive(tmp_path / "s.onnx")
    r = calib_cli("recover", m, "--data", _data(tmp_path), "--target", "out_sqnr_db>=30", "--backend", "tensorrt",
                  "-o", tmp_path / "out", standin=False)
    assert r.returncode != 0 and "tensorrt" in r.stderr.lower() and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
