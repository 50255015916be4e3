"""calib's calibration held against real TensorRT 8.6 caches (H200)."""

import numpy as np
import pytest

from calib.cache import read_cache
from calib.calibrate import calibrate
from conftest import golden


@pytest.fixture(scope="module")
def cnn():
    return calibrate(golden("cnn", "cnn.onnx"), golden("cnn", "cnn_calib.npy"), ["minmax", "entropy"], batch_size=8)


@pytest.fixture(scope="module")
def mbv2():
    return calibrate(golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx"), golden("mobilenet_v2", "photos_224.npy"),
                     ["minmax", "entropy"], batch_size=32, preprocess="imagenet")


def _ratios(ours, trt):
    common = [k for k in trt if k in ours]
    return common, np.array([ours[k] / trt[k] for k in common])


@pytest.mark.parametrize("which,gold", [("cnn", "cnn/int8-minmax.cache"), ("mbv2", "mobilenet_v2/minmax.cache")])
def test_minmax_matches_tensorrt(which, gold, request):
    res = request.getfixturevalue(which)
    trt = read_cache(golden(*gold.split("/"))).amaxes()
    common, r = _ratios(res.amax["minmax"], trt)
    assert len(common) == len([k for k in trt if not k.startswith("(Unnamed")])
    assert np.abs(r - 1).max() < 1e-5


@pytest.mark.parametrize("which,gold,med,p90", [("cnn", "cnn/int8-entropy2.cache", 0.05, 0.10),
                                                ("mbv2", "mobilenet_v2/entropy2.cache", 0.05, 0.15)])
def test_entropy_close_to_entropycalibration2(which, gold, med, p90, request):
    res = request.getfixturevalue(which)
    trt = read_cache(golden(*gold.split("/"))).amaxes()
    _, r = _ratios(res.amax["entropy"], trt)
    dev = np.abs(r - 1)
    assert np.median(dev) <= med
    assert np.percentile(dev, 90) <= p90
