"""The TensorRT backend against the stand-in (tests/standin): everything that needs no GPU. The stand-in follows
what real TensorRT 8.6 did on an H200 (the calibrator protocol, cache bytes, I/O APIs); its engines run the
model with ONNX Runtime, so outputs are real numbers. The same paths run on real TensorRT in tests/gpu."""
from __future__ import annotations

import json

import numpy as np
import pytest

from calib.calibrate import calibrate
from calib.data.arrays import ArraySource
from calib.errors import CacheError, CalibError, DataError
from calib.quantize.cache import parse_cache, read_cache, read_sidecar
from calib.runners.onnxruntime import OrtRunner
from calib.runners.tensorrt import compat
from calib.runners.tensorrt.builder import BuildSpec, build, parse_layer_precisions, write_engine
from calib.runners.tensorrt.calibrators import Rebatcher, cache_calibrator, make_calibrator
from calib.runners.tensorrt.runner import TrtRunner
from conftest import GOLDEN
from standin.tensorrt import Memory, make_trt

CNN = GOLDEN / "cnn" / "cnn.onnx"
SHAPE = {"input": ((3, 64, 64), np.float32)}


@pytest.fixture(scope="module")
def cnn_data():
    return np.load(GOLDEN / "cnn" / "cnn_calib.npy")


def _trt(version="8.6.0"):
    mem = Memory()
    return make_trt(version, mem), mem


def test_cache_version_and_flags():
    assert compat.cache_version(make_trt("8.6.0")) == "8600"
    assert compat.cache_version(make_trt("10.3.0")) == "100300"
    for v in ("8.6.0", "10.3.0", "11.4.0"):  # the header's digits back to the major version
        assert compat.cache_major(compat.cache_version(make_trt(v))) == int(v.split(".")[0])
    t86, t10 = make_trt("8.6.0"), make_trt("10.3.0")
    assert compat.network_flags(t86) == 1 << int(t86.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    assert compat.network_flags(t10) == 0
    assert compat.network_flags(t10, strongly_typed=True) == 1 << int(t10.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    with pytest.raises(CalibError, match="strongly typed"):
        compat.network_flags(t86, strongly_typed=True)


def test_tensorrt_11_refuses_implicit_int8_and_points_to_qdq(cnn_data):
    trt, mem = _trt("11.0.0")
    with pytest.raises(CalibError, match="Q/DQ"):
        make_calibrator("entropy2", ArraySource(cnn_data, "input", 8), SHAPE, 8, mem, None, "", trt)
    with pytest.raises(CalibError, match="Q/DQ"):
        build(CNN, BuildSpec(precisions=("int8",), batch_size=8), None, trt, mem)
    built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=8), None, trt, mem)  # no INT8: fine
    assert built.info["layer_summary"] == {"fp32": 9} and built.info["strongly_typed"]
    assert trt.builds[-1]["network"].flags == 0  # 11 types every network strongly: STRONGLY_TYPED is ignored


def test_tensorrt_11_types_every_network_strongly():
    """TensorRT 11 has no FP16 flag and no layer precisions: an FP32 model cannot be built in fp16 there, and
    weak typing or layer precisions are refused naming the version, before TensorRT is asked."""
    trt, mem = _trt("11.0.0")
    with pytest.raises(CalibError, match="fp16 precision cannot be honoured"):
        build(CNN, BuildSpec(precisions=("fp32", "fp16"), batch_size=8), None, trt, mem)
    with pytest.raises(CalibError, match="11.0.0 builds every network strongly typed"):
        build(CNN, BuildSpec(precisions=("fp32",), batch_size=8, strongly_typed=False), None, trt, mem)
    with pytest.raises(CalibError, match="layer precisions need a weakly typed build"):
        build(CNN, BuildSpec(precisions=("fp32",), batch_size=8, layer_precisions=("op:Gemm=fp32",)), None, trt, mem)
    with pytest.raises(CalibError, match="11.0.0 builds every network strongly typed.*precision constraints cannot"):
        compat.constraint_flag(trt, "obey")
    with pytest.raises(CalibError, match="has no tactic source 'CUBLAS'.*EDGE_MASK_CONVOLUTIONS"):
        build(CNN, BuildSpec(precisions=("fp32",), batch_size=8, tactic_sources=("CUBLAS",)), None, trt, mem)
    assert trt.builds == []


