"""An image of extreme aspect ratio (30000x2) is kept under letterbox, its short side clamped to one pixel, rather
than skipped as unreadable because that side rounded to zero."""
import json

import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.data.transforms import Preprocessor
from calib.recipe import PreprocessSpec
from conftest import conv_relu_gap


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("size", [(30000, 2), (2, 30000)])
def test_extreme_aspect_ratio_kept_under_letterbox(size):
    pre = Preprocessor(PreprocessSpec(resize=(8, 8), mode="letterbox"))
    x, box = pre(Image.new("RGB", size, (255, 255, 255)))
    assert x.shape == (3, 8, 8)
    assert (x == 1.0).any() and (x < 1.0).any()  # a one-pixel strip of the image on the padding
    assert box.scale_x > 0 and box.scale_y > 0


def test_extreme_aspect_ratio_through_the_cli(tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (30000, 2), (200, 10, 10)).save(tmp_path / "imgs" / "wide.png")
    Image.new("RGB", (12, 10), (20, 10, 10)).save(tmp_path / "imgs" / "plain.png")
    r = invoke("calibrate", tmp_path / "m.onnx", "--data", tmp_path / "imgs", "--resize", "8x8", "--letterbox",
               "--preprocess", "unit", "--algo", "minmax", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert "unreadable" not in r.output
    assert json.loads((tmp_path / "o" / "minmax.json").read_text())["samples"] == 2
