"""The recipes in recipes/ load (keys, types, files) and the default one runs on the real model."""
import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calib.cli import main
from calib.recipe import load_recipe
from conftest import ROOT


@pytest.mark.parametrize("name", ["yolo.yaml", "mobilenet_v2.yaml", "yolov8n.yaml"])
def test_recipe_loads(name):
    r = load_recipe(ROOT / "recipes" / name)
    assert r.model.startswith("zoo:") and Path(r.calibration_data.path).is_dir()


@pytest.mark.parametrize("name,least", [("yolo.yaml", 150), ("mobilenet_v2.yaml", 150), ("yolov8n.yaml", 150)])
def test_recipes_evaluate_on_every_photo_calibration_did_not_see(name, least):
    from calib.data.images import folder_samples
    from calib.data.sources import image_samples

    r = load_recipe(ROOT / "recipes" / name)
    spec = r.evaluation_data
    local = dataclasses.replace(spec, include=tuple(p for p in spec.include if not p.startswith("zoo:")),
                                label_regex=None)  # the photos of the repository only
    ev = {s.path for s in image_samples(local)}
    cal = {s.path for s in image_samples(r.calibration_data)}
    every = {s.path for d in (spec.path, *local.include) for s in folder_samples(d)[0]}
    assert len(ev) >= least and not ev & cal and ev | cal == every


@pytest.mark.slow
def test_default_recipe_runs_on_yolov3_tiny(tmp_path):
    r = CliRunner().invoke(main, ["--quiet", "run", str(ROOT / "recipes" / "yolo.yaml"), "--out", str(tmp_path),
                                  "--set", "calibration_data.limit=8", "--set", "calibration.algorithms=[minmax,mse]",
                                  "--set", "evaluation_data.limit=12"])  # 12 crops + the 18 originals
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["evaluation"]["samples"] == 30 and rep["summary"]["decision"]["ship"] in ("minmax", "mse")
    fig = rep["summary"]["intervals"]["mse"]["map50_95_vs_fp32"]
    assert fig["n"] == 30 and fig["boxes"] == rep["evaluation"]["configs"]["mse"]["task"]["vs_fp32"]["gt_boxes"]
    assert rep["fp32_task"]["vs_fp32"]["map50_95"] == pytest.approx(1.0)  # FP32 against its own boxes
    assert rep["evaluation"]["configs"]["minmax"]["task"]["vs_fp32"]["map50"] > 0.5
    assert (tmp_path / "minmax.cache").read_text().startswith("TRT-8600-EntropyCalibration2\nimages: ")