def test_rebatcher_keeps_every_sample_in_order_and_pads_the_last():
    x = np.arange(13 * 2, dtype=np.float32).reshape(13, 2)
    src = [{"in": x[i:i + 5]} for i in range(0, 13, 5)]  # 5, 5, 3
    rb = Rebatcher(src, {"in": ((2,), np.float32)}, 4)
    got = list(rb)
    assert [b["in"].shape for b in got] == [(4, 2)] * 4
    flat = np.concatenate([b["in"] for b in got])
    np.testing.assert_array_equal(flat[:13], x)
    np.testing.assert_array_equal(flat[13:], x[12:13].repeat(3, 0))  # padded with copies of its own samples
    assert (rb.samples, rb.padded) == (13, 3)
    with pytest.raises(DataError, match="sample shape"):
        list(Rebatcher([{"in": np.zeros((2, 3), np.float32)}], {"in": ((2,), np.float32)}, 4))


def test_minmax_calibrator_feeds_the_real_data(cnn_data, tmp_path):
    """The stand-in's MinMax reads the batches back from device memory; its scales match real TensorRT MinMax's
    golden cache only if every sample reached the device intact."""
    trt, mem = _trt()
    cache = tmp_path / "trt-minmax.cache"
    c = make_calibrator("minmax", ArraySource(cnn_data, "input", 5), SHAPE, 8, mem, cache, "sha-of-model", trt)
    build(CNN, BuildSpec(precisions=("int8",), batch_size=8), c, trt, mem)
    assert c.calls == 8 and c.written == cache
    ours, gold = read_cache(cache), read_cache(GOLDEN / "cnn" / "int8-minmax.cache")
    assert ours.carrier == "MinMaxCalibration"
    for name in ("input", "conv0", "conv1", "conv2", "logits"):
        assert ours.scales[name] == pytest.approx(gold.scales[name], rel=1e-5), name
    side = read_sidecar(cache)
    assert side["algorithm"] == "trt-minmax" and side["samples"] == 64 and side["model_sha256"] == "sha-of-model"
    assert mem.blocks == {}  # device buffers freed after the build

    # a second build with the same cache file: no calibration pass
    c2 = make_calibrator("minmax", ArraySource(cnn_data, "input", 8), SHAPE, 8, mem, cache, "sha-of-model", trt)
    build(CNN, BuildSpec(precisions=("int8",), batch_size=8), c2, trt, mem)
    assert c2.calls == 0 and c2.reused
    # another model's cache (hash differs) is not reused
    c3 = make_calibrator("minmax", ArraySource(cnn_data, "input", 8), SHAPE, 8, mem, cache, "other", trt)
    build(CNN, BuildSpec(precisions=("int8",), batch_size=8), c3, trt, mem)
    assert c3.calls == 8 and not c3.reused


def test_cache_fed_calibrator_is_read_without_batches(tmp_path, cnn_data):
    res = calibrate(CNN, cnn_data, ["percentile"], batch_size=8)
    trt, mem = _trt()
    fed = cache_calibrator(res.amax["percentile"], trt)  # percentile scales under TensorRT's Entropy2 header
    assert fed.read_calibration_cache().startswith(b"TRT-8600-EntropyCalibration2\n")
    build(CNN, BuildSpec(precisions=("int8",), batch_size=8), fed, trt, mem)
    assert fed.calls == 0
    relabelled = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-minmax.cache"), trt, "EntropyCalibration2")
    build(CNN, BuildSpec(precisions=("int8",), batch_size=8), relabelled, trt, mem)
    assert relabelled.calls == 0
    text = relabelled.read_calibration_cache().decode()
    assert parse_cache(text).scales == read_cache(GOLDEN / "cnn" / "int8-minmax.cache").scales  # bits kept


