"""The recipes in recipes/ load (keys, types, files) and the default one runs on the real model."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calib.cli import main
from calib.recipe import load_recipe
from conftest import ROOT


@pytest.mark.parametrize("name", ["yolo.yaml", "mobilenet_v2.yaml"])
def test_recipe_loads(name):
    r = load_recipe(ROOT / "recipes" / name)
    assert r.model.startswith("zoo:") and Path(r.calibration_data.path).is_dir()


@pytest.mark.slow
def test_default_recipe_runs_on_yolov3_tiny(tmp_path):
    r = CliRunner().invoke(main, ["--quiet", "run", str(ROOT / "recipes" / "yolo.yaml"), "--out", str(tmp_path),
                                  "--set", "calibration_data.limit=8", "--set", "calibration.algorithms=[minmax,mse]"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["fp32_task"]["vs_fp32"]["map50_95"] == pytest.approx(1.0)  # FP32 against its own boxes
    assert rep["evaluation"]["configs"]["minmax"]["task"]["vs_fp32"]["map50"] > 0.5
    assert (tmp_path / "minmax.cache").read_text().startswith("TRT-8600-EntropyCalibration2\nimages: ")
