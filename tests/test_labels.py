"""Labels in the model's terms: COCO category ids mapped to class indices, class indices from file names."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from calib.data.labels import COCO80_IDS, category_map, coco80, labels_from_names
from calib.data.sources import image_samples, make_source
from calib.errors import DataError
from calib.evaluate.api import evaluate
from calib.recipe import DataSpec, PreprocessSpec


def test_coco80_table():
    m = coco80()
    assert len(m) == 80 == len(set(m.values())) and sorted(m.values()) == list(range(80))
    assert m[1] == 0 and m[18] == 16 and m[90] == 79 and 12 not in m  # person, dog, toothbrush; 12 is a gap
    assert category_map("auto", {1, 18}, "a.json")[0] == m
    assert category_map("auto", {0, 1}, "a.json")[0] is None  # 0 is no COCO id: ids are indices
    assert category_map("identity", {1, 18}, "a.json")[0] is None
    with pytest.raises(DataError, match="a.json: category ids \\[12\\]"):
        category_map("auto", {1, 12}, "a.json")


def _fake_detector(path, boxes, scores):
    """A graph whose boxes/scores outputs are constants (plus 0 x the input, so that it has an activation)."""
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=0, axes=[1, 2, 3]),
             helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Unsqueeze", ["z", "ax"], ["z2"]),
             helper.make_node("Unsqueeze", ["z2", "ax2"], ["z3"]),
             helper.make_node("Add", ["z3", "cb"], ["boxes"]), helper.make_node("Add", ["z3", "cs"], ["scores"])]
    a, c = scores.shape[1], scores.shape[2]
    g = helper.make_graph(nodes, "fake", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 64, 64])],
                          [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", a, 4]),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", a, c])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                           numpy_helper.from_array(np.array([1], np.int64), "ax"),
                           numpy_helper.from_array(np.array([2], np.int64), "ax2"),
                           numpy_helper.from_array(boxes, "cb"), numpy_helper.from_array(scores, "cs")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture
def coco_person_dog(tmp_path):
    """One image with a person (COCO id 1) and a dog (COCO id 18); the detector finds both exactly, as its
    classes 0 and 16 (the COCO-80 indices)."""
    boxes = np.array([[[8, 8, 24, 24], [40, 40, 60, 60]]], np.float32)
    scores = np.zeros((1, 2, 17), np.float32)
    scores[0, 0, 0], scores[0, 1, 16] = 0.9, 0.8
    model = _fake_detector(tmp_path / "fake.onnx", boxes, scores)
    (tmp_path / "im").mkdir()
    Image.new("RGB", (64, 64)).save(tmp_path / "im" / "a.png")
    doc = {"images": [{"id": 7, "file_name": "a.png", "width": 64, "height": 64}],
           "annotations": [{"id": 1, "image_id": 7, "bbox": [8, 8, 16, 16], "category_id": 1, "iscrowd": 0},
                           {"id": 2, "image_id": 7, "bbox": [40, 40, 20, 20], "category_id": 18, "iscrowd": 0}],
           "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    return model, tmp_path


@pytest.mark.parametrize("how,expected", [("auto", 1.0), ("coco80", 1.0), ("identity", 0.0)])
def test_coco_ids_are_mapped_to_class_indices(coco_person_dog, how, expected):
    model, d = coco_person_dog
    spec = DataSpec(kind="coco", path=str(d / "im"), annotations=str(d / "ann.json"), category_map=how)
    assert list(image_samples(spec)[0].classes) == ([0, 16] if expected else [1, 18])
    src = make_source(spec, PreprocessSpec(resize=(64, 64), mode="letterbox"), "images", 1)
    res = evaluate(model, {"int8": {"images": 1.0}}, src, task="detection")
    assert res["fp32_task"]["vs_labels"]["map50_95"] == pytest.approx(expected)  # id 1 never scored against class 0
    assert res["configs"]["int8"]["task"]["vs_labels"]["map50_95"] == pytest.approx(expected)


def test_category_map_file_wins(coco_person_dog):
    _, d = coco_person_dog
    (d / "map.yaml").write_text("1: 3\n18: 5\n")
    spec = DataSpec(kind="coco", path=str(d / "im"), annotations=str(d / "ann.json"),
                    category_map_file=str(d / "map.yaml"))
    assert list(image_samples(spec)[0].classes) == [3, 5]
    (d / "map.yaml").write_text("1: 3\n")
    with pytest.raises(DataError, match="category id 18 .* not in the category map"):
        image_samples(spec)


def test_labels_from_file_names(tmp_path):
    for name in ("imagenet_00_243.jpg", "imagenet_01_559.jpg", "cat.jpg"):
        Image.new("RGB", (8, 8)).save(tmp_path / name)
    spec = DataSpec(kind="folder", path=str(tmp_path), label_regex=r"_(\d+)\.jpg$")
    got = {s.path.name: s.label for s in image_samples(spec)}
    assert got == {"imagenet_00_243.jpg": 243, "imagenet_01_559.jpg": 559, "cat.jpg": None}
    with pytest.raises(DataError, match="finds a class index in none"):
        labels_from_names(image_samples(DataSpec(kind="folder", path=str(tmp_path))), r"_x(\d+)", "here")
    with pytest.raises(DataError, match="needs a group"):
        labels_from_names([], r"\d+", "here")


def test_include_adds_whole_folders_after_the_subset(tmp_path):
    for folder, n in (("a", 6), ("b", 3)):
        (tmp_path / folder).mkdir()
        for i in range(n):
            Image.new("RGB", (8, 8)).save(tmp_path / folder / f"{i}.png")
    spec = DataSpec(kind="folder", path=str(tmp_path / "a"), limit=2, offset=2, include=(str(tmp_path / "b"),))
    s = image_samples(spec)
    assert len(s) == 5 and [x.path.parent.name for x in s].count("b") == 3
    assert sorted(x.image_id for x in s) == list(range(5))


def test_top1_accuracy_against_labels_beside_agreement(tmp_path, tiny_model):
    """Labelled files: top-1 accuracy of FP32 and INT8 against the labels, with intervals, next to the agreement."""
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(tmp_path / f"s_{i:02d}_{i % 5}.png")
    spec = DataSpec(kind="folder", path=str(tmp_path), label_regex=r"_(\d+)\.png$")
    src = make_source(spec, PreprocessSpec(), "input", 4)
    res = evaluate(tiny_model, {"int8": {"input": 1.0, "conv1": 2.0}}, src, task="classification", layerwise=False)
    iv = res["configs"]["int8"]["intervals"]
    assert iv["top1"]["n"] == 12 and iv["agreement_top1"]["n"] == 12
    assert iv["top1"]["value"] == pytest.approx(res["configs"]["int8"]["task"]["test_top1"])
    assert res["fp32_intervals"]["top1"]["value"] == pytest.approx(res["configs"]["int8"]["task"]["ref_top1"])


def test_coco80_ids_constant_is_sorted_and_complete():
    assert list(COCO80_IDS) == sorted(COCO80_IDS) and len(COCO80_IDS) == 80 and COCO80_IDS[-1] == 90


@pytest.mark.slow
def test_foolbox_imagenet_samples_are_labelled_photos(tmp_path):
    """foolbox's 20 ImageNet photos carry their class index in the file name: MobileNetV2 in FP32 (the golden
    model TensorRT was measured on) gets 18 of them right, so the labels are real ones and read correctly."""
    from calib.errors import CalibError
    from calib.zoo import IMAGENET_SAMPLE_CLASSES, fetch_data
    from conftest import golden

    model = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")
    try:
        folder = fetch_data("imagenet-samples", root=tmp_path)
    except CalibError as exc:
        pytest.skip(f"foolbox not downloadable here: {exc}")
    spec = DataSpec(kind="folder", path=str(folder), label_regex=r"_(\d+)\.jpg$")
    assert [s.label for s in image_samples(spec)] == list(IMAGENET_SAMPLE_CLASSES)
    pre = PreprocessSpec(resize=(256,), mode="shorter", crop=(224,), mean=(0.485, 0.456, 0.406),
                         std=(0.229, 0.224, 0.225))
    res = evaluate(model, {"input_only": {"input": 2.7}}, make_source(spec, pre, "input", 10),
                   task="classification", layerwise=False)
    fp32 = res["fp32_intervals"]["top1"]
    assert fp32["n"] == 20 and fp32["value"] == pytest.approx(0.9)
    assert res["configs"]["input_only"]["intervals"]["top1"]["n"] == 20


def test_recipe_label_keys(tmp_path, tiny_model):
    from calib.errors import RecipeError
    from calib.recipe import load_recipe

    (tmp_path / "more").mkdir()
    p = tmp_path / "r.yaml"
    text = f"""
model: {tiny_model}
calibration_data: {{kind: folder, path: more}}
evaluation_data: {{kind: coco, path: more, annotations: r.yaml, include: [more], category_map: coco80,
                  label_regex: '_(\\d+)'}}
"""
    p.write_text(text)
    e = load_recipe(p).evaluation_data
    assert e.include == (str(tmp_path / "more"),) and e.category_map == "coco80" and e.label_regex == r"_(\d+)"
    p.write_text(text.replace("include: [more]", "include: [gone]"))
    with pytest.raises(RecipeError, match=r"evaluation_data.include\[0\]: file not found"):
        load_recipe(p)
    p.write_text(text.replace("coco80", "coco91"))
    with pytest.raises(RecipeError, match="evaluation_data.category_map: 'coco91' is not one of"):
        load_recipe(p)