def test_a_cache_under_the_wrong_header_is_an_error_not_a_silent_recalibration():
    trt, mem = _trt()
    fed = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-minmax.cache"), trt, "EntropyCalibration2")
    fed.text = read_cache(GOLDEN / "cnn" / "int8-minmax.cache").text()  # MinMax header on an Entropy2 class
    with pytest.raises(CacheError, match="ignored the calibration cache"):
        build(CNN, BuildSpec(precisions=("int8",), batch_size=8), fed, trt, mem)


def test_errors_inside_get_batch_are_raised_after_the_build(cnn_data):
    def broken():
        yield {"input": cnn_data[:8]}
        raise DataError("photo_17.jpg: truncated file")

    class Source:
        def __iter__(self):
            return broken()

    trt, mem = _trt()
    c = make_calibrator("entropy2", Source(), SHAPE, 8, mem, None, "", trt)
    with pytest.raises(DataError, match="photo_17.jpg"):
        build(CNN, BuildSpec(precisions=("int8",), batch_size=8), c, trt, mem)


@pytest.mark.parametrize("version", ["8.6.0", "8.4.0", "10.3.0"])
def test_runner_matches_onnxruntime_on_every_io_api(version, cnn_data):
    trt, mem = _trt(version)
    built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=8), None, trt, mem)
    r = TrtRunner(built.plan, trt, mem)
    assert r.execute.v3 == (version != "8.4.0")
    ref = OrtRunner(CNN).run({"input": cnn_data[:5]})["logits"]
    got = r.run({"input": cnn_data[:5]})["logits"]  # short batch: padded to the engine's 8, cut back
    assert got.shape == (5, 10)
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    with pytest.raises(DataError, match="engine takes"):
        r.run({"input": cnn_data[:9]})
    with pytest.raises(DataError, match="lacks engine input"):
        r.run({"x": cnn_data[:2]})
    lat = r.latency({"input": cnn_data[:8]}, warmup=2, iters=3, repeats=4)
    assert lat["batch"] == 8 and lat["runs"] == 12 and lat["median_ms"] > 0
    r.close()
    assert mem.blocks == {}


def test_latency_through_a_cuda_graph_launches_it_and_frees_it(cnn_data):
    trt, mem = _trt()
    built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=8), None, trt, mem)
    r = TrtRunner(built.plan, trt, mem)
    lat = r.latency({"input": cnn_data[:8]}, warmup=2, iters=3, repeats=4, cuda_graph=True)
    assert lat["cuda_graph"] and lat["runs"] == 12
    assert mem.launches == 2 + 12 and mem.graphs == 0  # every run one launch; the graph destroyed after
    got = r.run({"input": cnn_data[:5]})["logits"]  # the runner still runs plainly afterwards
    np.testing.assert_allclose(got, OrtRunner(CNN).run({"input": cnn_data[:5]})["logits"], rtol=1e-6)
    r.close()


def test_engines_timed_alternately_share_a_drift(tmp_path, cnn_data):
    """Each timed group reads a clock that rises by 1 ms per group (a GPU slowing down). Timed in turns, the
    engines' k-th groups sit side by side (A 1, 3, 5; B 2, 4, 6); one after the other, A would get 1-3 and B 4-6."""
    from calib.deploy.engine_file import alternate_engines

    trt, mem = _trt()
    paths = []
    for name in ("a", "b"):
        built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=8), None, trt, mem)
        paths.append(write_engine(tmp_path / f"{name}.engine", built, {}))
    clock = iter(range(1, 100))
    mem.elapsed_ms = lambda start, end: float(next(clock))
    a, b = alternate_engines(paths, {"input": (8, 3, 64, 64)}, warmup=1, iters=1, repeats=3, trt=trt, cuda=mem)
    assert (a["median_ms"], a["min_ms"], a["max_ms"]) == (3.0, 1.0, 5.0)
    assert (b["median_ms"], b["min_ms"], b["max_ms"]) == (4.0, 2.0, 6.0)
    assert a["alternated"] and a["batch"] == 8 and b["engine"] == str(paths[1])
    assert mem.blocks == {}  # both runners closed
    with pytest.raises(CalibError, match="outside optimization profile"):
        alternate_engines(paths, {"input": (9, 3, 64, 64)}, warmup=1, iters=1, repeats=1, trt=trt, cuda=mem)


