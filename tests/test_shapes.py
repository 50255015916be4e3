"""Shapes a user's model brings: a fixed batch of any size, dynamic or placeholder dimensions fixed with
--input-shape (recipe input_shapes) with the image resize following, and ONNX Runtime's errors kept whole."""
import json
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from calib.calibrate import calibrate
from calib.cli import main
from calib.cli.data import CLI_NAMES, DataArgs, make_cli_source
from calib.data.rebatch import FixedBatches
from calib.errors import DataError, ModelError
from calib.evaluate.api import evaluate
from calib.quantize.model import inspect_model
from calib.quantize.shapes import fix_input_shapes, fixed_batch
from calib.runners.onnxruntime import OrtRunner
from nets import conv_net, image_folder


def invoke(*args):
    return CliRunner().invoke(main, [*map(str, args)])


def test_a_fixed_batch_of_10_calibrates_and_evaluates_from_the_cli(tmp_path):
    model = conv_net(tmp_path / "b10.onnx", [10, 3, 16, 16])
    imgs = image_folder(tmp_path / "imgs", [(16, 16)] * 23)
    r = invoke("calibrate", model, "--data", imgs, "--algo", "minmax", "-o", tmp_path / "c")  # reads batches of 8
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "c" / "minmax.json").read_text())["samples"] == 20
    assert "fixed batch of 10 takes 20 of the 23 samples; the last 3 are left out" in r.output, r.output
    assert "--limit" in r.output
    r = invoke("--quiet", "evaluate", model, "--cache", tmp_path / "c" / "minmax.cache", "--data", imgs,
               "--batch-size", "4", "-o", tmp_path / "e")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "e" / "report.json").read_text())["evaluation"]["samples"] == 20


def test_data_that_cannot_fill_one_fixed_batch_names_the_flag(tmp_path):
    model = conv_net(tmp_path / "b10.onnx", [10, 3, 16, 16])
    imgs = image_folder(tmp_path / "imgs", [(16, 16)] * 12)
    r = invoke("--quiet", "calibrate", model, "--data", imgs, "--limit", "6", "--algo", "minmax", "-o", tmp_path / "c")
    assert r.exit_code == 2, r.output
    assert "6 samples cannot fill one run of the model's fixed batch of 10" in r.output
    assert "(--limit)" in r.output and not (tmp_path / "c").exists()
    x = np.zeros((6, 3, 16, 16), np.float32)
    with pytest.raises(DataError, match=r"fixed batch of 10 .*calibration_data\.limit"):  # the API: recipe keys
        calibrate(model, x, ["minmax"])


def test_runs_hold_exactly_the_fixed_batch_whatever_the_read_batch():
    parts = [({"x": np.full((k, 1), i, np.float32)}, None, None) for i, k in enumerate([8, 8, 8, 3])]
    runs = FixedBatches(parts, 10)
    got = [b["x"][:, 0].tolist() for b, _, _ in runs]
    assert [len(g) for g in got] == [10, 10]
    assert got[0] == [0] * 8 + [1] * 2 and got[1] == [1] * 6 + [2] * 4  # in order, carried over
    assert (runs.read, runs.left_out) == (27, 7)


