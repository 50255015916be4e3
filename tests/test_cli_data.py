"""`--data` on the command line: image folders, YOLO folders and COCO json on real photos, the preprocessing
options, `evaluate --task detection` on the real YOLOv3-tiny, and tasks or filters that do not fit the model."""
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.quantize.cache import read_cache
from conftest import ROOT

PHOTOS = ROOT / "datasets" / "photos"  # real photos from scikit-image (datasets/LICENSES.md)


def invoke(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def one_line_error(r, message):
    assert r.exit_code == 2, r.output
    assert message in r.output and r.output.count("\n") == 1 and "Traceback" not in r.output, r.output


def photos(folder, names=("astronaut", "chelsea", "coffee", "horse", "camera", "rocket")):
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(PHOTOS / f"{n}.jpg", folder / f"{n}.jpg")
    return folder


def test_calibrate_and_evaluate_on_an_image_folder(tiny_model, tmp_path):
    imgs = photos(tmp_path / "imgs")
    r = invoke("calibrate", tiny_model, "--data", imgs, "--algo", "minmax,mse", "--preprocess", "imagenet",
               "--limit", "4", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    side = json.loads((tmp_path / "c" / "minmax.json").read_text())
    assert side["samples"] == 4
    mm = read_cache(tmp_path / "c" / "minmax.cache")
    assert 1.5 < mm.amax("input") < 2.7  # ImageNet-normalized pixels, resized to the model's 8x8
    r = invoke("evaluate", tiny_model, "--cache", tmp_path / "c" / "minmax.cache", "--data", imgs, "--preprocess",
               "imagenet", "--limit", "2", "--offset", "4", "--task", "classification", "-o", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["evaluation"]["samples"] == 2


def _solid(folder, size, value, n=2):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", size, (value,) * 3).save(folder / f"{i}.png")
    return folder


def _input_amax(tiny_model, tmp_path, data, *opts):
    out = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
    r = invoke("calibrate", tiny_model, "--data", data, "--algo", "minmax", *opts, "-o", out)
    assert r.exit_code == 0, r.output
    return read_cache(out / "minmax.cache").amax("input")


def test_preprocessing_options_change_what_the_model_sees(tiny_model, tmp_path):
    white = _solid(tmp_path / "white", (16, 16), 255)
    assert _input_amax(tiny_model, tmp_path, white) == pytest.approx(1.0)  # images default to unit
    assert _input_amax(tiny_model, tmp_path, white, "--preprocess", "none") == pytest.approx(255.0)
    assert _input_amax(tiny_model, tmp_path, white, "--mean", "0.5", "--std", "0.25") == pytest.approx(2.0)
    black_wide = _solid(tmp_path / "wide", (32, 8), 0)
    assert _input_amax(tiny_model, tmp_path, black_wide, "--letterbox", "--pad-value", "255") == pytest.approx(1.0)
    assert _input_amax(tiny_model, tmp_path, black_wide, "--resize", "8x8", "--pad-value", "255") < 1e-3
    r = invoke("calibrate", tiny_model, "--data", white, "--layout", "NHWC", "-o", tmp_path / "x")
    one_line_error(r, "input 'input' has shape [2, 8, 8, 3]")
    r = invoke("calibrate", tiny_model, "--data", white, "--resize", "9x9", "-o", tmp_path / "x")
    one_line_error(r, "has shape [2, 3, 9, 9]")
    r = invoke("calibrate", tiny_model, "--data", white, "--resize", "9by9", "-o", tmp_path / "x")
    assert r.exit_code == 2 and "expected N or HxW" in r.output


def test_array_options(tiny_model, tiny_data, tmp_path):
    r = invoke("calibrate", tiny_model, "--data", tiny_data, "--mean", "0.5", "-o", tmp_path / "x")
    one_line_error(r, "--mean apply to images (uint8 [N, H, W, C]); it holds float32 [20, 3, 8, 8]")
    r = invoke("calibrate", tiny_model, "--data", tiny_data, "--images", tmp_path, "-o", tmp_path / "x")
    assert r.exit_code == 2 and "only with a COCO json" in r.output
    u8 = tmp_path / "u8.npy"
    np.save(u8, np.full((3, 20, 20, 3), 255, np.uint8))  # uint8 NHWC images: resized like image files
    assert _input_amax(tiny_model, tmp_path, u8, "--resize", "8x8", "--mean", "0", "--std", "0.5") == \
        pytest.approx(2.0)
    r = invoke("calibrate", tiny_model, "--data", tmp_path / "notes.txt", "-o", tmp_path / "x")
    one_line_error(r, "data file not found")
    (tmp_path / "notes.csv").write_text("x")
    r = invoke("calibrate", tiny_model, "--data", tmp_path / "notes.csv", "-o", tmp_path / "x")
    one_line_error(r, "expected a .npy/.npz array, an image folder, a YOLO folder, a COCO .json or a .txt of text")
    (tmp_path / "notes.txt").write_text("x")  # text lines: need a tokenizer
    r = invoke("calibrate", tiny_model, "--data", tmp_path / "notes.txt", "-o", tmp_path / "x")
    assert r.exit_code == 2 and "--tokenizer: text data needs a tokenizer.json" in r.output


def _yolo_set(root):
    photos(root / "images", ("astronaut", "chelsea", "coffee", "horse"))
    (root / "labels").mkdir()
    (root / "labels" / "chelsea.txt").write_text("15 0.5 0.5 0.6 0.8\n")  # a cat filling the photo
    return root


def _coco_set(root):
    imgs = photos(root / "images", ("astronaut", "chelsea", "coffee", "horse"))
    doc = {"images": [{"id": i + 1, "file_name": p.name, "width": Image.open(p).size[0],
                       "height": Image.open(p).size[1]} for i, p in enumerate(sorted(imgs.iterdir()))],
           "annotations": [], "categories": [{"id": 15, "name": "cat"}]}
    (root / "annotations.json").write_text(json.dumps(doc))
    return root / "annotations.json"


@pytest.fixture(scope="module")
def yolo_model():
    from calib.zoo import fetch

    return fetch("yolov3-tiny")  # a copy of the user's, where fetched (conftest), else downloaded once


@pytest.mark.slow
def test_detector_on_yolo_and_coco_folders(yolo_model, tmp_path):
    yolo = _yolo_set(tmp_path / "yolo")
    r = invoke("calibrate", yolo_model, "--data", yolo, "--letterbox", "--pad-value", "127", "--algo",
               "minmax,mse", "--batch-size", "2", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "c" / "mse.json").read_text())["samples"] == 4
    r = invoke("evaluate", yolo_model, "--cache", tmp_path / "c" / "mse.cache", "--data", yolo, "--letterbox",
               "--task", "detection", "--no-layerwise", "--batch-size", "2", "-o", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    fp32 = rep["fp32_task"]
    assert fp32["vs_fp32"]["map50"] == pytest.approx(1.0) and fp32["vs_labels"]["gt_boxes"] == 1
    assert rep["evaluation"]["configs"]["mse"]["task"]["vs_fp32"]["map50"] > 0.5
    coco = _coco_set(tmp_path / "coco")
    r = invoke("evaluate", yolo_model, "--cache", tmp_path / "c" / "minmax.cache", "--data", coco, "--letterbox",
               "--task", "detection", "--no-layerwise", "--limit", "2", "-o", tmp_path / "rep2")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "rep2" / "report.json").read_text())["evaluation"]["samples"] == 2


def test_a_task_that_does_not_fit_the_outputs_is_refused(yolo_model, tiny_model, tiny_data, tmp_path):
    assert invoke("calibrate", tiny_model, "--data", tiny_data, "--algo", "minmax", "-o", tmp_path).exit_code == 0
    cache = tmp_path / "minmax.cache"
    r = invoke("evaluate", yolo_model, "--cache", cache, "--data", PHOTOS, "--task", "classification",
               "-o", tmp_path / "r1")
    one_line_error(r, f"{yolo_model}: --task classification needs one output of class scores [N, C]; its "
                      "outputs are boxes [N, ?, 4], scores [N, ?, 80]; use --task detection")  # the file, not the graph
    r = invoke("evaluate", tiny_model, "--cache", cache, "--data", tiny_data, "--task", "detection",
               "-o", tmp_path / "r2")
    one_line_error(r, "its outputs are logits [N, 5]; use --task classification")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def test_yolov8_layout_is_a_detector():
    from onnx import TensorProto, helper

    from calib.evaluate.tasks import check_task

    def model(*outs):
        g = helper.make_graph([], "g", [], [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs])
        return helper.make_model(g)

    assert check_task(model(("output0", ["N", 22, 2100])), "detection") == "yolov8"
    assert check_task(model(("boxes", ["N", 10, 4]), ("scores", ["N", 10, 3])), "detection", "yolov3") == "yolov3"
    with pytest.raises(Exception, match="detection format yolov3 does not fit"):
        check_task(model(("output0", ["N", 22, 2100])), "detection", "yolov3")
    assert check_task(model(("logits", ["N", 1000, 1, 1])), "classification") is None


def test_build_calibrates_on_an_image_folder_with_the_standin(tmp_path):
    from test_tensorrt_cli import CNN, calib_cli

    imgs = photos(tmp_path / "imgs", sorted(p.stem for p in PHOTOS.glob("*.jpg")))
    (tmp_path / "imgs" / "broken.jpg").write_bytes(b"not a jpeg")  # skipped: the samples file is cut short
    eng = tmp_path / "cnn.engine"
    r = calib_cli("build", CNN, "--calibrator", "minmax", "--data", imgs, "--preprocess", "imagenet",
                  "--precision", "int8", "--batch-size", "4", "-o", eng)
    assert r.returncode == 0, r.stderr
    assert read_cache(tmp_path / "cnn.cache").amax("input") == pytest.approx((1 - 0.406) / 0.225, rel=0.05)


def test_evaluate_says_when_a_detector_is_compared_on_its_outputs_only(yolo_model, tmp_path):
    imgs = photos(tmp_path / "imgs", ("astronaut", "chelsea"))
    r = invoke("calibrate", yolo_model, "--data", imgs, "--letterbox", "--algo", "minmax", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    args = ["evaluate", yolo_model, "--cache", tmp_path / "c" / "minmax.cache", "--data", imgs, "--letterbox",
            "--no-layerwise"]
    r = invoke(*args, "-o", tmp_path / "r1")
    assert r.exit_code == 0 and f"note: {yolo_model} is a detector: --task detection adds mAP" in r.output, r.output
    r = invoke(*args, "--task", "detection", "-o", tmp_path / "r2")
    assert r.exit_code == 0 and "note:" not in r.output, r.output
