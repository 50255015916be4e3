"""Recipes and `calib run` end to end on a tiny model with real image files."""
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.errors import RecipeError
from calib.recipe import load_recipe


def _images(folder, n=6, size=(12, 10)):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


@pytest.fixture
def recipe(tmp_path, tiny_model):
    _images(tmp_path / "imgs")
    p = tmp_path / "r.yaml"
    p.write_text(f"""
name: tiny
model: {tiny_model.name}
calibration_data: {{kind: folder, path: imgs}}
preprocess: {{resize: [8, 8], mode: exact}}
calibration: {{algorithms: [minmax, entropy, percentile, mse], batch_size: 4}}
evaluation: {{task: classification, batch_size: 4}}
output: out
""")
    return p


def test_run_writes_everything_and_is_reproducible(recipe, tmp_path):
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    names = {f.name for f in out.iterdir()}
    for f in ("minmax.cache", "entropy.json", "report.json", "report.md", "report.html", "run.log"):
        assert f in names
    assert any(n.endswith(".qdq.onnx") for n in names)
    first = {a: (out / f"{a}.cache").read_bytes() for a in ("minmax", "entropy", "percentile", "mse")}
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet", "--out", str(tmp_path / "again")])
    assert r.exit_code == 0
    for a, b in first.items():
        assert (tmp_path / "again" / f"{a}.cache").read_bytes() == b
    rep = json.loads((out / "report.json").read_text())
    assert rep["calibration"]["samples"] == 6 and rep["summary"]["best"] in first
    side = json.loads((out / "mse.json").read_text())  # the preprocessing as JSON, not a Python repr
    assert side["extra"]["preprocess"]["resize"] == [8, 8] and side["extra"]["preprocess"]["mode"] == "exact"
    assert rep["evaluation"]["configs"]["minmax"]["task"]["agreement_top1"] > 0.5


def test_deploy_commands_name_files_that_exist(recipe, tmp_path, monkeypatch):
    """With equalization the caches are for the equalized model: the report's commands build that file, where it
    lies once the run is published (not in the staging folder it was written to), and the Q/DQ model the run wrote."""
    import shlex

    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet", "--set", "calibration.equalize=true"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert f"ship out/{rep['summary']['best']}.cache" in r.output and "wrote out/report.html" in r.output
    block = (tmp_path / "out" / "report.md").read_text().split("## Deploy")[1].split("```sh\n")[1].split("```")[0]
    named = [a.split("=", 1)[-1] for ln in block.splitlines() if not ln.startswith("#") for a in shlex.split(ln)
             if a.endswith((".onnx", ".cache")) and not a.startswith("--saveEngine")]
    assert "--onnx=out/tiny.equalized.onnx" in block and "--onnx=out/tiny.equalized." + rep["summary"]["best"] in block
    made = [args[args.index("-o") + 1] for args in map(shlex.split, block.splitlines())
            if args[:2] == ["calib", "cache"]]
    assert made == [f"tiny.equalized.{rep['summary']['best']}.fp16.qdq.onnx"], made  # the command that makes the
    named = [p for p in named if p not in made]  # FP16+INT8 model (the run writes it when the recipe asks for FP16)
    assert len(named) == 8 and all((tmp_path / p).is_file() for p in named), named


def test_a_limit_past_the_samples_is_said(tmp_path, caplog, monkeypatch):
    import logging

    from calib.data.sources import picked
    from calib.recipe import DataSpec

    monkeypatch.setattr(logging.getLogger("calib"), "propagate", True)  # the CLI's set-up stops it

    with caplog.at_level("WARNING", logger="calib"):
        assert len(picked(DataSpec(kind="folder", path="imgs", limit=32, offset=60), list(range(68)))) == 8
    assert "imgs: limit 32 asks for more samples than the 8 left after offset 60; using 8" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="calib"):
        assert len(picked(DataSpec(kind="folder", path="imgs", limit=8, offset=60), list(range(68)))) == 8
    assert caplog.text == ""


