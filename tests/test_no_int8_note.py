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


def test_nodes_the_engine_does_not_name_are_float_where_no_layer_ran_in_int8():
    """The level-1 engine named 87 of YOLOv8n's 108 Convs, all in FP32, and calib said 'kept 87 of 108 in float':
    the other 21 had counted as INT8. Beside INT8 layers an unnamed node still counts as INT8 (folded into one)."""
    nodes = ["a", "b", "c"]
    float_only = [{"name": "a", "precision": "fp32", "fused": ["a"]}, {"name": "b", "precision": "fp32", "fused": ["b"]}]
    assert kept_in_float(float_only, nodes) == (("a", "b", "c"), " (1 not named in its layers, counted as FP32)")
    mixed = [{"name": "a + b", "precision": "int8", "fused": ["a", "b"]}]
    assert kept_in_float(mixed, nodes) == ((), " (1 not named in its layers, counted as INT8)")
    assert kept_in_float(mixed + [{"name": "c", "precision": "fp16", "fused": ["c"]}], nodes) == (("c",), "")
    assert kept_in_float([], nodes) == ((), " (3 not named in its layers, counted as INT8)")  # no inspector