def test_layer_precisions_by_op_type_name_and_regex(cnn_data):
    trt, mem = _trt()
    fed = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-minmax.cache"), trt, "EntropyCalibration2")
    spec = BuildSpec(precisions=("int8",), batch_size=8, layer_precisions=("op:Gemm=fp32", "re:_conv\\d$=fp16"))
    built = build(CNN, spec, fed, trt, mem)
    kinds = {layer["name"]: layer["precision"] for layer in built.layers}
    assert kinds["node_of_logits"] == "fp32"  # the CNN's nodes are unnamed: TensorRT names them after their output
    assert {p for n, p in kinds.items() if n.startswith("node_of_conv")} == {"fp16"}
    assert "fp16" in built.info["precisions"]  # fp16 layers turn the FP16 flag on
    assert trt.BuilderFlag.PREFER_PRECISION_CONSTRAINTS in trt.builds[-1]["config"].flags
    with pytest.raises(CalibError, match="matches no layer"):
        build(CNN, BuildSpec(precisions=("int8",), batch_size=8, layer_precisions=("nosuch=fp16",)), fed, trt, mem)
    with pytest.raises(CalibError, match="PATTERN=PRECISION"):
        parse_layer_precisions(["op:Gemm"])
    with pytest.raises(CalibError, match="not one of"):
        parse_layer_precisions(["op:Gemm=int4"])


def test_a_dynamic_engine_reads_its_precisions_from_its_kernels():
    """TensorRT 8.6 lists every tensor of an engine with a shape range as 'N/A due to dynamic shapes', through an
    execution context too (an H100). Read as FP32, the YOLOv8n engines of `calib run` (batch 1-8) had said 'no
    layer in INT8', where the same model at batch 4-4 listed 94 INT8 layers. Here the CNN is built for batch 1-8
    and for batch 8-8: the layers with a kernel name read the precision the fixed engine's formats give, the others
    read '?', none reads FP32, and which tensors are stored in INT8 stays unknown."""
    from calib.runners.tensorrt.builder import engine_layers
    from calib.runners.tensorrt.inspect import inspector_layers

    trt, mem = _trt()
    fed = lambda: cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-minmax.cache"), trt, "EntropyCalibration2")
    one_to_8 = {"input": ((1, 3, 64, 64), (8, 3, 64, 64), (8, 3, 64, 64))}
    ranged = build(CNN, BuildSpec(precisions=("int8",), profiles=(one_to_8,)), fed(), trt, mem)
    fixed = build(CNN, BuildSpec(precisions=("int8",), batch_size=8), fed(), trt, mem)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(ranged.plan)
    assert min(compat.engine_shape(engine, "input")) < 0  # a dynamic engine
    truth = {la["name"]: la["precision"] for la in fixed.layers}
    assert "?" not in truth.values() and all("int8_outputs" in la for la in fixed.layers)
    read = {la["name"]: la["precision"] for la in ranged.layers}
    kernels = {la["name"] for la in ranged.layers if la["tactic"]}
    assert kernels and {n: read[n] for n in kernels} == {n: truth[n] for n in kernels}
    assert {read[n] for n in read if n not in kernels} == {"?"}  # a ReLU or Flatten: no kernel name, no format
    assert ranged.info["layer_summary"]["int8"] == len(kernels)
    assert not any("int8_outputs" in la for la in ranged.layers)
    assert engine_layers(trt, ranged.plan) == ranged.layers
    ctx = engine.create_execution_context()  # a runner's context, its shape set, changes nothing on TensorRT 8.6
    compat.set_input_shape(ctx, engine, "input", (2, 3, 64, 64))
    assert inspector_layers(engine, trt, ctx) == ranged.layers


