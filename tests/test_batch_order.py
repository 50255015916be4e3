"""What batch size and order change in a calibration, as docs/report.md says: nothing for minmax, percentile, mse and
entropy-stable (calib's histograms merge exactly), the threshold of the TensorRT-exact entropy (its grid is set by
the first batch's range, as EntropyCalibration2's is)."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from calib.algorithms.entropy import tensorrt_width
from calib.calibrate import calibrate
from calib.cli import main
from calib.quantize.cache import read_cache
from conftest import ROOT, conv_relu_gap, golden

STABLE = ("minmax", "percentile", "mse", "entropy-stable")


def _first_small(n: int = 24) -> np.ndarray:
    """Uniform [0, 1) samples, the first one scaled down to a tenth: a first batch of one sample has a tenth of the
    range of the others."""
    x = np.random.default_rng(5).random((n, 3, 8, 8), dtype=np.float32)
    x[0] *= 0.1
    return x


def test_tensorrt_entropy_grid_is_set_by_the_first_batch(tmp_path):
    model = conv_relu_gap(tmp_path / "tiny.onnx")
    x = _first_small()
    top = float(np.abs(x).max())
    amax, width = {}, {}
    for bs in (1, 8):
        res = calibrate(model, x, ["entropy", "entropy-stable"], batch_size=bs)
        amax[bs] = res.amax
        width[bs] = tensorrt_width(float(np.abs(x[:bs]).max()), top)  # TensorRT's: first batch / 2048, doubled
        i = res.amax["entropy"]["input"] / width[bs] - 0.5  # a bin centre of that grid
        assert i == pytest.approx(round(i), abs=1e-6), (bs, i)
    assert width[1] != width[8]
    assert amax[1]["entropy"]["input"] != amax[8]["entropy"]["input"]
    assert amax[1]["entropy-stable"] == amax[8]["entropy-stable"]


def _amax_per_batching(model, x, bs_list, algos, **kw) -> dict:
    perm = np.random.default_rng(0).permutation(len(x))
    out = {f"batch {bs}": calibrate(model, x, algos, batch_size=bs, **kw).amax for bs in bs_list}
    out["shuffled"] = calibrate(model, x[perm], algos, batch_size=bs_list[-1], **kw).amax
    return out


def test_batch_size_and_order_change_no_bit_of_the_mergeable_algorithms(tmp_path):
    model = conv_relu_gap(tmp_path / "tiny.onnx")
    x = _first_small()
    runs = _amax_per_batching(model, x, (1, 4, 8), ("entropy",) + STABLE)
    ref = runs["batch 1"]
    for label, amax in runs.items():
        for algo in STABLE:
            assert amax[algo] == ref[algo], (label, algo)  # exact float equality, tensor by tensor
            assert len(amax[algo]) == 9
    assert any(runs[k]["entropy"] != ref["entropy"] for k in runs), "the TensorRT-exact entropy should move here"


@pytest.mark.slow
def test_on_mobilenet_v2_and_real_photos():
    """Torchvision's MobileNetV2 (ImageNet weights) on 16 photo crops: the four mergeable algorithms give the same
    amax bit for bit at batch sizes 1, 4, 8 and in a shuffled order; the TensorRT-exact entropy does not."""
    from calib.data.sources import make_source
    from calib.recipe import DataSpec, PreprocessSpec

    model = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")
    pre = PreprocessSpec(resize=(256,), crop=(224,), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    src = make_source(DataSpec(kind="folder", path=str(ROOT / "datasets" / "photos_crops"), limit=16, seed=0),
                      pre, "input", 16)
    x = np.concatenate([b["input"] for b in src])
    runs = _amax_per_batching(model, x, (1, 4, 8), ("entropy",) + STABLE)
    ref = runs["batch 1"]
    for label, amax in runs.items():
        for algo in STABLE:
            assert amax[algo] == ref[algo], (label, algo)
    moved = [t for t in ref["entropy"] if runs["batch 8"]["entropy"][t] != ref["entropy"][t]]
    assert len(moved) > 10, moved


def test_cli_writes_entropy_stable_beside_entropy_under_the_entropy2_header(tiny_model, tiny_data, tmp_path):
    r = CliRunner().invoke(main, ["--quiet", "calibrate", str(tiny_model), "--data", str(tiny_data),
                                  "--algo", "entropy,entropy-stable", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    for algo in ("entropy", "entropy-stable"):
        c = read_cache(tmp_path / "c" / f"{algo}.cache")
        assert c.header == "TRT-8600-EntropyCalibration2"
        side = json.loads((tmp_path / "c" / f"{algo}.json").read_text())
        assert side["algorithm"] == algo
    assert "grid" not in json.loads((tmp_path / "c" / "entropy-stable.json").read_text())["params"]


def test_recipe_reports_entropy_stable_as_another_candidate(tmp_path, tiny_model):
    from nets import image_folder

    image_folder(tmp_path / "imgs", [(10, 12)] * 6)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""
name: tiny
model: {tiny_model.name}
calibration_data: {{kind: folder, path: imgs}}
preprocess: {{resize: [8, 8], mode: exact}}
calibration: {{algorithms: [minmax, entropy, entropy-stable], batch_size: 4}}
evaluation: {{task: classification, batch_size: 4}}
output: out
""")
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    assert read_cache(out / "entropy-stable.cache").header == "TRT-8600-EntropyCalibration2"
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["evaluation"]["configs"]) == {"minmax", "entropy", "entropy-stable"}
    assert "entropy-stable" in (out / "report.md").read_text()
