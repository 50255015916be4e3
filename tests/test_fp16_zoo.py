"""The FP16+INT8 model of each zoo model (and the golden MobileNetV2): it passes onnx.checker and ONNX's strict type
inference, keeps FP32 only where calib's rules say, and its CPU emulation follows the Q/DQ model as written
(FP32 float layers) on real photos or sentences."""
import numpy as np
import onnx
import pytest
from PIL import Image

from calib.calibrate import calibrate
from calib.deploy.emulate import Fp16Runner
from calib.quantize.fp16_model import check, make_fp16_model
from calib.quantize.model import inspect_model
from calib.quantize.qdq import insert_qdq
from calib.runners.onnxruntime import OrtRunner
from conftest import ROOT, golden

PHOTOS = sorted((ROOT / "datasets" / "photos").glob("*.jpg"))[:8]


def _photos(size: int, mean=(0, 0, 0), std=(1, 1, 1)) -> np.ndarray:
    x = np.stack([np.asarray(Image.open(p).convert("RGB").resize((size, size)), np.float32) / 255.0 for p in PHOTOS])
    x = (x - np.array(mean, np.float32)) / np.array(std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _sentences(model_path) -> dict:
    from calib import zoo
    from calib.data.text import TextSource

    lines = (ROOT / "datasets" / "sentences.txt").read_text().splitlines()[:16]
    info = inspect_model(model_path)
    batch = next(iter(TextSource(lines, zoo.tokenizer_path("zoo:minilm-l6"), info.inputs, batch_size=16)))
    return {k: np.asarray(v) for k, v in batch.items()}


def _sqnr(ref, got) -> float:
    err = got - ref
    return float(10 * np.log10((ref.astype(np.float64) ** 2).sum() / max((err.astype(np.float64) ** 2).sum(), 1e-30)))


CASES = {  # model -> the FP32 rules its FP16+INT8 model shows (minmax scales on these samples)
    "yolov3-tiny": set(),  # its box decoding stays below 2048
    "yolov8n-320": {"reduction"},  # the DFL Softmax
    "minilm-l6": {"reduction", "variance", "underflow"},  # Max(count, 1e-9), Max(norm, 1e-12) before their Divs
    "mobilenet_v2": set(),
}
TOLERANCE_DB = 1.0  # FP16 rounding moves some INT8 roundings: the two land near each other against FP32, not equal


@pytest.mark.parametrize("name", list(CASES))
def test_zoo_fp16_int8_model(name):
    from calib import zoo

    if name == "mobilenet_v2":
        path = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")
        feed = {"input": _photos(224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))}
    elif name == "minilm-l6":
        path = zoo.fetch(name)
        feed = _sentences(path)
    else:
        path = zoo.fetch(name)
        info = inspect_model(path)
        size = 416 if name == "yolov3-tiny" else 320
        feed = {info.inputs[0][0]: _photos(size)}
    model = onnx.load(str(path))
    amax = calibrate(path, feed, ["minmax"], batch_size=4).amax["minmax"]
    f = make_fp16_model(model, amax, label=name)
    check(f.model, name)
    rules = CASES[name]
    assert {k.rule for k in f.kept if k.rule != "range"} == rules
    ref = OrtRunner(path).run(feed)
    qdq = Fp16Runner(insert_qdq(model, amax)).run(feed)
    fp16 = Fp16Runner(f.model).run(feed)
    for out in qdq:
        assert np.isfinite(fp16[out]).all(), out
        a, b = _sqnr(ref[out], qdq[out]), _sqnr(ref[out], fp16[out])
        print(f"{name} {out}: SQNR vs FP32 {a:.2f} dB (FP32-float Q/DQ), {b:.2f} dB (FP16+INT8)")
        assert b > a - TOLERANCE_DB, (out, a, b)
