"""Data sources and preprocessing on real files."""
import json

import numpy as np
import pytest
from PIL import Image

from calib.data.arrays import load_array, preset_transform
from calib.data.images import coco_samples, folder_samples, subset, yolo_samples
from calib.data.sources import make_source
from calib.data.transforms import Preprocessor
from calib.errors import DataError
from calib.recipe import DataSpec, PreprocessSpec
from conftest import ROOT


def _img(path, w, h, seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)).save(path)


def test_letterbox_geometry_and_inverse():
    img = Image.new("RGB", (200, 100), (255, 0, 0))
    x, box = Preprocessor(PreprocessSpec(resize=(64, 64), mode="letterbox", pad_value=114))(img)
    assert x.shape == (3, 64, 64) and x.dtype == np.float32
    assert box.scale_x == pytest.approx(64 / 200) and box.pad_y == 16
    assert x[0, 0, 0] == pytest.approx(114 / 255) and x[0, 32, 32] == pytest.approx(1.0)
    back = box.to_original(np.array([[0, 16, 64, 48]]))
    assert np.allclose(back, [[0, 0, 200, 100]])


def test_resize_shorter_and_crop_like_torchvision():
    img = Image.new("RGB", (300, 200))
    spec = PreprocessSpec(resize=(256,), mode="shorter", crop=(224,), mean=(0.485, 0.456, 0.406),
                          std=(0.229, 0.224, 0.225))
    pre = Preprocessor(spec)
    geo, _ = pre.geometry(img)
    assert geo.size == (224, 224)
    resized = img.resize((384, 256), Image.BILINEAR)  # torchvision Resize(256): 300x200 -> 384x256
    assert pre.geometry(img)[0].tobytes() == resized.crop((80, 16, 304, 240)).tobytes()
    x, _ = pre(Image.new("RGB", (300, 200), (255, 255, 255)))
    assert x[0, 0, 0] == pytest.approx((1 - 0.485) / 0.229, rel=1e-5)


def test_bgr_nhwc_uint8():
    img = Image.new("RGB", (4, 4), (10, 20, 30))
    x, _ = Preprocessor(PreprocessSpec(color="BGR", layout="NHWC", dtype="uint8"))(img)
    assert x.shape == (4, 4, 3) and x.dtype == np.uint8 and list(x[0, 0]) == [30, 20, 10]


def test_folder_with_classes_and_bad_images(tmp_path):
    for c in ("cat", "dog"):
        for i in range(5):
            _img(tmp_path / c / f"{i}.jpg", 20, 16, i)
    (tmp_path / "dog" / "broken.jpg").write_bytes(b"junk")
    samples, classes = folder_samples(tmp_path)
    assert classes == ["cat", "dog"] and len(samples) == 11
    src = make_source(DataSpec(kind="folder", path=str(tmp_path), max_bad=0.2),
                      PreprocessSpec(resize=(8, 8), mode="exact"), "input", 4)
    batches = list(src)
    assert sum(b["input"].shape[0] for b in batches) == 10 and len(src.bad) == 1
    again = list(src)
    assert again[0]["input"] is not batches[0]["input"] and np.array_equal(again[0]["input"], batches[0]["input"])
    strict = make_source(DataSpec(kind="folder", path=str(tmp_path), max_bad=0.0), PreprocessSpec(resize=(8, 8)),
                         "input", 4)
    with pytest.raises(DataError, match="broken.jpg"):
        list(strict)


def test_subset_is_seeded_and_disjoint():
    items = list(range(100))
    a = subset(items, 10, seed=3)
    assert a == subset(items, 10, seed=3) and a != subset(items, 10, seed=4)
    b = subset(items, 10, seed=3, offset=10)
    assert not set(a) & set(b)


def test_coco_and_yolo(tmp_path):
    _img(tmp_path / "im" / "a.jpg", 40, 30)
    doc = {"images": [{"id": 7, "file_name": "a.jpg", "width": 40, "height": 30}],
           "annotations": [{"id": 1, "image_id": 7, "bbox": [1, 2, 10, 20], "category_id": 3, "iscrowd": 0}],
           "categories": [{"id": 3, "name": "thing"}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    s, cats = coco_samples(tmp_path / "im", tmp_path / "ann.json")
    assert s[0].image_id == 7 and s[0].boxes.tolist() == [[1, 2, 10, 20]] and cats == {3: "thing"}
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataError, match="bad.json: not a COCO"):
        coco_samples(tmp_path / "im", tmp_path / "bad.json")
    _img(tmp_path / "y" / "images" / "b.jpg", 40, 30)
    (tmp_path / "y" / "labels").mkdir()
    (tmp_path / "y" / "labels" / "b.txt").write_text("2 0.5 0.5 0.25 0.5\n")
    ys = yolo_samples(tmp_path / "y")
    assert ys[0].classes.tolist() == [2]
    assert np.allclose(ys[0].boxes, [[15, 7.5, 10, 15]])  # normalised cx,cy,w,h -> pixel x,y,w,h on 40x30
    (tmp_path / "y" / "labels" / "b.txt").write_text("2 0.5 oops\n")
    with pytest.raises(DataError, match="b.txt: line 1: expected 5 columns"):
        yolo_samples(tmp_path / "y")


def test_empty_and_truncated(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty: no images"):
        folder_samples(tmp_path / "empty")
    _img(tmp_path / "t" / "a.jpg", 64, 64)
    _img(tmp_path / "t" / "b.jpg", 64, 64, seed=1)
    data = (tmp_path / "t" / "b.jpg").read_bytes()
    (tmp_path / "t" / "b.jpg").write_bytes(data[: len(data) // 2])  # truncated JPEG
    src = make_source(DataSpec(kind="folder", path=str(tmp_path / "t"), max_bad=0.5), PreprocessSpec(resize=(8, 8)),
                      "input", 4)
    assert sum(b["input"].shape[0] for b in src) == 1 and src.bad == [str(tmp_path / "t" / "b.jpg")]


def test_arrays(tmp_path):
    np.savez(tmp_path / "d.npz", a=np.zeros((2, 3)), b=np.ones((2, 3)))
    with pytest.raises(DataError, match="name one with key="):
        load_array(tmp_path / "d.npz")
    assert load_array(tmp_path / "d.npz", "b").sum() == 6
    with pytest.raises(DataError, match="is a folder"):
        load_array(tmp_path)
    u8 = np.full((1, 2, 2, 3), 255, np.uint8)
    x = preset_transform(u8, "imagenet", True)
    assert x.shape == (1, 3, 2, 2) and x[0, 0, 0, 0] == pytest.approx((1 - 0.485) / 0.229, rel=1e-6)


def test_real_photos_are_there():
    photos = sorted((ROOT / "datasets" / "photos").glob("*.jpg"))
    assert len(photos) >= 15
    s, _ = folder_samples(ROOT / "datasets" / "photos_crops")
    assert len(s) >= 32
