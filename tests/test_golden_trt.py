"""calib's calibration held against real TensorRT 8.6 caches (H200)."""

import numpy as np
import pytest

from calib.calibrate import calibrate
from calib.quantize.cache import read_cache
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


@pytest.mark.parametrize("which,gold,med,p90", [("cnn", "cnn/int8-entropy2.cache", 1e-6, 1e-6),
                                                ("mbv2", "mobilenet_v2/entropy2.cache", 1e-6, 1e-3)])
def test_entropy_close_to_entropycalibration2(which, gold, med, p90, request):
    res = request.getfixturevalue(which)
    trt = read_cache(golden(*gold.split("/"))).amaxes()
    _, r = _ratios(res.amax["entropy"], trt)
    dev = np.abs(r - 1)
    assert np.median(dev) <= med
    assert np.percentile(dev, 90) <= p90
    assert np.mean(dev < 1e-6) >= 0.9  # bit for bit on TensorRT's grid (96 of MobileNetV2's 101 tensors)


@pytest.mark.parametrize("which,gold", [("cnn", "cnn/int8-entropy2.cache"), ("mbv2", "mobilenet_v2/entropy2.cache")])
def test_entropycalibration2_thresholds_sit_on_the_first_batch_grid(which, gold, request):
    """TensorRT's histogram: 2048 bins over the first batch's absmax, the width doubled while a later batch is
    past the range; its threshold is a bin centre. So amax / width - 0.5 is an integer for every tensor on that
    grid, and not on calib's former grid (2048 bins over the absmax of all batches)."""
    from calib.algorithms.entropy import tensorrt_width

    res = request.getfixturevalue(which)
    trt = read_cache(golden(*gold.split("/"))).amaxes()
    names = [k for k in trt if k in res.stats.hists]
    assert len(names) >= 10
    on, off = [], []
    for k in names:
        h = res.stats.hists[k]
        w = tensorrt_width(h.first_absmax, h.absmax)
        on.append(trt[k] / w - 0.5)
        off.append(trt[k] / (h.absmax / 2048) - 0.5)
    on, off = np.array(on), np.array(off)
    assert np.abs(on - np.round(on)).max() < 2e-3
    assert np.mean(np.abs(off - np.round(off)) > 0.05) > 0.3  # the absmax grid misses most
    assert on.max() <= 2048.0 + 1e-3 and on.min() >= 127.0
