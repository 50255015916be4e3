"""What `calib run` says of an INT8 engine that ran no layer in INT8: the engine's own layer counts always, the
transformer hint (attention goes to Myelin in TensorRT 8.6) only for an implicit engine of a model with attention.
On an H100 the YOLOv8n-320 engines of `calib run` at builder level 1 listed fp32 183, reformat 7 with no INT8
layer, and the warning blamed a transformer's attention: YOLOv8n has none."""
import onnx

from calib.deploy.jobs import kept_in_float, no_int8_note
from calib.runners.tensorrt.builder import Built
from calib.runners.tensorrt.inspect import summary
from conftest import conv_relu_gap, tiny_transformer


def _built(*precisions, level=1):
    layers = [{"name": f"l{k}", "precision": p, "fused": [f"l{k}"]} for k, p in enumerate(precisions)]
    return Built(b"", 1.0, layers, {"layer_summary": summary(layers), "optimization_level": level})


def test_a_cnn_engine_without_int8_names_its_layers_not_attention(tmp_path):
    cnn = onnx.load(str(conv_relu_gap(tmp_path / "cnn.onnx")))
    note = no_int8_note(_built("fp32", "fp32", "fp16"), cnn, implicit=True)
    assert note == "TensorRT ran no layer in INT8 (engine layers: fp16 1, fp32 2; builder level 1)"
    assert no_int8_note(_built("fp32", "int8"), cnn, implicit=True) is None
    assert no_int8_note(_built("fp32", level=None), cnn, implicit=True).endswith("(engine layers: fp32 1)")


def test_a_transformer_gets_the_myelin_hint_only_for_its_implicit_engine(tmp_path):
    tr = onnx.load(str(tiny_transformer(tmp_path / "tr.onnx")))
    note = no_int8_note(_built("fp16", level=3), tr, implicit=True)
    assert note.startswith("TensorRT ran no layer in INT8 (engine layers: fp16 1; builder level 3); a transformer")
    assert "set backend.qdq" in note
    assert "transformer" not in no_int8_note(_built("fp16"), tr, implicit=False)  # a Q/DQ engine: no such hint


def test_nodes_the_engine_gives_no_precision_for():
    """A node the engine's layers give no precision for counts as INT8 beside INT8 layers and where no layer has a
    precision (a dynamic-shape engine inspected without a context lists no formats: every layer '?'), as float
    where layers have precisions and none is INT8."""
    nodes = ["a", "b", "c"]
    float_only = [{"name": n, "precision": "fp32", "fused": [n]} for n in ("a", "b")]
    assert kept_in_float(float_only, nodes) == (("a", "b", "c"),
                                                " (1 without a precision in its layers, counted as FP32)")
    mixed = [{"name": "a + b", "precision": "int8", "fused": ["a", "b"]}]
    assert kept_in_float(mixed, nodes) == ((), " (1 without a precision in its layers, counted as INT8)")
    assert kept_in_float(mixed + [{"name": "c", "precision": "fp16", "fused": ["c"]}], nodes) == (("c",), "")
    unknown = [{"name": n, "precision": "?", "fused": [n]} for n in nodes]
    assert kept_in_float(unknown, nodes) == ((), " (3 without a precision in its layers, counted as INT8)")
    assert kept_in_float([], nodes) == ((), " (3 without a precision in its layers, counted as INT8)")


def test_an_engine_whose_layers_carry_no_precision_gets_no_note(tmp_path):
    """The H100 YOLOv8n engines (batch 1-8) inspected without a context: 190 layers, no format. calib had read
    them as FP32 and said 'TensorRT ran no layer in INT8'; the same model at a fixed batch ran 94 INT8 layers."""
    cnn = onnx.load(str(conv_relu_gap(tmp_path / "cnn.onnx")))
    assert no_int8_note(_built("?", "?", "?"), cnn, implicit=True) is None
    assert no_int8_note(_built(), cnn, implicit=True) is None
