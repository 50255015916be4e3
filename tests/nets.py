"""Small hand-made conv nets with chosen input shapes (fixed, dynamic or placeholder dimensions)."""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image


def conv_net(path: Path, dims, channels: int = 4, seed: int = 0) -> Path:
    """images [dims] -> Conv(channels, 3x3, pad 1) -> Relu -> Conv(channels, 3x3, pad 1) -> out.

    Each sample of H x W costs 4 * H * W * (3 + 3 * channels) bytes of float activations (images, conv1, relu1,
    out). `dims` entries may be ints, None (dynamic) or strings (named dynamic dimensions)."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (c, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.4, (c, c, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["images", "w1"], ["conv1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
             helper.make_node("Conv", ["relu1", "w2"], ["out"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("images", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def relu_chain(path: Path, dims, depth: int) -> Path:
    """images [dims] -> Relu r1 -> ... -> Relu r<depth> -> Add(r1, r<depth>) -> out: every tensor the input's size,
    r1 alive to the end, each other only until the next Relu reads it."""
    nodes = [helper.make_node("Relu", ["images" if i == 1 else f"r{i - 1}"], [f"r{i}"], name=f"relu{i}")
             for i in range(1, depth + 1)]
    nodes.append(helper.make_node("Add", ["r1", f"r{depth}"], ["out"], name="add"))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("images", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def image_folder(folder: Path, sizes, seed: int = 0) -> Path:
    """PNG files of random RGB pixels, one per (height, width) in `sizes`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, (h, w) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"img{i:03d}.png")
    return folder
