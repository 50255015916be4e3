"""Shape inference without the weights gives what onnx's full shape inference gives."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from calib.quantize.model import infer_shapes, inspect_model
from conftest import golden


def _types(model: onnx.ModelProto) -> dict:
    g = model.graph
    return {vi.name: vi.type.SerializeToString() for vi in list(g.value_info) + list(g.output)}


def _reshape_graph() -> onnx.ModelProto:
    """Conv (108 weights) -> Reshape by an int64 initializer -> MatMul (2560 weights) -> Resize by float scales."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 1, -1, 256], np.int64), "shape"),
             numpy_helper.from_array(rng.normal(size=(256, 10)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 1, 2, 0.5], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("MatMul", ["r", "b"], ["m"]),
             helper.make_node("Resize", ["m", "", "scales"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("which", ["reshape", "cnn", "mobilenet_v2"])
def test_light_inference_matches_full(which):
    if which == "reshape":
        model = _reshape_graph()
    else:
        name = {"cnn": ("cnn", "cnn.onnx"), "mobilenet_v2": ("mobilenet_v2", "mobilenet_v2_imagenet.onnx")}[which]
        model = onnx.load(str(golden(*name)))
    full, light = _types(onnx.shape_inference.infer_shapes(model)), _types(infer_shapes(model))
    assert full == light
    if which == "reshape":  # the shape-deciding initializers were read: every dim is known
        y = infer_shapes(model).graph.output[0].type.tensor_type.shape
        assert [d.dim_value for d in y.dim] == [1, 1, 2, 5]
        assert len(model.graph.initializer) == 4 and len(model.graph.input) == 1  # the caller's model is untouched
    assert len(light) > 3


def test_inspect_model_with_loaded_proto(tiny_model):
    proto = onnx.load(str(tiny_model))
    assert inspect_model(tiny_model, proto) == inspect_model(tiny_model)


def test_per_file_remembers_while_the_file_is_unchanged(tmp_path):
    """calib.io.files.per_file (model hashes, inspections, cache ties): once per file while nobody writes it, the oldest
    entry out past the limit, a missing file never remembered."""
    import os

    from calib.io.files import per_file

    table, calls = {}, []
    files = [tmp_path / f"m{i}.onnx" for i in range(3)]
    for f in files:
        f.write_bytes(b"x")

    def make(f):
        return lambda: calls.append(f.name) or f.name.upper()

    assert [per_file(table, f, make(f), limit=2) for f in files[:2] * 2] == ["M0.ONNX", "M1.ONNX"] * 2
    assert calls == ["m0.onnx", "m1.onnx"]
    per_file(table, files[2], make(files[2]), limit=2)  # m0 out
    assert [k[0] for k in table] == [str(files[1]), str(files[2])]
    os.utime(files[1], ns=(1, 1))  # rewritten: worked out again
    assert per_file(table, files[1], make(files[1]), limit=2) == "M1.ONNX" and calls[-1] == "m1.onnx"
    missing = tmp_path / "gone.onnx"
    assert per_file(table, missing, make(missing), limit=2) == "GONE.ONNX"
    assert str(missing) not in [k[0] for k in table]
