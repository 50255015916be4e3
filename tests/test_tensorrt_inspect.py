"""Per-layer precision from the engine inspector's JSON (detailed verbosity), and its mapping to ONNX nodes."""
from __future__ import annotations

import json

import pytest

from calib.errors import CalibError
from calib.runners.tensorrt.inspect import (check_layers, format_precision, kernel_precision, layer_precision,
                                            node_precisions, parse_layers, split_fused)
from conftest import ROOT

# The shape of TensorRT 8.6's detailed layer information (IEngineInspector, LayerInformationFormat.JSON).
INFO = {"Layers": [
    {"Name": "/features/features.0/features.0.0/Conv + /features/features.0/features.0.2/Clip",
     "LayerType": "CaskConvolution",
     "Inputs": [{"Name": "input", "Dimensions": [32, 3, 224, 224],
                 "Format/Datatype": "Four wide channel vectorized row major Int8 format"}],
     "Outputs": [{"Name": "/features/features.0/features.0.2/Clip_output_0", "Dimensions": [32, 32, 112, 112],
                  "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
     "TacticName": "sm90_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32"},
    {"Name": "/classifier/classifier.1/Gemm", "LayerType": "CaskGemmConvolution",
     "Inputs": [{"Name": "x", "Format/Datatype": "Row major linear FP32"}],
     "Outputs": [{"Name": "logits", "Format/Datatype": "Row major linear FP32"}], "TacticName": "gemm"},
    {"Name": "PWN(PWN(/a/Add, /a/Relu), /a/Mul)", "LayerType": "PointWiseV2",
     "Inputs": [{"Name": "a", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}],
     "Outputs": [{"Name": "b", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
    {"Name": "Reformatting CopyNode for Input Tensor 0 to /classifier/classifier.1/Gemm", "LayerType": "Reformat",
     "Inputs": [{"Name": "y", "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
     "Outputs": [{"Name": "x", "Format/Datatype": "Row major linear FP32"}]},
    {"Name": "/last/Conv", "LayerType": "CaskConvolution",
     "Inputs": [{"Name": "q", "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
     "Outputs": [{"Name": "r", "Format/Datatype": "Row major linear FP32"}]},
], "Bindings": ["input", "logits"]}


def test_formats():
    assert format_precision("Row major linear FP32") == "fp32"
    assert format_precision("Channel major FP16 format where channel % 2 == 0") == "fp16"
    assert format_precision("Thirty-two wide channel vectorized row major Int8 format") == "int8"
    assert format_precision("Row major linear INT32 format") is None


def test_layers_and_fusions():
    layers = parse_layers(json.dumps(INFO))
    assert [l["precision"] for l in layers] == ["int8", "fp32", "fp16", "int8", "int8"]
    assert layers[0]["fused"] == ["/features/features.0/features.0.0/Conv", "/features/features.0/features.0.2/Clip"]
    assert layers[2]["fused"] == ["/a/Add", "/a/Relu", "/a/Mul"]
    assert layers[3]["fused"] == []  # a reformat holds no network layer
    assert layer_precision(INFO["Layers"][4]) == "int8"  # an INT8 kernel that writes FP32 is an INT8 layer
    nodes = ["/features/features.0/features.0.0/Conv", "/classifier/classifier.1/Gemm", "/a/Add", "/last/Conv",
             "/folded/away"]
    prec = node_precisions(layers, nodes)
    assert prec == {"/features/features.0/features.0.0/Conv": "int8", "/classifier/classifier.1/Gemm": "fp32",
                    "/a/Add": "fp16", "/last/Conv": "int8"}


def test_names_only_verbosity():
    layers = parse_layers(["a + b", "c"])
    assert [l["fused"] for l in layers] == [["a", "b"], ["c"]] and layers[0]["precision"] == "?"
    assert split_fused("x") == ["x"]


def test_unnamed_onnx_nodes_are_node_of_their_output():
    """What TensorRT 8.6 named the small CNN's layers on an H200 (its nodes have no names)."""
    layers = parse_layers({"Layers": [
        {"Name": "node_of_conv1 + node_of_relu1", "LayerType": "CaskConvolution",
         "Inputs": [{"Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
        {"Name": "node_of_conv2 + node_of_relu2", "LayerType": "CaskConvolution",
         "Inputs": [{"Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}]}]})
    assert node_precisions(layers, ["conv1", "conv2"]) == {"conv1": "fp16", "conv2": "int8"}


def test_layers_recorded_from_a_real_engine():
    """The small CNN built INT8+FP16 on an H200 with conv1=fp16 and op:Gemm=fp32: TensorRT ran every layer in
    FP16 (INT8 was not faster at batch 8), which is what the CPU simulation must be told."""
    from conftest import GOLDEN

    info = json.loads((GOLDEN / "cnn" / "engine-int8-fp16-layers.json").read_text())
    assert info["tensorrt"] == "8.6.0" and info["gpu"].startswith("NVIDIA H200")
    layers = parse_layers({"Layers": []}) + info["layers"]
    prec = node_precisions(layers, ["conv0", "conv1", "conv2", "gap", "logits"])
    assert prec == {"conv0": "fp16", "conv1": "fp16", "conv2": "fp16", "gap": "fp16", "logits": "fp16"}


def test_tensors_written_in_int8_are_recorded():
    """The detailed inspector names each layer's output tensors and their formats: the ones in an INT8 format are
    what a float reader gets rounded (calib.deploy.simulate)."""
    layers = parse_layers(json.dumps(INFO))
    assert layers[0]["int8_outputs"] == ["/features/features.0/features.0.2/Clip_output_0"]
    assert [la["int8_outputs"] for la in layers[1:]] == [[], [], [], []]  # the reformat writes FP32
    assert "int8_outputs" not in parse_layers(["a + b"])[0]  # names only: formats unknown


def test_horizontally_fused_layers_are_split():
    """TensorRT 8.6 ran P-Net's two heads, which read the same tensor, as one layer 'conv2d_4 || conv2d_3'."""
    assert split_fused("conv2d_4 || conv2d_3") == ["conv2d_4", "conv2d_3"]
    layers = parse_layers({"Layers": [{"Name": "conv2d_4 || conv2d_3", "LayerType": "CaskConvolution",
                                       "Inputs": [{"Name": "p", "Format/Datatype": "Row major linear Int8 format"}],
                                       "Outputs": [{"Name": "a", "Format/Datatype": "Row major linear FP32"},
                                                   {"Name": "b", "Format/Datatype": "Row major linear FP32"}]}]})
    assert node_precisions(layers, ["conv2d_3", "conv2d_4"]) == {"conv2d_3": "int8", "conv2d_4": "int8"}


def test_a_sidecars_int8_outputs_are_checked(tmp_path):
    ok = [{"name": "a", "precision": "int8", "fused": ["a"], "int8_outputs": ["t"]}]
    assert check_layers(ok, "x.json") == ok
    with pytest.raises(CalibError, match="x.json: engine layer 0: 'int8_outputs' must be a list of tensor names"):
        check_layers([{"name": "a", "precision": "int8", "fused": ["a"], "int8_outputs": "t"}], "x.json")


# The small CNN's INT8 engine for batch 1-8 as TensorRT 8.6.0's inspector wrote it on an H100, through an execution
# context with batch 8 set: the end of the first layer and the start of the second (the rest was outside the excerpt)
CONV0_END = {"Activation": "RELU", "HasBias": 1, "HasReLU": 1, "TacticName": "sm80_xmma_fprop_avdt_dense_chw_int8int8_"
             "tilesize16x16_k32_fltsteps1_threadspercta256_r3s3_u1v1_scalebias_relu", "TacticValue": "0x9df3297bccc5c910",
             "StreamId": 0, "Metadata": "[ONNX Layer: node_of_conv0]\u001e[ONNX Layer: node_of_relu0]"}
CONV1 = {"Name": "node_of_conv1 + node_of_relu1", "LayerType": "CaskConvolution",
         "Inputs": [{"Name": "relu0", "Location": "Device", "Dimensions": [-1, 16, 64, 64],
                     "Format/Datatype": "N/A due to dynamic shapes"}],
         "Outputs": [{"Name": "relu1", "Location": "Device", "Dimensions": [-1, 32, 32, 32],
                      "Format/Datatype": "N/A due to dynamic shapes"}],
         "ParameterType": "Convolution", "Kernel": [3, 3], "PaddingMode": "kEXPLICIT_ROUND_DOWN", "PrePadding": [1, 1],
         "PostPadding": [1, 1], "Stride": [2, 2], "Dilation": [1, 1], "OutMaps": 32, "Groups": 1,
         "Weights": {"Type": "Int8", "Count": 4608}}


def test_an_engine_with_a_shape_range_reads_its_kernels():
    """TensorRT 8.6 lists no formats for an engine with a shape range, through a context too: the precision is the
    kernel's (its tactic's name, else its weights' type); a layer with neither is '?', never FP32; which tensors it
    stores in INT8 is then not known (no int8_outputs)."""
    assert kernel_precision(CONV0_END) == "int8"
    (conv1,) = parse_layers({"Layers": [CONV1]})
    assert conv1["precision"] == "int8" and conv1["fused"] == ["node_of_conv1", "node_of_relu1"]
    assert "int8_outputs" not in conv1
    pointwise = {"Name": "PWN(a, b)", "LayerType": "PointWiseV2", "TacticName": "",
                 "Inputs": [{"Name": "x", "Format/Datatype": "N/A due to dynamic shapes"}],
                 "Outputs": [{"Name": "y", "Format/Datatype": "N/A due to dynamic shapes"}]}
    assert layer_precision(pointwise) == "?"
    fp16_weights = {**CONV1, "Weights": {"Type": "Half", "Count": 4608}}
    assert layer_precision(fp16_weights) == "fp16"
    # a layer with formats keeps reading them, whatever its kernel's name says
    assert layer_precision({**INFO["Layers"][2], "TacticName": "i8i8"}) == "fp16"


def _recorded_layers():
    """(tactic, precision from the formats) of every layer of the TensorRT 8.6 engines in benchmarks/trt86-*."""
    found = []

    def walk(o):
        if isinstance(o, dict):
            if isinstance(o.get("tactic"), str) and o.get("precision") in ("int8", "fp16", "fp32"):
                found.append((o["tactic"], o["precision"]))
                return
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for path in sorted((ROOT / "benchmarks").glob("trt86-*/**/*.json")):
        walk(json.loads(path.read_text()))
    return found


def test_kernel_names_agree_with_the_formats_of_real_engines():
    """On every layer of the H100 and H200 engines committed under benchmarks/ (fixed shapes: formats given), the
    kernel's name gives the precision the formats give, or none (an FP16 max pooling's name has no type)."""
    rows = [(t, p) for t, p in _recorded_layers() if t]
    assert len(rows) > 5000
    read = [(kernel_precision({"TacticName": t}), p, t) for t, p in rows]
    wrong = [(t, p, k) for k, p, t in read if k is not None and k != p]
    assert not wrong, wrong[:5]
    assert {p for k, p, _ in read if k is not None} == {"int8", "fp16", "fp32"}
    assert sum(k is None for k, _, _ in read) < 0.01 * len(read)
