"""Cross-layer range equalization: exact in FP32, lifts small channels, respects Clip bounds, helps INT8."""
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.equalize import HEADROOM, MAX_GAIN, apply, channel_maxima, equalize, find_pairs, gains
from calib.quantize.qdq import insert_qdq
from calib.runners.onnxruntime import OrtRunner


def _chain(act="Relu", second_group=None, c=4, extra_reader=False, seed=0):
    """x[1,3,8,8] -> Conv(3->c, 3x3) -> act -> Conv2 -> y. Channel 0 of the first Conv is 200x smaller than the
    others, and the second Conv's weights for it are 200x larger (the MobileNetV2 stem pattern)."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.5, (c, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.1, c).astype(np.float32)
    w1[0] /= 200
    b1[0] = abs(b1[0]) / 200
    group = c if second_group is None else second_group
    cin_g = c // group
    w2 = rng.normal(0, 0.5, (c, cin_g, 3, 3)).astype(np.float32)
    if group == c:
        w2[0] *= 200
    else:
        w2[:, 0] *= 200
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    mid = "c1"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c1"], ["a1"], name="act"))
        mid = "a1"
    elif act == "LeakyPool":
        nodes.append(helper.make_node("LeakyRelu", ["c1"], ["l1"], name="act", alpha=0.1))
        nodes.append(helper.make_node("MaxPool", ["l1"], ["a1"], name="pool", kernel_shape=[2, 2], strides=[1, 1],
                                      pads=[0, 0, 1, 1]))
        mid = "a1"
    elif act == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="act"))
        mid = "a1"
    nodes.append(helper.make_node("Conv", [mid, "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1], group=group))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", [mid], ["side"], name="side"))
        outs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 8, 8])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _data(n=3, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-1, 1, (4, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("act,group", [("Relu", None), ("Clip", None), (None, None), ("Relu", 1), ("Relu", 2),
                                       ("LeakyPool", 1)])
def test_equalized_model_computes_the_same(act, group):
    m = _chain(act, group)
    eq, done = equalize(m, _data())
    assert len(done) == 1 and done[0]["channels_scaled"] >= 1
    for feed in _data(2, seed=7):
        a, b = OrtRunner(m).run(feed)["y"], OrtRunner(eq).run(feed)["y"]
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())
    w1 = numpy_helper.to_array(next(t for t in eq.graph.initializer if t.name == "w1"))
    w1_old = numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "w1"))
    assert np.abs(w1[0]).max() > 10 * np.abs(w1_old[0]).max()  # the small channel was lifted


def test_gains_known_answer_and_clip_headroom():
    from calib.equalize import Pair

    dw = Pair("a", None, "b", "t", None, depthwise=True)
    np.testing.assert_allclose(gains(dw, np.array([4.0, 1.0, 0.5, 0.0])), [1, 4, 8, 1])  # dead channel untouched
    dense = Pair("a", None, "b", "t", None, depthwise=False)
    np.testing.assert_allclose(gains(dense, np.array([4.0, 1.0])), [1, 2])  # geometric compromise
    clip = Pair("a", "act", "b", "t", 6.0, depthwise=True)
    g = gains(clip, np.array([5.0, 0.5, 0.01]))
    assert np.all(g * np.array([5.0, 0.5, 0.01]) <= max(5.0, 6.0 / HEADROOM) + 1e-9)
    np.testing.assert_allclose(g, [1, 6.0 / HEADROOM / 0.5, min(MAX_GAIN, 6.0 / HEADROOM / 0.01)])


def test_no_pair_when_the_tensor_has_another_reader():
    assert find_pairs(_chain("Relu", extra_reader=True)) == []
    assert [p.first for p in find_pairs(_chain("Relu"))] == ["conv1"]


def test_equalization_improves_per_tensor_int8():
    m = _chain("Relu")
    data = _data(4)
    eq, _ = equalize(m, data)

    def int8_sqnr(model):
        expose = [n.output[0] for n in model.graph.node] + ["x"]
        run = OrtRunner(model, expose=expose)
        amax = {}
        for feed in data:
            for k, v in run.run(feed, outputs=expose).items():
                amax[k] = max(amax.get(k, 0.0), float(np.abs(v).max()))
        q = OrtRunner(insert_qdq(model, amax))
        ref = np.concatenate([OrtRunner(m).run(f)["y"] for f in data])
        got = np.concatenate([q.run(f)["y"] for f in data])
        return 10 * np.log10((ref ** 2).sum() / ((ref - got) ** 2).sum())

    before, after = int8_sqnr(m), int8_sqnr(eq)
    assert after > before + 6, (before, after)


def test_clip_bounds_hold_only_within_the_data_and_a_crossing_is_refused(tmp_path, monkeypatch):
    """The rewrite through Clip(0, 6) is exact for inputs within the measured range (with headroom), not beyond;
    equalize_file measures on the data it is given and refuses a model whose FP32 outputs moved."""
    import calib.equalize as eqmod
    from calib.equalize import equalize_file
    from calib.errors import ModelError

    m = _chain("Clip")
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    small = [{"x": (f["x"] * 0.01).astype(np.float32)} for f in _data(2)]
    pairs = find_pairs(m)
    eq, _ = apply(m, pairs, channel_maxima(m, pairs, small))
    big = {"x": np.full((1, 3, 8, 8), 50.0, np.float32)}
    a, b = OrtRunner(m).run(big)["y"], OrtRunner(eq).run(big)["y"]
    assert not np.allclose(a, b, rtol=1e-3)  # the rewrite is only exact within the data's range ...

    class Source:
        def __iter__(self):
            yield big  # ... and equalize_file checks the outputs on the data it was given
            yield from small

    out = tmp_path / "eq.onnx"
    done = equalize_file(p, Source(), out)  # maxima include the big batch: gains stay safe, exact again
    assert out.is_file() and done["fp32_max_rel_change"] < 1e-3
    out.unlink()
    monkeypatch.setattr(eqmod, "HEADROOM", 0.05)  # lets small channels rise 20x past the Clip on the data itself
    monkeypatch.setattr(eqmod, "MAX_GAIN", 1e6)
    loud = [{"x": (f["x"] * 5).astype(np.float32)} for f in _data(2)]  # the big channels run past 6
    with pytest.raises(ModelError, match="moved by"):
        equalize_file(p, loud, out)
    assert not out.exists()


def test_recipe_equalize_writes_the_model_and_reports_it(tmp_path, tiny_model):
    from PIL import Image

    from calib.cli import main

    rng = np.random.default_rng(0)
    (tmp_path / "imgs").mkdir()
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(tmp_path / "imgs" / f"{i}.png")
    r = tmp_path / "r.yaml"
    r.write_text(f"""
