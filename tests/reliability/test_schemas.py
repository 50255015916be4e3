"""Detection ground truth is checked field by field: a malformed COCO annotation or YOLO label row is one error line
naming the file and the annotation id or line, never a traceback nor boxes silently reshaped into others."""
import json

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.data.images import coco_samples, yolo_samples
from calib.errors import DataError
from conftest import conv_relu_gap
from reliability.test_bad_inputs import no_files, one_line_failure


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


GOOD_ANN = {"id": 7, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 3], "iscrowd": 0}


def coco_doc(**changes):
    ann = {k: v for k, v in {**GOOD_ANN, **changes}.items() if v is not ...}
    return {"images": [{"id": 1, "file_name": "0.png"}, {"id": 2, "file_name": "1.png"}],
            "annotations": [ann], "categories": [{"id": 1, "name": "thing"}]}


@pytest.fixture
def coco(tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    (tmp_path / "imgs").mkdir()
    for i in range(2):
        Image.new("RGB", (12, 10), (i * 90, 20, 0)).save(tmp_path / "imgs" / f"{i}.png")
    return tmp_path


def coco_run(t, doc):
    (t / "ann.json").write_text(json.dumps(doc))
    return invoke("--quiet", "calibrate", t / "m.onnx", "--data", t / "ann.json", "--images", t / "imgs",
                  "--resize", "8x8", "--preprocess", "unit", "--algo", "minmax", "--out", t / "out")


def test_a_valid_coco_file_runs(coco):
    r = coco_run(coco, coco_doc())
    assert r.exit_code == 0, r.output
    samples, cats = coco_samples(coco / "imgs", coco / "ann.json")
    assert cats == {1: "thing"}
    assert samples[0].boxes.tolist() == [[1, 1, 4, 3]] and samples[0].classes.tolist() == [1]
    assert samples[1].boxes.shape == (0, 4)


@pytest.mark.parametrize("bbox, needle", [(..., "bbox must be 4 finite numbers"), ([1, 2, 3], "got [1, 2, 3]"),
                                          ("1 2 3 4", "got '1 2 3 4'"), ([1, 2, "3", 4], "bbox must be"),
                                          ([1, 2, -3, 4], "negative width"), (None, "got None")])
def test_coco_bad_bbox_names_the_annotation(coco, bbox, needle):
    one_line_failure(coco_run(coco, coco_doc(bbox=bbox)), "ann.json", "annotation 7", needle)
    assert no_files(coco / "out")


def test_coco_string_ids(coco):
    one_line_failure(coco_run(coco, coco_doc(image_id="1")), "ann.json", "annotation 7", "image_id must be an integer")
    one_line_failure(coco_run(coco, coco_doc(category_id="1")), "annotation 7", "category_id must be an integer")
    one_line_failure(coco_run(coco, coco_doc(id="7")), "ann.json", "annotation '7'", "id must be an integer")
    doc = coco_doc()
    doc["images"][0]["id"] = "1"
    one_line_failure(coco_run(coco, doc), "ann.json", "images[0]", "id must be an integer")


def test_coco_missing_file_name(coco):
    doc = coco_doc()
    del doc["images"][1]["file_name"]
    one_line_failure(coco_run(coco, doc), "ann.json", "image id 2", "file_name")


def test_coco_annotation_of_an_unknown_image(coco):
    one_line_failure(coco_run(coco, coco_doc(image_id=99)), "annotation 7", "image_id 99 is not in 'images'")


@pytest.mark.parametrize("doc", [[], {"images": {}}, {"images": [3]}, {"annotations": []}])
def test_coco_wrong_shapes(coco, doc):
    one_line_failure(coco_run(coco, doc), "ann.json")


@pytest.fixture
def yolo(tmp_path):
    (tmp_path / "y" / "images").mkdir(parents=True)
    (tmp_path / "y" / "labels").mkdir()
    Image.new("RGB", (40, 30)).save(tmp_path / "y" / "images" / "a.png")
    return tmp_path / "y"


@pytest.mark.parametrize("rows, needle", [
    ("0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2 0.9\n", "line 2: expected 5 columns"),  # a prediction's confidence
    ("0 0.1 0.1 0.2 0.1 0.3 0.3 0.4 0.4\n", "line 1: expected 5 columns"),  # a segment's polygon
    ("nan 0.5 0.5 0.2 0.2\n", "line 1: values must be finite"),
    ("-1 0.5 0.5 0.2 0.2\n", "line 1: class -1 is not a non-negative integer"),
    ("2.5 0.5 0.5 0.2 0.2\n", "line 1: class 2.5 is not a non-negative integer"),
    ("1 0.5 inf 0.2 0.2\n", "line 1: values must be finite"),
    ("1 0.5 0.5 -0.2 0.2\n", "line 1: negative box width"),
    ("1 0.5 0.5 0.2 zero\n", "line 1: not numbers"),
])
def test_yolo_bad_rows_name_file_and_line(yolo, rows, needle):
    (yolo / "labels" / "a.txt").write_text(rows)
    with pytest.raises(DataError, match=f"a.txt: {needle}"):
        yolo_samples(yolo)


@pytest.mark.parametrize("row", ["0 20.5 -19.5 40 40", "0 20.5 19.5 40 40", "0 320 240 64 48", "0 0.5 0.5 1.2 0.2",
                                 "0 -0.5 0.5 0.2 0.2", "0 0.5 1.02 0.2 0.2", "0 0.5 0.5 0.2 1.5"])
def test_yolo_rows_in_pixels_are_refused_naming_file_and_line(yolo, tmp_path, row):
    """Coordinates far outside 0..1 (pixel coordinates) were accepted and scored."""
    from reliability.test_bad_inputs import snapshot

    (yolo / "labels" / "a.txt").write_text(f"1 0.5 0.5 0.2 0.2\n{row}\n")
    with pytest.raises(DataError, match="a.txt: line 2: "):
        yolo_samples(yolo)
    conv_relu_gap(tmp_path / "m.onnx")
    before = snapshot(tmp_path)
    for command in ("calibrate", "evaluate"):
        args = ["--cache", tmp_path / "c.cache"] if command == "evaluate" else ["--algo", "minmax"]
        if command == "evaluate":
            (tmp_path / "c.cache").write_text("TRT-8600-EntropyCalibration2\n" + "".join(
                f"{t}: 3c810204\n" for t in ("input", "conv1", "relu1", "pool1", "conv2", "add1", "gap", "flat",
                                              "logits")))
            before = snapshot(tmp_path)
        r = invoke("--quiet", command, tmp_path / "m.onnx", "--data", yolo, "--resize", "8x8", "--preprocess", "unit",
                   *args, "--out", tmp_path / "out")
        one_line_failure(r, "a.txt", "line 2", "0 to 1")
        assert r.exit_code == 2 and no_files(tmp_path / "out") and snapshot(tmp_path, [tmp_path / "out"]) == before


def test_yolo_rows_a_little_past_the_edge_are_read(yolo):
    (yolo / "labels" / "a.txt").write_text("0 1.005 0.5 0.2 0.2\n1 0.5 -0.004 1.0 1.008\n")
    assert yolo_samples(yolo)[0].classes.tolist() == [0, 1]


def test_yolo_good_rows(yolo):
    (yolo / "labels" / "a.txt").write_text("3 0.5 0.5 0.25 0.5\n\n2.0 0.25 0.25 0.5 0.5\n")
    s = yolo_samples(yolo)[0]
    assert s.classes.tolist() == [3, 2]
    assert np.allclose(s.boxes, [[15, 7.5, 10, 15], [0, 0, 20, 15]])


def test_yolo_bad_row_through_the_cli(yolo, tmp_path):
    conv_relu_gap(tmp_path / "m.onnx")
    (yolo / "labels" / "a.txt").write_text("0 0.5 0.5 0.2 0.2 0.9\n")
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", yolo, "--resize", "8x8", "--preprocess", "unit",
               "--algo", "minmax", "--out", tmp_path / "out")
    one_line_failure(r, "a.txt", "line 1", "expected 5 columns")
    assert no_files(tmp_path / "out")
