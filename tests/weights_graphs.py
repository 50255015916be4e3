"""Small graphs whose Conv weight reaches the Conv in the ways exporters write it (tests/test_weights.py)."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

C = 4  # channels in and out


def weight(seed: int = 0) -> np.ndarray:
    """A [C, C, 3, 3] weight whose values float16 holds exactly (so a Cast from float16 changes nothing)."""
    w = np.random.default_rng(seed).normal(size=(C, C, 3, 3)) * np.linspace(0.1, 2.0, C)[:, None, None, None]
    return w.astype(np.float16).astype(np.float32)


def _weight_nodes(how: str, w: np.ndarray):
    """(nodes, initializers) that make tensor 'w1' from `w` the way `how` says."""
    init = numpy_helper.from_array
    if how == "initializer":
        return [], [init(w, "w1")]
    if how == "constant":
        return [helper.make_node("Constant", [], ["w1"], name="w1_const", value=init(w, "w1_value"))], []
    if how == "identity":
        return [helper.make_node("Identity", ["w1_raw"], ["w1"], name="w1_identity")], [init(w, "w1_raw")]
    if how == "cast":
        return [helper.make_node("Cast", ["w1_half"], ["w1"], name="w1_cast", to=TensorProto.FLOAT)], \
            [init(w.astype(np.float16), "w1_half")]
    if how == "reshape":
        return [helper.make_node("Reshape", ["w1_flat", "w1_shape"], ["w1"], name="w1_reshape")], \
            [init(w.reshape(C, -1), "w1_flat"), init(np.array([0, C, 3, 3], np.int64), "w1_shape")]  # 0: keep dim
    if how == "transpose":
        return [helper.make_node("Transpose", ["w1_t"], ["w1"], name="w1_transpose", perm=[1, 0, 2, 3])], \
            [init(np.ascontiguousarray(w.transpose(1, 0, 2, 3)), "w1_t")]
    if how == "chain":  # Paddle-like: Constant -> Identity -> Cast
        return [helper.make_node("Constant", [], ["w1_c"], name="w1_const", value=init(w.astype(np.float16), "v")),
                helper.make_node("Identity", ["w1_c"], ["w1_i"], name="w1_identity"),
                helper.make_node("Cast", ["w1_i"], ["w1"], name="w1_cast", to=TensorProto.FLOAT)], []
    raise ValueError(how)


def two_convs(how: str = "initializer", shared: bool = False, opset: int = 13):
    """input [N, C, 6, 6] -> conv1(w1) -> Relu -> conv2(w2, or w1 when shared) -> out."""
    w1, w2 = weight(0), weight(1)
    nodes, inits = _weight_nodes(how, w1)
    if not shared:
        inits.append(numpy_helper.from_array(w2, "w2"))
    nodes += [helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
              helper.make_node("Conv", ["r1", "w1" if shared else "w2"], ["out"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "two_convs",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", C, 6, 6])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", C, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
