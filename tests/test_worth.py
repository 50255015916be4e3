"""Is INT8 worth it (calib.deploy.worth, `calib bench ENGINE --against OTHER`): known answers on hand-made timing
rows, and the command on engines of TensorRT's stand-in."""
from __future__ import annotations

import json

from calib.deploy.worth import compare, sentences
from conftest import GOLDEN
from test_tensorrt_cli import calib_cli


def row(batch, ms):
    return {"shapes": {"images": [batch, 3, 320, 320]}, "median_ms": ms}


# YOLOv8n-320 on an H100, TensorRT 8.6, level 1 (benchmarks/RESULTS_QDQ.md): batch 4 INT8 0.708 against FP16 0.709
INT8 = [row(1, 0.40), row(4, 0.708), row(32, 3.1)]
FP16 = [row(1, 0.38), row(4, 0.709), row(32, 4.0)]


def test_int8_that_pays_only_from_a_batch_is_said_so():
    found = compare(INT8, FP16)
    assert [(e["batch"], e["verdict"]) for e in found] == [(1, "slower"), (4, "same"), (32, "pays")]
    assert found[2]["speedup"] == round(4.0 / 3.1, 3)
    said = sentences(found, "int8.engine", "fp16.engine")
    assert said[0].startswith("batch 1: int8.engine does not pay: slower than fp16.engine")
    assert said[1].startswith("batch 4: int8.engine does not pay") and "within 3%" in said[1]
    assert said[2].startswith("batch 32: int8.engine pays: 3.1000 ms against 4.0000 ms, 1.29x")
    assert said[-1] == "int8.engine pays from batch 32 on (of the batches timed)"


def test_int8_that_never_pays_says_to_build_the_other():
    said = sentences(compare([row(4, 0.733)], [row(4, 0.709)]), "q.engine", "fp16.engine")
    assert said[-1] == "q.engine does not pay at any shape timed: build fp16.engine instead"
    assert sentences(compare([row(4, 1.0)], [row(8, 1.0)]), "a", "b") == [
        "no input shape was timed on both a and b: nothing to compare"]


def test_bench_against_another_engine(tmp_path):
    cnn, data = GOLDEN / "cnn" / "cnn.onnx", GOLDEN / "cnn" / "cnn_calib.npy"
    r = calib_cli("calibrate", cnn, "--data", data, "--algo", "minmax", "-o", tmp_path / "caches")
    assert r.returncode == 0, r.stderr
    for name, extra in (("int8", ["--cache", tmp_path / "caches" / "minmax.cache", "--precision", "int8,fp16"]),
                        ("fp16", ["--precision", "fp16"])):
        r = calib_cli("build", cnn, *extra, "--batch-size", "8", "-o", tmp_path / f"{name}.engine")
        assert r.returncode == 0, r.stderr
    r = calib_cli("bench", tmp_path / "int8.engine", "--against", tmp_path / "fp16.engine", "--json", "--iters", "2",
                  "--repeats", "3")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (found,) = doc["against"]["compared"]
    assert found["batch"] == 8 and found["ms"] == doc["rows"][0]["median_ms"]
    assert found["other_ms"] == doc["against"]["rows"][0]["median_ms"]
    assert doc["rows"][0]["alternated"] and doc["against"]["rows"][0]["alternated"]  # timed in turns
    assert "mine" not in doc["against"]
    r = calib_cli("bench", tmp_path / "int8.engine", "--against", tmp_path / "fp16.engine", "--json", "--iters", "2",
                  "--repeats", "3", "--cuda-graph")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["rows"][0]["cuda_graph"] and doc["against"]["rows"][0]["cuda_graph"]
    for row, name in ((doc["rows"][0], "int8"), (doc["against"]["rows"][0], "fp16")):  # what one run launches
        layers = json.loads((tmp_path / f"{name}.engine.json").read_text())["layers"]
        assert row["graph_nodes"] == {"kernel": len(layers)}, row
    assert doc["against"]["said"][0].startswith("batch 8: int8.engine ")
    r = calib_cli("bench", tmp_path / "int8.engine", "--against", tmp_path / "fp16.engine", "--iters", "2",
                  "--repeats", "3")
    assert r.returncode == 0 and "batch 8: int8.engine" in r.stdout, r.stderr
