"""Capture in ONNX Runtime's blocked layout: the same values as the plain capture, without the reorders."""
import platform

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import _save, golden

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _blocky(path):
    """Convs with 32 and 24 channels (24: padded blocks, must stay plain), Relu, Sigmoid, a squeeze-excite Mul
    with a [N,C,1,1] operand (broadcast: must stay plain), a residual Add, Clip(0,6), MaxPool, GAP, Gemm."""
    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    inits = [w("w1", 32, 3, 3, 3), w("w2", 32, 32, 3, 3), w("w3", 24, 32, 1, 1), w("w4", 32, 24, 1, 1),
             w("wg", 5, 32), numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [
        helper.make_node("Conv", ["input", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("GlobalAveragePool", ["s2"], ["g2"]),
        helper.make_node("Mul", ["s2", "g2"], ["se"]),
        helper.make_node("Add", ["se", "r1"], ["res"]),
        helper.make_node("Clip", ["res", "lo", "hi"], ["clip"]),
        helper.make_node("MaxPool", ["clip"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool", "w3"], ["c3"]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4"], ["c4"]),
        helper.make_node("GlobalAveragePool", ["c4"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wg"], ["logits"], transB=1),
    ]
    g = helper.make_graph(nodes, "blocky", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])], inits)
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def _same_stats(model, source, tensors):
    from calib.calibrate import collect

    _, fast, n1, fp1 = collect(model, source, blocked=True)
    _, slow, n2, fp2 = collect(model, source, blocked=False)
    assert (n1, fp1) == (n2, fp2) and set(fast.names()) == set(slow.names())
    for name in tensors:
        a, b = fast.histogram(name), slow.histogram(name)
        assert np.array_equal(a.counts, b.counts), name
        assert (a.width, a.absmax, a.min, a.max, a.count) == (b.width, b.absmax, b.min, b.max, b.count), name


def test_blocked_capture_returns_the_same_values_permuted(tmp_path):
    from calib.quantize.model import inspect_model
    from calib.runners.onnxruntime import OrtRunner

    model = _blocky(tmp_path / "blocky.onnx")
    acts = list(inspect_model(model).activations)
    x = {"input": np.random.default_rng(0).normal(0, 1, (4, 3, 16, 16)).astype(np.float32)}
    plain = OrtRunner(model, expose=acts).run(x)
    runner = OrtRunner(model, expose=acts, order_free=True)
    got = runner.run(x)
    assert set(got) == set(plain)
    for k in plain:
        assert got[k].shape == plain[k].shape, k
        assert np.array_equal(np.sort(got[k], axis=None), np.sort(plain[k], axis=None)), k
    if X86:  # ONNX Runtime's NCHWc layout exists on x86 only
        assert {"c1", "r1", "c2", "s2", "c4"} <= set(runner._rename)  # read before the reorders
        assert not {"se", "res", "clip", "c3", "r3"} & set(runner._rename)  # broadcast operand; 24 channels
        assert any(not np.array_equal(got[k], plain[k]) for k in runner._rename)  # really another order


def test_blocked_capture_gives_the_same_statistics(tmp_path):
    from calib.data.arrays import ArraySource
    from calib.quantize.model import inspect_model

    model = _blocky(tmp_path / "blocky.onnx")
    x = np.random.default_rng(1).normal(0, 1, (20, 3, 16, 16)).astype(np.float32)
    _same_stats(model, ArraySource(x, "input", batch_size=6), inspect_model(model).activations)


def test_blocked_capture_on_mobilenet_v2_photos():
    from calib.data.arrays import ArraySource
    from calib.quantize.model import inspect_model
    from calib.runners.onnxruntime import OrtRunner

    model = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")
    u8 = np.load(golden("mobilenet_v2", "photos_224.npy"))[:24]
    info = inspect_model(model)
    _same_stats(model, ArraySource(u8, "input", 8, "imagenet"), info.activations)
    if X86:
        assert len(OrtRunner(model, expose=info.activations, order_free=True)._rename) >= 80


def _files(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_capture_graph_is_kept_and_reused(tmp_path, monkeypatch):
    """The rewritten graph is made once per (model, exposure) and opened from $CALIB_HOME/ort afterwards: the same
    values, the same renames; a different exposure is another graph."""
    from calib.quantize.model import inspect_model
    from calib.runners import graph_cache
    from calib.runners.onnxruntime import OrtRunner

    monkeypatch.setenv("CALIB_HOME", str(tmp_path / "home"))
    model = _blocky(tmp_path / "blocky.onnx")
    info = inspect_model(model)
    acts = list(info.activations)
    x = {"input": np.random.default_rng(4).normal(0, 1, (3, 3, 16, 16)).astype(np.float32)}
    first = OrtRunner(model, expose=acts, order_free=True, model_sha256=info.sha256)
    kept = _files(graph_cache.folder())
    assert len(kept) == 1 and kept[0].endswith(".onnx" if X86 else ".plain")
    def made_again(self, *args):
        raise AssertionError("the kept graph was made again")

    monkeypatch.setattr(OrtRunner, "_make_blocked", made_again)
    second = OrtRunner(model, expose=acts, order_free=True, model_sha256=info.sha256)
    assert second._rename == first._rename
    a, b = first.run(x), second.run(x)
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    monkeypatch.undo()
    monkeypatch.setenv("CALIB_HOME", str(tmp_path / "home"))
    OrtRunner(model, expose=acts[:5], order_free=True, model_sha256=info.sha256)
    assert len(_files(graph_cache.folder())) == 2


def test_unreadable_capture_graph_is_made_again(tmp_path, monkeypatch):
    from calib.quantize.model import inspect_model
    from calib.runners import graph_cache
    from calib.runners.onnxruntime import OrtRunner

    if not X86:
        return
    monkeypatch.setenv("CALIB_HOME", str(tmp_path / "home"))
    model = _blocky(tmp_path / "blocky.onnx")
    info = inspect_model(model)
    acts = list(info.activations)
    x = {"input": np.random.default_rng(5).normal(0, 1, (2, 3, 16, 16)).astype(np.float32)}
    want = OrtRunner(model, expose=acts, order_free=True, model_sha256=info.sha256).run(x)
    [kept] = list(graph_cache.folder().iterdir())
    kept.write_bytes(kept.read_bytes()[:1000])  # a torn copy
    got = OrtRunner(model, expose=acts, order_free=True, model_sha256=info.sha256).run(x)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    assert kept.stat().st_size > 1000  # stored whole again


def test_capture_graph_folder_keeps_the_most_recent(tmp_path, monkeypatch):
    import os

    from calib.runners import graph_cache

    monkeypatch.setenv("CALIB_HOME", str(tmp_path))
    monkeypatch.setattr(graph_cache, "MAX_FILES", 3)
    for i in range(5):
        graph_cache.store(f"k{i}", b"x" * 10)
        os.utime(graph_cache.folder() / f"k{i}.onnx", (1000 + i, 1000 + i))
    graph_cache.store("k5", None)
    assert _files(graph_cache.folder()) == ["k3.onnx", "k4.onnx", "k5.plain"]
    assert graph_cache.lookup("k5")[0] == "plain" and graph_cache.lookup("k0") is None
    assert graph_cache.key("a" * 64, ["x", "y"]) != graph_cache.key("a" * 64, ["x"])


def test_capture_graph_folder_that_cannot_be_written_only_costs_time(tmp_path, monkeypatch):
    from calib.quantize.model import inspect_model
    from calib.runners.onnxruntime import OrtRunner

    blocker = tmp_path / "home"
    blocker.write_text("a file where the folder would be")
    monkeypatch.setenv("CALIB_HOME", str(blocker))
    model = _blocky(tmp_path / "blocky.onnx")
    info = inspect_model(model)
    x = {"input": np.random.default_rng(6).normal(0, 1, (2, 3, 16, 16)).astype(np.float32)}
    want = OrtRunner(model, expose=list(info.activations)).run(x)
    got = OrtRunner(model, expose=list(info.activations), order_free=True, model_sha256=info.sha256).run(x)
    assert set(got) == set(want)
    assert all(np.array_equal(np.sort(got[k], axis=None), np.sort(want[k], axis=None)) for k in want)
    assert blocker.read_text() == "a file where the folder would be"