def test_input_shape_fixes_a_dynamic_model_and_the_resize_follows(tmp_path):
    model = conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    imgs = image_folder(tmp_path / "imgs", [(30, 40), (50, 20), (24, 24)])
    r = invoke("--quiet", "calibrate", model, "--data", imgs, "--algo", "minmax", "-o", tmp_path / "no")
    assert r.exit_code == 2 and "give --resize or --input-shape" in r.output, r.output  # sizes differ
    r = invoke("--quiet", "calibrate", model, "--data", imgs, "--algo", "minmax", "--input-shape",
               "images=1x3x24x32", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    info = fix_input_shapes(inspect_model(model), {"images": (1, 3, 24, 32)}, "--input-shape")
    assert info.inputs[0][1] == (1, 3, 24, 32) and fixed_batch(info) == 1
    batch = next(iter(make_cli_source(DataArgs(data=str(imgs)), info, 8)))
    assert batch["images"].shape == (3, 3, 24, 32)  # resized to the given height and width


def test_a_placeholder_dimension_is_dynamic_and_can_be_fixed(tmp_path):
    model = conv_net(tmp_path / "ph.onnx", [1, 3, -1, -1])
    info = fix_input_shapes(inspect_model(model), {"images": (1, 3, 20, 28)})
    assert info.inputs[0][1] == (1, 3, 20, 28)
    assert fix_input_shapes(inspect_model(model), {}).inputs[0][1] == (1, 3, None, None)


@pytest.mark.parametrize("given, message", [
    ("img=1x3x8x8", "--input-shape img=1x3x8x8: the model has no input 'img' (its inputs: images)"),
    ("images=3x8x8", "input 'images' has 4 dimensions"),
    ("images=1x4x8x8", "dimension 1 of input 'images' is fixed at 3 by the model"),
    ("images=1x3xAx8", "--input-shape"),
])
def test_input_shape_errors_name_the_flag(tmp_path, given, message):
    model = conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    x = np.zeros((2, 3, 8, 8), np.float32)
    np.save(tmp_path / "x.npy", x)
    r = invoke("--quiet", "calibrate", model, "--data", tmp_path / "x.npy", "--input-shape", given, "-o",
               tmp_path / "c")
    assert r.exit_code == 2 and message in r.output, r.output


def test_input_shapes_in_a_recipe_are_named_by_key(tmp_path):
    model = conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    with pytest.raises(ModelError, match=r"^input_shapes img=1x3x8x8: the model has no input 'img'"):
        calibrate(model, np.zeros((2, 3, 8, 8), np.float32), ["minmax"], input_shapes={"img": (1, 3, 8, 8)})
    with pytest.raises(ModelError, match=r"^--input-shape img"):
        calibrate(model, np.zeros((2, 3, 8, 8), np.float32), ["minmax"], input_shapes={"img": (1, 3, 8, 8)},
                  option_names=CLI_NAMES)


def test_onnx_runtime_errors_reach_the_user_whole(tmp_path):
    model = conv_net(tmp_path / "b10.onnx", [10, 3, 16, 16])
    with pytest.raises(DataError) as err:
        OrtRunner(model).run({"images": np.zeros((8, 3, 16, 16), np.float32)})
    msg = str(err.value)
    assert "Got invalid dimensions for input: images" in msg
    assert "index: 0 Got: 8 Expected: 10" in msg  # the second line of ONNX Runtime's message
    assert "\n" not in msg  # one line, as the CLI prints it


def test_evaluate_api_on_a_fixed_batch_leaves_out_the_remainder(tmp_path, caplog):
    model = conv_net(tmp_path / "b4.onnx", [4, 3, 8, 8])
    x = np.random.default_rng(0).normal(size=(10, 3, 8, 8)).astype(np.float32)
    res = calibrate(model, x, ["minmax"], batch_size=3)
    assert res.samples == 8
    out = evaluate(model, {"minmax": res.amax["minmax"]}, x, batch_size=3)
    assert out["samples"] == 8
    assert "left out" in caplog.text and "evaluation_data.limit" in caplog.text


def test_a_recipe_fixes_the_input_shape_and_its_images_follow(tmp_path):
    model = conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    imgs = image_folder(tmp_path / "imgs", [(30, 40), (50, 20), (24, 24), (33, 31)])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {model}\ncalibration_data: {{kind: folder, path: {imgs}}}\n"
                      f"calibration: {{algorithms: [minmax]}}\ninput_shapes: {{images: 2x3x16x20}}\n"
                      f"output: {tmp_path / 'run'}\n")
    r = invoke("--quiet", "run", recipe)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "run" / "report.json").read_text())["evaluation"]["samples"] == 4
    recipe.write_text(recipe.read_text().replace("images: 2x3x16x20", "img: 2x3x16x20"))
    r = invoke("--quiet", "run", recipe)
    assert r.exit_code == 2 and "r.yaml: input_shapes img=2x3x16x20: the model has no input 'img'" in r.output


def test_the_reports_rerun_command_keeps_the_shape_and_budget_options(tmp_path, monkeypatch):
    """The verdict's next step re-runs the evaluation: on a model of dynamic size fed photos of different sizes it
    must carry --input-shape (and --memory-budget, --no-layerwise) or it cannot run."""
    model = conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    imgs = image_folder(tmp_path / "imgs", [(30, 40), (50, 20), (24, 24)])
    monkeypatch.chdir(tmp_path)
    given = ["--input-shape", "images=1x3x24x32", "--memory-budget", "3GB"]
    r = invoke("--quiet", "calibrate", model, "--data", imgs, "--algo", "minmax", *given, "-o", "c")
    assert r.exit_code == 0, r.output
    r = invoke("--quiet", "evaluate", model, "--cache", "c/minmax.cache", "--data", imgs, *given,
               "--no-layerwise", "-o", "rep")
    assert r.exit_code == 0, r.output
    args = shlex.split(json.loads((tmp_path / "rep" / "report.json").read_text())["rerun"])
    assert args[:3] == ["calib", "evaluate", str(model)]
    assert args[args.index("--input-shape") + 1] == "images=1x3x24x32" and "--no-layerwise" in args
    assert args[args.index("--memory-budget") + 1] == "3GB"
    r = invoke("--quiet", *args[1:], "--cache", "c/minmax.cache", "-o", "again")
    assert r.exit_code == 0, r.output
