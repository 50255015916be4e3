"""The CPU INT8 simulation predicts what TensorRT's INT8 engine did with the same cache (MobileNetV2, H200)."""
import json

import pytest

from calib.data.arrays import ArraySource, load_array
from calib.evaluate.api import evaluate
from calib.quantize.cache import read_cache
from conftest import golden

# measured on the H200 with TensorRT 8.6 (tests/golden reports): top-1 agreement with FP32, logits SQNR
TRT = {"minmax": (0.582, 8.4), "entropy2": (0.598, 10.6)}


@pytest.fixture(scope="module")
def result():
    model = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")
    caches = {"minmax": read_cache(golden("mobilenet_v2", "minmax.cache")).amaxes(),
              "entropy2": read_cache(golden("mobilenet_v2", "entropy2.cache")).amaxes()}
    src = ArraySource(load_array(golden("mobilenet_v2", "photos_224.npy")), "input", 32, "imagenet")
    return evaluate(model, caches, src, task="classification", layerwise=False)


def test_constants_are_the_golden_measurements():
    e2 = json.loads(golden("mobilenet_v2", "report-fp32-fp16-entropy2.json").read_text())["int8_entropy2"]
    mm = json.loads(golden("mobilenet_v2", "report-minmax-fromcache.json").read_text())["int8_minmax"]
    assert (e2["top1_agree_vs_fp32"], e2["logits_sqnr_db"]) == pytest.approx(TRT["entropy2"], abs=0.05)
    assert (mm["top1_agree_vs_fp32"], mm["logits_sqnr_db"]) == pytest.approx(TRT["minmax"], abs=0.05)


@pytest.mark.parametrize("name", ["minmax", "entropy2"])
def test_simulation_predicts_tensorrt(result, name):
    agree, sqnr = TRT[name]
    entry = result["configs"][name]
    assert entry["outputs"]["logits"]["sqnr_db"] == pytest.approx(sqnr, abs=2.0)
    assert entry["task"]["agreement_top1"] == pytest.approx(agree, abs=0.05)
