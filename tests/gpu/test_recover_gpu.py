"""`calib recover --backend tensorrt` on a real GPU with real TensorRT (run on the device: `pytest -m gpu tests/gpu`):
the two-Conv model whose second Conv must stay in float (tests/test_recover.py's `sensitive`), recovered, then its
FP16, all-INT8 and recovered engines built, run and timed as CUDA graphs. On real engines as on the simulation, all
INT8 misses the 30 dB target and the recovered engine meets it."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from test_recover import sensitive

pytestmark = pytest.mark.gpu
trt = pytest.importorskip("tensorrt")


@pytest.mark.parametrize("deploy", ["implicit", "qdq"])
def test_recover_measures_the_chosen_configuration_on_engines(tmp_path, deploy):
    m = sensitive(tmp_path / "s.onnx")
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).uniform(0.1, 1.0, (64, 2, 4, 4)).astype(np.float32))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "calib", "-q", "recover", str(m), "--data", str(x), "--target",
                        "out_sqnr_db>=30", "--steps", "none", "--deploy", deploy, "--backend", "tensorrt", "-o",
                        str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "recover.json").read_text())
    rows = {row["engine"]: row for row in res["engines"]["rows"]}
    assert set(rows) == {"fp16", "all INT8", "recovered", "curve: 2 in float"}  # the curve's other point too
    assert rows["recovered"]["value"] >= 30 > rows["all INT8"]["value"]
    assert all(row["median_ms"] > 0 for row in rows.values())
    assert "int8" in rows["all INT8"]["layer_summary"] and "int8" not in rows["curve: 2 in float"]["layer_summary"]
    assert rows["curve: 2 in float"]["value"] >= 30