def test_a_layer_kept_in_float_reads_float():
    """TensorRT 8.6 lets an INT8 layer write INT8 into a layer pinned to float, which then computes on quantized
    values (on an H100: 0.7 dB where the simulation of that layer in float said 49): the writer of every input of a
    float layer gets that layer's precision as its output type; the stand-in writes INT8 the same way."""
    trt, mem = _trt()
    fed = cache_calibrator(read_cache(GOLDEN / "cnn" / "int8-minmax.cache"), trt, "EntropyCalibration2")
    rules = ("op:Conv=int8", "node_of_conv1=fp16", "op:Gemm=fp32")
    built = build(CNN, BuildSpec(precisions=("int8", "fp16"), batch_size=8, layer_precisions=rules), fed, trt, mem)
    net = trt.builds[-1]["network"]
    types = {layer.name: dict(layer._output_types) for layer in net.layers}
    assert types["node_of_relu0"] == {0: trt.float16}  # conv1 (fp16) reads relu0
    assert types["node_of_flat"] == {0: trt.float32}  # the Gemm (fp32) reads flat
    assert types["node_of_conv0"] == types["node_of_conv2"] == {}  # their readers are free
    assert not any(t for name, t in types.items() if name.startswith("node_of_relu") and name != "node_of_relu0")
    assert {layer["name"]: layer["precision"] for layer in built.layers}["node_of_conv1"] == "fp16"


def test_qdq_model_builds_explicitly(tmp_path, cnn_data):
    from calib.quantize.qdq import insert_qdq
    import onnx

    res = calibrate(CNN, cnn_data, ["minmax"], batch_size=8)
    q = tmp_path / "cnn.qdq.onnx"
    onnx.save(insert_qdq(onnx.load(str(CNN)), res.amax["minmax"]), str(q))
    for version in ("8.6.0", "10.3.0", "11.0.0"):
        trt, mem = _trt(version)
        built = build(q, BuildSpec(precisions=("int8",), batch_size=8), None, trt, mem)
        assert built.info["explicit_qdq"]
        cfg = trt.builds[-1]["config"]
        net = trt.builds[-1]["network"]
        typed = bool(net.flags & (1 << int(getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", 31))))
        assert built.info["strongly_typed"] == (version == "11.0.0") and not typed  # 11 ignores the flag
        if version == "11.0.0":  # the types come from the Q/DQ nodes and the model; 11 has no INT8 flag
            assert cfg.flags == set() and not hasattr(trt.BuilderFlag, "INT8")
        else:
            assert trt.BuilderFlag.INT8 in cfg.flags and cfg.int8_calibrator is None


def test_fp16_in_a_strongly_typed_build_is_honoured_or_refused(tmp_path, cnn_data):
    from calib.quantize.qdq import insert_qdq
    import onnx

    res = calibrate(CNN, cnn_data, ["minmax"], batch_size=8)
    q = tmp_path / "cnn.qdq.onnx"
    onnx.save(insert_qdq(onnx.load(str(CNN)), res.amax["minmax"]), str(q))
    trt, mem = _trt("10.3.0")
    built = build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=8), None, trt, mem)
    assert trt.BuilderFlag.FP16 in trt.builds[-1]["config"].flags and not built.info["strongly_typed"]
    assert built.info["precisions"] == ["int8", "fp16"]
    with pytest.raises(CalibError, match="fp16 precision cannot be honoured"):
        build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=8, strongly_typed=True), None, trt, mem)
    trt11, mem11 = _trt("11.0.0")
    with pytest.raises(CalibError, match="FP32 here"):
        build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=8), None, trt11, mem11)
    trt86, mem86 = _trt("8.6.0")
    with pytest.raises(CalibError, match="no strongly typed networks"):
        build(q, BuildSpec(precisions=("int8",), batch_size=8, strongly_typed=True), None, trt86, mem86)


