"""A chain of 1x1 Convs whose middle layers carry one outlier channel: several layers lose accuracy in INT8, by
different amounts, so a recovery ranks them and keeps some in float (what the scale-out tests compare)."""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def outlier_chain(path: Path, depth: int = 6, channels: int = 4, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    c = channels
    nodes, inits, x = [], [], "input"
    for i in range(depth):
        w = rng.normal(0, 0.6, (c, c)).astype(np.float32) + np.eye(c, dtype=np.float32)
        if i == 1:
            w[0] *= 300.0  # channel 0 becomes an outlier ...
        if i == depth - 2:
            w[:, 0] /= 300.0  # ... until this layer takes it back
        inits += [numpy_helper.from_array(w.reshape(c, c, 1, 1), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, c).astype(np.float32), f"b{i}")]
        y = "out" if i == depth - 1 else f"t{i}"
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y if i == depth - 1 else f"c{i}"],
                                      name=f"conv{i}"))
        if i < depth - 1:
            nodes.append(helper.make_node("Relu", [f"c{i}"], [y], name=f"relu{i}"))
        x = y
    g = helper.make_graph(nodes, "outlier_chain",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", c, 6, 6])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", c, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def samples(path: Path, n: int = 96, channels: int = 4, seed: int = 1) -> Path:
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, (n, channels, 6, 6)).astype(np.float32)
    np.save(path, x)
    return path
