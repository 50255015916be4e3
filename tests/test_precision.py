"""The precision model against real TensorRT 8.6 engines (H200): the rules' prediction per ONNX node, scored on
each engine's inspector output (benchmarks/trt86-h200, the golden), and the simulation it drives."""
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from calib.deploy import precision as P
from calib.deploy.simulate import simulated_model
from calib.errors import CalibError
from calib.quantize.cache import read_cache
from calib.quantize.qdq import Exclusions, count_qdq, insert_qdq, quantizable_layers
from calib.runners.onnxruntime import OrtRunner
from conftest import ROOT, golden

TRT = ROOT / "benchmarks" / "trt86-h200"
TAIL = ["/GlobalAveragePool", "/classifier/classifier.1/Gemm", "/features/features.17/conv/conv.2/Conv",
        "/features/features.18/features.18.0/Conv", "/features/features.18/features.18.2/Clip"]

# (layers file, key, build mode, nodes the rules miss): every MobileNetV2 engine built without layer precisions
MBV2_ENGINES = [
    ("mbv2-layers.json", "int8-tensorrt-entropy2", "implicit", []),
    ("mbv2-layers.json", "int8-percentile", "implicit", []),
    ("mbv2-table2-layers.json", "int8-minmax", "implicit", []),
    ("mbv2-table2-layers.json", "int8-entropy", "implicit", []),
    ("mbv2-table2-layers.json", "int8-mse", "implicit", []),
    ("mbv2eq-layers.json", "int8-percentile", "implicit", []),
    ("mbv2eq-layers.json", "int8-mse", "implicit", []),
    ("qdq/layers.json", "implicit", "implicit", TAIL),  # this build timed its 7x7 tail faster in FP16
    ("qdq/layers.json", "calib-qdq", "explicit", []),
    ("qdq/layers.json", "calib-qdq-int8w", "explicit", []),
]