def test_a_model_with_fp16_layers_is_built_in_its_types(tmp_path, cnn_data):
    """The FP16+INT8 model may keep FP32 inputs and some FP32 layers: its FP16 tensors (a Cast to FP16, an FP16
    weight or constant) make it a model whose float layers a strongly typed build runs in FP16, so fp16 is
    honoured there (TensorRT 11, and 10 when asked), with no precision flag set; a model with none is refused."""
    import onnx
    from onnx import TensorProto, helper

    from calib.quantize.qdq import insert_qdq
    from calib.runners.tensorrt.builder import float_type

    res = calibrate(CNN, cnn_data, ["minmax"], batch_size=8)
    m = insert_qdq(onnx.load(str(CNN)), res.amax["minmax"])
    assert float_type(m) == "fp32"
    first = m.graph.input[0].name
    for node in m.graph.node:
        node.input[:] = ["input_back" if i == first else i for i in node.input]
    m.graph.node.insert(0, helper.make_node("Cast", [first], ["input_half"], name="half", to=TensorProto.FLOAT16))
    m.graph.node.insert(1, helper.make_node("Cast", ["input_half"], ["input_back"], name="back",
                                            to=TensorProto.FLOAT))
    assert float_type(m) == "fp16"
    q = tmp_path / "cnn.fp16.qdq.onnx"
    onnx.save(m, str(q))
    for version, typed in (("11.0.0", None), ("10.3.0", True)):
        trt, mem = _trt(version)
        built = build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=8, strongly_typed=typed), None, trt, mem)
        assert built.info["strongly_typed"] and built.info["explicit_qdq"], version
        assert not {getattr(trt.BuilderFlag, f, None) for f in ("FP16", "INT8")} & trt.builds[-1]["config"].flags
    weight = helper.make_tensor("w", TensorProto.FLOAT16, [1], [1.0])
    const = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT16, [1], [1.0]))
    for nodes, inits in (([], [weight]), ([const], [])):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], inits)
        assert float_type(helper.make_model(g)) == "fp16"
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1])])
    assert float_type(helper.make_model(g)) == "fp32"  # a Cast, but not to FP16


def test_engine_written_atomically_with_its_sidecar(tmp_path):
    trt, mem = _trt()
    built = build(CNN, BuildSpec(precisions=("fp32", "fp16"), batch_size=4, timing_cache=str(tmp_path / "t.cache")),
                  None, trt, mem)
    out = write_engine(tmp_path / "cnn.engine", built, {"cache": None})
    side = json.loads((tmp_path / "cnn.engine.json").read_text())
    assert out.read_bytes() == built.plan
    assert side["tensorrt"] == "8.6.0" and side["gpu"].startswith("stand-in GPU")
    assert side["precisions"] == ["fp32", "fp16"] and side["input_shapes"] == {"input": [4, 3, 64, 64]}
    assert side["engine_bytes"] == len(built.plan) and len(side["layers"]) == 9
    assert (tmp_path / "t.cache").read_bytes() == b"timing"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.engine", "cnn.engine.json", "t.cache"]
    (tmp_path / "adir").mkdir()
    with pytest.raises(CalibError, match="not a folder"):
        write_engine(tmp_path / "adir", built)


def test_missing_tensorrt_is_one_line_naming_the_extra():
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    with pytest.raises(CalibError, match=r"pip install 'tensorrt>=8.6' 'cuda-python>=12' \(the \[trt\] extra of calib-trt"):
        compat.load()


def test_a_timing_cache_tensorrt_cannot_read_back_is_dropped_not_rewritten(tmp_path, caplog):
    """TensorRT 8.6 fails to read a timing cache holding Myelin entries ("Myelin error from unknown graph") and
    then ignores it on every build: calib removes the file and builds on without reading or writing it."""
    from calib.runners.tensorrt import builder

    cache = tmp_path / "trt.timing"
    cache.write_bytes(b"MYELIN entries")
    trt = make_trt("8.6.0", Memory())
    spec = BuildSpec(precisions=("fp32",), batch_size=2, timing_cache=str(cache))
    try:
        build(CNN, spec, None, trt, trt.memory)
        assert not cache.exists()
        assert "cannot read this timing cache back" in caplog.text
        build(CNN, spec, None, trt, trt.memory)  # not written again in this process
        assert not cache.exists()
        other = tmp_path / "other.timing"  # a readable cache is still read and written
        build(CNN, BuildSpec(precisions=("fp32",), batch_size=2, timing_cache=str(other)), None, trt, trt.memory)
        assert other.read_bytes() == b"timing"
    finally:
        builder.UNREADABLE_TIMING_CACHES.discard(str(cache))