name: tiny
model: {tiny_model}
calibration_data: {{kind: folder, path: imgs}}
preprocess: {{resize: [8, 8], mode: exact}}
calibration: {{algorithms: [minmax, percentile], batch_size: 4, equalize: true}}
evaluation: {{task: classification, batch_size: 4}}
output: out
""")
    res = CliRunner().invoke(main, ["run", str(r), "--quiet"])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    eq = rep["equalization"]
    assert (tmp_path / "out" / eq["file"]).is_file() and eq["file"] in rep["files"]
    assert eq["pairs"] >= 0 and eq["fp32_max_rel_change"] < 1e-3
    side = json.loads((tmp_path / "out" / "minmax.json").read_text())
    import hashlib

    assert side["model_sha256"] == hashlib.sha256((tmp_path / "out" / eq["file"]).read_bytes()).hexdigest()


def test_calibrate_cli_equalize(tmp_path):
    from calib.cli import main

    onnx.save(_chain("Relu"), str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", np.concatenate([f["x"] for f in _data(2)]))
    r = CliRunner().invoke(main, ["calibrate", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "x.npy"),
                                  "--algo", "minmax", "--batch-size", "4", "--equalize", "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    eq = tmp_path / "c" / "m.equalized.onnx"
    assert eq.is_file() and "1 of 1 Conv pairs equalized" in r.output
    import hashlib

    side = json.loads((tmp_path / "c" / "minmax.json").read_text())
    assert side["model_sha256"] == hashlib.sha256(eq.read_bytes()).hexdigest()
    import calib

    assert calib.equalize_model.__name__ == "equalize_file"