@pytest.fixture(scope="module")
def mbv2():
    return onnx.load(str(golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")), load_external_data=False)


@pytest.fixture(scope="module")
def yolo():
    from calib.zoo import fetch

    return onnx.load(str(fetch("yolov3-tiny")), load_external_data=False)


def _rules(model, mode):
    return P.implicit_rules(model) if mode == "implicit" else P.explicit_rules(model)


@pytest.mark.parametrize("file,key,mode,misses", MBV2_ENGINES)
def test_rules_hit_rate_on_each_mobilenet_v2_engine(mbv2, file, key, mode, misses):
    actual = P.from_inspector(json.loads((TRT / file).read_text())[key], mbv2, mode)
    h = P.hit_rate(_rules(mbv2, mode), actual)
    assert h["nodes"] == 99 and h["misses"] == sorted(misses)
    assert h["int8_vs_float"] == h["exact"] == 99 - len(misses)
    q = P.hit_rate(_rules(mbv2, mode), actual, quantizable_layers(mbv2))
    assert q["nodes"] == 64 and q["int8_vs_float"] == 64 - len([m for m in misses if "Clip" not in m])
    assert h["fusions"] == h["int8_layers"] == (54 if not misses else 50)  # every Conv+Clip, Conv+Add fused as TRT did


def test_rules_hit_rate_on_the_yolov3_tiny_engine(yolo):
    side = json.loads((TRT / "yolo" / "yolov3-tiny.mse.engine.json").read_text())
    actual = P.from_inspector(side["layers"], yolo)
    h = P.hit_rate(P.implicit_rules(yolo), actual)
    assert (h["nodes"], h["int8_vs_float"], h["exact"], h["misses"]) == (54, 54, 54, [])
    assert h["fusions"] == h["int8_layers"] == 22  # incl. layer0's LeakyRelu, a layer of its own
    assert actual.nodes["layer20_route"] == "int8"  # removed by TensorRT: its inputs copied in INT8
    fp32 = sorted(n for n, p in actual.nodes.items() if p == "fp32")
    assert len(fp32) == 22 and all(n.startswith(("yolo0_", "yolo1_")) for n in fp32)  # the decoding, in FP32
    assert all(actual.nodes[n] == "int8" for n in quantizable_layers(yolo) if n in actual.nodes)


PPLCNET = ROOT / "benchmarks" / "trt86-h100" / "qdq-l3-pplcnet-b1"  # H100, level 3, batch 1, calib's entropy cache


@pytest.fixture(scope="module")
def pplcnet():
    from calib.io.files import sha256_file
    from calib.zoo import fetch

    path = fetch("pplcnet-orientation")
    side = json.loads((PPLCNET / "implicit.engine.json").read_text())
    assert sha256_file(path) == side["model_sha256"]  # the file the engine was built from
    return path, side


def test_rules_hit_rate_on_the_pplcnet_engine(pplcnet):
    """PP-LCNet's H100 engine: HardSwish left unfused behind its stem and depthwise Convs (an INT8 point-wise layer
    each, reading the Conv's output rounded), the squeeze-excitation's Relu, HardSigmoid * x and Identities in
    INT8 between the INT8 Convs, every 1x1 Conv fused with its bias Add or HardSwish."""
    path, side = pplcnet
    model = onnx.load(str(path))
    rules = P.implicit_rules(model)
    h = P.hit_rate(rules, P.from_inspector(side["layers"], model))
    assert (h["nodes"], h["int8_vs_float"], h["exact"], h["misses"]) == (108, 108, 108, [])
    assert h["fusions"] == h["int8_layers"] == 60 and h["fusion_misses"] == []
    assert {("Conv.0", "BatchNormalization.0"), ("HardSwish.0",), ("Conv.1", "BatchNormalization.1"),
            ("Conv.2", "BatchNormalization.2", "HardSwish.2"), ("Conv.24", "Add.0"), ("Identity.1",), ("Relu.0",),
            ("HardSigmoid.0", "Mul.0")} <= set(rules.layers)
    assert rules.nodes["Softmax.0"] == rules.nodes["Identity.10"] == "fp32"  # the float tail reaches no INT8 layer


Y8_H100 = ROOT / "benchmarks" / "trt86-h100"


@pytest.mark.parametrize("layers,int8_vs_float,fusions", [
    ("qdq-l3/yolov8n-l3-b4/layers.json", 228, 76), ("qdq-l3-yolov8n-b1/yolov8n-l3-b1/layers.json", 222, 74)])
def test_rules_hit_rate_on_the_yolov8n_engines(layers, int8_vs_float, fusions):
    """YOLOv8n-320's implicit engines on an H100 (level 3): each Conv + SiLU (x * sigmoid(x)) one INT8 layer, and in
    a bottleneck the Conv alone with its SiLU and the residual Add an INT8 point-wise layer beside it (the rules
    had 130 and 124 of the 239 nodes right, int8 or float, and 21 of the INT8 layers). The misses left are
    TensorRT's choices by timing: one bottleneck in FP16, the detection head's Concats in INT8, its DFL Conv in
    FP32."""
    from calib.zoo import fetch

    model = onnx.load(str(fetch("yolov8n-320")), load_external_data=False)
    rules = P.implicit_rules(model)
    h = P.hit_rate(rules, P.from_inspector(json.loads((Y8_H100 / layers).read_text())["implicit"], model))
    assert h["nodes"] == 239 and (h["int8_vs_float"], h["fusions"]) == (int8_vs_float, fusions), h["misses"]
    assert ("/model.0/conv/Conv", "/model.0/act/Sigmoid", "/model.0/act/Mul") in rules.layers
    assert ("/model.4/m.0/cv2/conv/Conv",) in rules.layers
    assert ("/model.4/m.0/cv2/act/Sigmoid", "/model.4/m.0/cv2/act/Mul", "/model.4/m.0/Add") in rules.layers


def test_implicit_simulation_of_pplcnet_is_its_h100_engine(pplcnet):
    """Known answer from the real engine: 9.40 dB and 0.684 top-1 agreement against FP32 on the 256 golden photos.
    The rules' simulation gives 9.35 dB (it gave 11.41 with HardSwish fused everywhere and the squeeze-excitation
    in float)."""
    path, side = pplcnet
    table = json.loads((PPLCNET / "table.json").read_text())["engines"]["implicit"]
    model = onnx.load(str(path))
    amax = read_cache(PPLCNET / "entropy.cache").amaxes()
    u8 = np.load(golden("mobilenet_v2", "photos_224.npy"))
    x = (u8.astype(np.float32) / np.float32(255) - np.array([0.485, 0.456, 0.406], np.float32)) \
        / np.array([0.229, 0.224, 0.225], np.float32)
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    runs = {}
    for name, m in (("fp32", model), ("int8", simulated_model(model, amax, P.implicit_rules(model)))):
        r = OrtRunner(m)
        runs[name] = np.concatenate([r.run({"x": x[i:i + 32]})["fetch_name_0"] for i in range(0, len(x), 32)])
    ref, q = runs["fp32"].astype(np.float64), runs["int8"].astype(np.float64)
    sqnr = 10 * np.log10((ref ** 2).sum() / ((ref - q) ** 2).sum())
    top1 = float((ref.argmax(1) == q.argmax(1)).mean())
    assert table["logits_sqnr_db"] == 9.4 and abs(sqnr - table["logits_sqnr_db"]) < 0.1, sqnr
    assert abs(top1 - table["top1_agreement"]) <= 5 / 256, top1  # 175 of 256 on the engine, 171 here


def test_widened_fallback_is_what_the_rules_do_not_predict(mbv2):
    """Asked to keep 16 layers in FP16, TensorRT ran 38 of the 64 quantizable ones in float: only the inspector
    knows that (the reason an existing engine's inspector wins over the rules)."""
    actual = P.from_inspector(json.loads((TRT / "mbv2-fallback-layers.json").read_text())["int8-pt+k16"], mbv2)
    assert len(actual.float_nodes(quantizable_layers(mbv2))) == 38


def test_implicit_simulation_equals_the_qdq_placement_where_the_engine_does(mbv2):
    amax = read_cache(golden("mobilenet_v2", "minmax.cache")).amaxes()
    full = onnx.load(str(golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")))
    a, b = insert_qdq(full, amax), simulated_model(full, amax, P.implicit_rules(mbv2))
    assert count_qdq(a) == count_qdq(b) == 108
    x = np.random.default_rng(0).normal(0, 1, (2, 3, 224, 224)).astype(np.float32)
    assert np.array_equal(OrtRunner(a).run({"input": x})["logits"], OrtRunner(b).run({"input": x})["logits"])


def _scales(m):
    """Quantized activation -> the amax it is rounded with (per-channel weight scales left out)."""
    inits = {t.name: t for t in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        scale = onnx.numpy_helper.to_array(inits[n.input[1]]) if n.op_type == "QuantizeLinear" else None
        if scale is not None and scale.ndim == 0:
            out.setdefault(n.input[0], []).append(round(float(scale) * 127, 4))
    return out


def test_implicit_simulation_rounds_where_the_yolo_engine_does(yolo):
    amax = {t: 4.0 for n in yolo.graph.node for t in n.output}
    amax.update({yolo.graph.input[0].name: 1.0, "layer8_convolutional_leaky": 2.0, "layer18_convolutional_leaky": 6.0})
    placement = _scales(insert_qdq(yolo, amax))
    engine = _scales(simulated_model(yolo, amax, P.implicit_rules(yolo)))
    # layer0's Conv writes INT8 before its LeakyRelu, a separate INT8 layer: its output is rounded too, in the engine
    # and (the stem rule, the default) in the Q/DQ model; the placement without the rule leaves it float
    assert set(engine) == set(placement)
    plain = _scales(insert_qdq(yolo, amax, stem_output=False))
    assert set(engine) - set(plain) == {"layer0_convolutional"} and not set(plain) - set(engine)
    # layer8's output feeds MaxPool and the Concat: the Q/DQ model rounds it once with the Concat's scale (6, the
    # upsampled layer18's), the engine with its own (2) and then again with the Concat's as it copies it in
    assert placement["layer8_convolutional_leaky"] == [6.0] and engine["layer8_convolutional_leaky"] == [2.0]
    # the Concat output: one scale with its inputs in the Q/DQ model (6), its own in the cache and so in the
    # implicit engine (4), as TensorRT's own cache keeps YOLOv3-tiny's route Concat
    assert placement["layer20_route"] == [6.0] and engine["layer20_route"] == [4.0]
    side = json.loads((TRT / "yolo" / "yolov3-tiny.mse.engine.json").read_text())
    inspected = _scales(simulated_model(yolo, amax, P.from_inspector(side["layers"], yolo)))
    assert inspected == engine  # the engine's own inspector output: the same rounding as the rules


def test_explicit_model_leaves_the_engines_float_layers_out(mbv2):
    full = onnx.load(str(golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")))
    amax = read_cache(golden("mobilenet_v2", "minmax.cache")).amaxes()
    actual = P.from_inspector(json.loads((TRT / "qdq" / "layers.json").read_text())["implicit"], mbv2, "explicit")
    assert count_qdq(simulated_model(full, amax, actual)) < count_qdq(insert_qdq(full, amax))


def test_engine_layers_file_errors(tmp_path):
    p = tmp_path / "e.json"
    p.write_text('{"name": 1}')
    with pytest.raises(CalibError, match="e.json"):
        P.read_engine_layers(p)
    p.write_text("{")
    with pytest.raises(CalibError, match="e.json"):
        P.read_engine_layers(p)
    p.write_text(json.dumps({"Layers": ["conv1 + relu1"]}))  # the inspector's names-only verbosity
    assert P.read_engine_layers(p)[0]["fused"] == ["conv1", "relu1"]


SIDECARS = sorted(TRT.glob("*/*.engine.json"))


@pytest.mark.parametrize("path", SIDECARS, ids=[p.parent.name for p in SIDECARS])
def test_rules_hold_on_every_recorded_engine_sidecar(path):
    """Any engine a recipe run wrote (implicit INT8 from a calib cache, no layer precisions): the rules must get
    at least 95 % of its quantizable layers right, int8 or float."""
    from calib.zoo import fetch

    side = json.loads(path.read_text())
    assert not side["explicit_qdq"] and not side["layer_precisions"]
    model = onnx.load(str(fetch(Path(side["model"]).stem)), load_external_data=False)  # a zoo model's file
    q = quantizable_layers(model)
    h = P.hit_rate(P.implicit_rules(model), P.from_inspector(side["layers"], model), q)
    assert h["nodes"] >= 0.9 * len(q) and h["int8_vs_float"] >= 0.95 * h["nodes"], h["misses"]


def test_evaluate_with_an_engine_sidecar_simulates_its_float_tail(tmp_path, mbv2):
    """calib evaluate --engine-layers: the engine that ran its 7x7 tail in FP16 is simulated with it in float."""
    from click.testing import CliRunner

    from calib.cli import main

    side = tmp_path / "mbv2.engine.json"
    side.write_text(json.dumps({"layers": json.loads((TRT / "qdq" / "layers.json").read_text())["implicit"]}))
    x = np.load(golden("mobilenet_v2", "photos_224.npy"))[:6]
    data = tmp_path / "x.npy"
    np.save(data, x)
    model = golden("mobilenet_v2", "mobilenet_v2_imagenet.onnx")
    out = {}
    for name, extra in (("rules", []), ("engine", ["--engine-layers", str(side)])):
        r = CliRunner().invoke(main, ["evaluate", str(model), "--cache", str(golden("mobilenet_v2", "minmax.cache")),
                                      "--data", str(data), "--preprocess", "imagenet", "--no-layerwise",
                                      "--out", str(tmp_path / name), *extra])
        assert r.exit_code == 0, r.output
        out[name] = json.loads((tmp_path / name / "report.json").read_text())
    pm = out["engine"]["precision_model"]
    assert pm["source"] == "inspector" and sorted(n for n in pm["float_nodes"] if n in TAIL) == sorted(TAIL)
    assert out["rules"]["precision_model"]["source"] == "rules"
    assert "precisions from the engine inspector (mbv2.engine.json)" in (tmp_path / "engine" / "report.md").read_text()
    sq = {k: v["evaluation"]["configs"]["minmax"]["outputs"]["logits"]["sqnr_db"] for k, v in out.items()}
    assert sq["engine"] > sq["rules"]  # four layers fewer in INT8: closer to FP32


def test_an_engine_of_another_model_is_refused(tmp_path, tiny_model, tiny_data):
    from click.testing import CliRunner

    from calib.cli import main

    side = tmp_path / "other.engine.json"
    side.write_text((TRT / "yolo" / "yolov3-tiny.mse.engine.json").read_text())
    r = CliRunner().invoke(main, ["calibrate", str(tiny_model), "--data", str(tiny_data), "--algo", "minmax",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["evaluate", str(tiny_model), "--cache", str(tmp_path / "c" / "minmax.cache"),
                                  "--data", str(tiny_data), "--engine-layers", str(side), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "other.engine.json" in r.output and "not an engine of this model" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def _prelu_net():
    """input -> Transpose -> Conv -> PRelu -> Conv -> output, as MTCNN's P-Net begins (NHWC input)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), rng.normal(0, 0.3, (2, 4, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.full((4, 1, 1), 0.25, np.float32), "slope")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], "t0", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["xt", "w1"], ["c1"], "conv1"),
             helper.make_node("PRelu", ["c1", "slope"], ["p1"], "prelu1"),
             helper.make_node("Conv", ["p1", "w2"], ["y"], "conv2")]
    g = helper.make_graph(nodes, "prelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_implicit_simulation_rounds_a_conv_output_read_by_a_prelu():
    """TensorRT 8.6 runs a PRelu as a float layer of its own behind an INT8 Conv, which writes INT8 (P-Net on an
    H100: 15.74 dB on the engine, 15.93 with this rounding, 19.43 without): the implicit simulation rounds the
    Conv's output with its own scale; the Q/DQ placement does not (no Q/DQ between them)."""
    m = _prelu_net()
    amax = {"x": 1.0, "xt": 1.0, "c1": 3.0, "p1": 2.0, "y": 5.0}
    engine = _scales(simulated_model(m, amax, P.implicit_rules(m)))
    assert engine["c1"] == [3.0] and engine["p1"] == [2.0]
    assert "c1" not in _scales(insert_qdq(m, amax))
    # conv2 asked in float: it reads float, and conv1 keeps its rounding into the PRelu
    pm = P.implicit_rules(m, lambda n: n.name == "conv2")
    assert pm.nodes["conv2"] == P.FP16 and pm.nodes["prelu1"] == P.FP32
    assert set(_scales(simulated_model(m, amax, pm))) == {"x", "xt", "c1"}


def test_implicit_rules_with_a_float_layer_leave_the_layers_that_only_fed_it_float():
    """conv1 asked in float: the input Transpose was INT8 only to feed it (P-Net's Transpose9): float too."""
    m = _prelu_net()
    assert P.implicit_rules(m).nodes["t0"] == P.INT8
    pm = P.implicit_rules(m, lambda n: n.name == "conv1")
    assert pm.nodes["t0"] != P.INT8 and pm.nodes["conv1"] == P.FP16 and pm.nodes["conv2"] == P.INT8
    amax = {"x": 1.0, "xt": 1.0, "c1": 3.0, "p1": 2.0, "y": 5.0}
    assert set(_scales(simulated_model(m, amax, pm))) == {"p1"}  # conv1 in float writes float into the PRelu
    # the same through simulated_model's exclusions (recover's and --exclude's variants): the rules run again
    assert _scales(simulated_model(m, amax, P.implicit_rules(m), Exclusions(("conv1",)))) == {"p1": [2.0]}


def _inspected(int8_outputs):
    """_prelu_net's engine as TensorRT 8.6 ran P-Net's on an H100: Transpose and the Convs in INT8, the PRelu in
    float; `int8_outputs`: what the Conv wrote, per the inspector's formats (None: formats not reported)."""
    layers = [{"name": "t0", "precision": "int8", "fused": ["t0"]},
              {"name": "conv1", "precision": "int8", "fused": ["conv1"]},
              {"name": "PWN(prelu1)", "precision": "fp32", "fused": ["prelu1"]},
              {"name": "conv2", "precision": "int8", "fused": ["conv2"]}]
    if int8_outputs is not None:
        for la in layers:
            la["int8_outputs"] = []
        layers[0]["int8_outputs"] = ["xt"]
        layers[1]["int8_outputs"] = list(int8_outputs)
    return layers


def test_simulation_of_an_engine_as_built_rounds_the_tensors_it_stored_in_int8():
    """Which tensors an engine stores in INT8 is TensorRT's choice per build: P-Net's variant with conv2d_4 in FP16
    scored 15.74 dB on one H100 build (the Conv wrote INT8 into the PRelu) and 19.14 on another (15.93 and 19.43
    simulated with and without that rounding). Where the inspector gives the formats, the simulation follows them;
    where it does not, it guesses the rounding (UNFUSED)."""
    m = _prelu_net()
    amax = {"x": 1.0, "xt": 1.0, "c1": 3.0, "p1": 2.0, "y": 5.0}
    wrote_int8 = P.from_inspector(_inspected(["c1"]), m)
    wrote_float = P.from_inspector(_inspected([]), m)
    unknown = P.from_inspector(_inspected(None), m)
    assert wrote_int8.int8_tensors == {"xt", "c1"} and wrote_float.int8_tensors == {"xt"}
    assert unknown.int8_tensors is None
    assert _scales(simulated_model(m, amax, wrote_int8))["c1"] == [3.0]
    assert "c1" not in _scales(simulated_model(m, amax, wrote_float))
    assert _scales(simulated_model(m, amax, unknown))["c1"] == [3.0]  # the guess: a PRelu reads INT8
    assert set(_scales(simulated_model(m, amax, wrote_float))) == {"x", "xt", "p1"}  # the INT8 layers as before
    # conv1 asked in float on top of that engine (--exclude): it writes float, so the PRelu reads c1 unrounded
    assert "c1" not in _scales(simulated_model(m, amax, wrote_int8, Exclusions(("conv1",))))


def test_a_float_layer_of_any_kind_reads_an_int8_tensor_rounded():
    """Not only PRelu: a Sigmoid left in float behind an INT8 Conv that wrote INT8 reads the rounded values."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], "conv"), helper.make_node("Sigmoid", ["c"], ["y"], "sig")]
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [numpy_helper.from_array(rng.normal(0, 0.3, (2, 3, 3, 3)).astype(np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    amax = {"x": 1.0, "c": 4.0, "y": 1.0}
    layers = [{"name": "conv", "precision": "int8", "fused": ["conv"], "int8_outputs": ["c"]},
              {"name": "sig", "precision": "fp32", "fused": ["sig"], "int8_outputs": []}]
    assert _scales(simulated_model(m, amax, P.from_inspector(layers, m))) == {"x": [1.0], "c": [4.0]}
    layers[0]["int8_outputs"] = []
    assert _scales(simulated_model(m, amax, P.from_inspector(layers, m))) == {"x": [1.0]}
    layers[0].pop("int8_outputs")  # formats unknown: no guess for a Sigmoid
    assert _scales(simulated_model(m, amax, P.from_inspector(layers, m))) == {"x": [1.0]}


def test_implicit_simulation_leaves_a_reshapes_shape_input_alone(caplog):
    """PP-LCNet's Reshape reads its shape from a Concat of Shape/Gather nodes: a tensor of an INT8 layer with no
    scale, which is not data (calib warned 'no scale for ... Concat.1'). Only the data input of a value-moving layer
    is rounded."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], "conv"),
             helper.make_node("Shape", ["c"], ["shp"], "shape"),
             helper.make_node("Reshape", ["c", "shp"], ["r"], "reshape"),
             helper.make_node("Conv", ["r", "w2"], ["y"], "conv2")]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [numpy_helper.from_array(rng.normal(0, 0.3, (2, 3, 1, 1)).astype(np.float32), "w"),
                           numpy_helper.from_array(rng.normal(0, 0.3, (2, 2, 3, 3)).astype(np.float32), "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    amax = {"x": 1.0, "c": 2.0, "r": 2.0, "y": 1.0}
    layers = [{"name": n, "precision": "int8", "fused": [n]} for n in ("conv", "reshape", "conv2")]
    with caplog.at_level("WARNING", logger="calib"):
        sim = simulated_model(m, amax, P.from_inspector(layers, m))
    assert not [r for r in caplog.records if "no scale" in r.getMessage()], caplog.text
    assert _scales(sim) == {"x": [1.0], "c": [2.0], "r": [2.0]}  # each layer's data input; the shape never
    x = rng.normal(0, 0.5, (1, 3, 6, 6)).astype(np.float32)
    assert OrtRunner(sim).run({"x": x})["y"].shape == (1, 2, 4, 4)


@pytest.mark.parametrize("layers,rules_right,merged_right", [
    ("qdq-l3/yolov8n-l3-b4/layers.json", 228, 234), ("qdq-l3-yolov8n-b1/yolov8n-l3-b1/layers.json", 222, 228)])
def test_an_engine_without_formats_is_its_kernels_and_the_rules(layers, rules_right, merged_right):
    """An engine with a shape range on TensorRT 8.6 lists no formats: the kernels' names give the Convs' precisions,
    the rules the rest. Made from YOLOv8n-320's H100 engines (level 3) by dropping their formats, that model is
    right on more nodes (int8 or float) than the rules alone, the Convs as the engine ran them; without the rules
    the 66 nodes of layers without a kernel name would count as float."""
    from calib.runners.tensorrt.inspect import kernel_precision
    from calib.zoo import fetch

    model = onnx.load(str(fetch("yolov8n-320")), load_external_data=False)
    real = json.loads((Y8_H100 / layers).read_text())["implicit"]
    bare = [{**{k: v for k, v in la.items() if k != "int8_outputs"},
             "precision": kernel_precision({"TacticName": la["tactic"]}) or "?"} for la in real]
    assert sum(la["precision"] == "?" for la in bare) > len(bare) // 2  # the point-wise layers, reformats, copies
    rules, actual = P.implicit_rules(model), P.from_inspector(real, model)
    merged = P.from_inspector(bare, model, fallback=rules)
    assert P.hit_rate(rules, actual)["int8_vs_float"] == rules_right
    assert P.hit_rate(merged, actual)["int8_vs_float"] == merged_right and len(merged.nodes) == 239
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    assert {n: merged.nodes[n] for n in convs} == {n: actual.nodes[n] for n in convs}
    assert merged.int8_tensors is None  # which tensors it stores in INT8: not known
    assert merged.notes == ("the rules (implicit-INT8 rules, TensorRT 8.6) give the 64 nodes whose engine layers list "
                            "no precision",)
    assert len(P.from_inspector(bare, model).nodes) == 239 - 66


def test_pinned_layers_are_float_in_the_rules_that_fill_in():
    """The nodes a recipe pins to FP16/FP32 (backend.layer_precisions) stay float in the rules' prediction that fills
    in an engine's layers without a precision (YOLOv8n's residual Adds are INT8 point-wise layers of their own, which
    TensorRT 8.6 lists without formats or a kernel name); an INT8 pin or a TensorRT layer type pins nothing there."""
    from calib.quantize.patterns import pinned_to_float
    from calib.zoo import fetch

    model = onnx.load(str(fetch("yolov8n-320")), load_external_data=False)
    adds = [n.name for n in model.graph.node if n.op_type == "Add" and "/m." in n.name]
    free = P.implicit_rules(model)
    assert len(adds) == 6 and {free.nodes[a] for a in adds} == {"int8"}
    one = P.implicit_rules(model, pinned_to_float([f"{adds[1]}=fp16", "op:Add=int8", "op:ELEMENTWISE=fp16"]))
    assert [one.nodes[a] != "int8" for a in adds] == [False, True, False, False, False, False]
    assert {n for n in free.nodes if free.nodes[n] != one.nodes[n]} == {adds[1]}
    every = P.implicit_rules(model, pinned_to_float(["op:Add=fp32"]))
    assert {every.nodes[a] for a in adds} == {"fp32"}