@pytest.mark.parametrize("version", ["8.6.0", "10.3.0"])
def test_a_profiled_runner_times_its_later_runs_without_the_profiler(version, cnn_data):
    """TensorRT 8.6 refuses `context.profiler = None` (and keeps the profiler): after profile_layers the context's
    enqueue must no longer report to it, or every later latency would carry the per-layer profiling."""
    from calib.runners.tensorrt.profile import profile_layers

    trt, mem = _trt(version)
    built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=8), None, trt, mem)
    r = TrtRunner(built.plan, trt, mem)
    try:
        prof = profile_layers(r, {"input": cnn_data[:8]}, runs=3, warmup=1)
        assert prof["runs"] == 3 and prof["layers"]
        attached = r.context._profiler
        assert attached is not None and r.context._refused_profilers == 0  # never handed a None that 8.6 refuses
        seen = {k: len(v) for k, v in attached.times.items()}
        r.run({"input": cnn_data[8:16]})
        r.latency({"input": cnn_data[:8]}, warmup=1, iters=2, repeats=2)
        assert {k: len(v) for k, v in attached.times.items()} == seen  # later runs report nothing
    finally:
        r.close()


def test_calibs_fp16_int8_model_is_refused_on_86_and_built_strongly_typed_from_10(tmp_path, cnn_data):
    """TensorRT 8.6's parser reads Q/DQ scales as FP32 (an FP16 scale failed on an H100 with "Scale coefficients
    must all be positive"): calib build says so before the parser, naming the model to build there instead."""
    import onnx

    from calib.quantize.fp16_model import make_fp16_model

    res = calibrate(CNN, cnn_data, ["minmax"], batch_size=8)
    q = tmp_path / "cnn.minmax.fp16.qdq.onnx"
    onnx.save(make_fp16_model(onnx.load(str(CNN)), res.amax["minmax"]).model, str(q))
    trt86, mem86 = _trt("8.6.0")
    with pytest.raises(CalibError, match=r"FP16 Q/DQ scales .*8\.6\.0's parser takes FP32 scales only.*--to qdq"):
        build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=8), None, trt86, mem86)
    assert not trt86.builds  # refused before any build
    for version, typed in (("11.0.0", None), ("10.3.0", True)):
        trt, mem = _trt(version)
        built = build(q, BuildSpec(precisions=("int8", "fp16"), batch_size=8, strongly_typed=typed), None, trt, mem)
        assert built.info["strongly_typed"] and built.info["explicit_qdq"], version


@pytest.mark.parametrize("version", ["8.6.0", "10.3.0", "11.0.0"])
def test_fp32_engines_are_fp32_unless_tf32_is_asked_for(cnn_data, version):
    """TensorRT sets its TF32 flag in every new builder config (convolutions and matrix products in TF32, a 10-bit
    mantissa): calib clears it, so that an FP32 engine gives ONNX Runtime's FP32 numbers; BuildSpec(tf32=True) keeps
    TensorRT's default, and the stand-in's TF32 engine then differs from FP32 as a real one does."""
    trt, mem = _trt(version)
    x = cnn_data[:8]
    ref = OrtRunner(CNN).run({"input": x})
    out = {}
    for tf32 in (False, True):
        built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=8, tf32=tf32), None, trt, mem)
        assert (trt.BuilderFlag.TF32 in trt.builds[-1]["config"].flags) is tf32 and built.info["tf32"] is tf32
        r = TrtRunner(built.plan, trt, mem)
        try:
            out[tf32] = r.run({"input": x})
        finally:
            r.close()
    name = next(iter(ref))
    assert np.array_equal(out[False][name], ref[name])
    assert 0 < np.abs(out[True][name] - ref[name]).max() < 0.05 * np.abs(ref[name]).max()