def test_set_overrides(recipe, tmp_path):
    r = load_recipe(recipe, ["calibration.batch_size=2", "calibration.algorithms=[mse]"])
    assert r.calibration.batch_size == 2 and r.calibration.algorithms == ("mse",)
    assert os.path.isabs(r.model) and r.output == str(tmp_path / "out")


@pytest.mark.parametrize("edit,msg", [
    (("calibration: {", "calibraton: {"), "calibraton: unknown key (did you mean 'calibration'?)"),
    (("batch_size: 4}\nevaluation", "batch_size: four}\nevaluation"), "calibration.batch_size: expected an integer"),
    (("model: tiny.onnx", "model: missing.onnx"), "model: file not found"),
    (("path: imgs", "path: nothere"), "calibration_data.path: file not found"),
    (("mode: exact", "mode: stretch"), "preprocess.mode: 'stretch' is not one of"),
])
def test_bad_recipes_fail_in_one_line(recipe, tmp_path, edit, msg):
    text = recipe.read_text()
    assert edit[0] in text
    recipe.write_text(text.replace(*edit))
    r = CliRunner().invoke(main, ["run", str(recipe)])
    assert r.exit_code == 2
    assert msg in r.output and str(recipe) in r.output and r.output.count("\n") == 1
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_unreadable_data_folder_leaves_nothing(recipe, tmp_path):
    for f in (tmp_path / "imgs").iterdir():
        f.write_bytes(b"not an image")
    r = CliRunner().invoke(main, ["--quiet", "run", str(recipe)])
    assert r.exit_code == 2 and "unreadable" in r.output and r.output.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_not_a_mapping(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(RecipeError, match="a recipe is a mapping"):
        load_recipe(p)


def _broken_calibration_recipe(tmp_path, tiny_model, extra: str):
    """A recipe whose calibration pass would fail (images of the wrong size for the model): an error reported
    instead of that one was found before the pass."""
    _images(tmp_path / "imgs")
    p = tmp_path / "late.yaml"
    p.write_text(f"""
name: late
model: {tiny_model.name}
calibration_data: {{kind: folder, path: imgs}}
preprocess: {{resize: [9, 9], mode: exact}}
{extra}
output: out
""")
    return p


def test_bad_evaluation_offset_is_reported_before_the_pass(tmp_path, tiny_model):
    p = _broken_calibration_recipe(tmp_path, tiny_model, "evaluation_data: {kind: folder, path: imgs, offset: 6}")
    for cmd in ("run", "sensitivity"):
        r = CliRunner().invoke(main, ["--quiet", cmd, str(p)])
        assert r.exit_code == 2 and "offset 6 skips all 6 samples" in r.output, (cmd, r.output)
    r = CliRunner().invoke(main, ["run", str(p), "--quiet", "--set", "evaluation_data.offset=2"])
    assert r.exit_code == 2 and "has shape [6, 3, 9, 9]" in r.output  # the pass itself is reached


def test_missing_tensorrt_is_reported_before_the_pass(tmp_path, tiny_model):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    p = _broken_calibration_recipe(tmp_path, tiny_model, "backend: {kind: tensorrt}")
    for cmd in ("run", "sensitivity"):
        r = CliRunner().invoke(main, ["--quiet", cmd, str(p)])
        assert r.exit_code == 2 and "tensorrt is not installed: pip install" in r.output, (cmd, r.output)


def test_a_task_the_model_does_not_fit_is_reported_before_the_pass(tmp_path, tiny_model):
    p = _broken_calibration_recipe(tmp_path, tiny_model, "evaluation: {task: detection}")
    r = CliRunner().invoke(main, ["--quiet", "run", str(p)])
    assert r.exit_code == 2 and "evaluation.task detection needs outputs boxes" in r.output, r.output
    assert "use evaluation.task classification" in r.output
