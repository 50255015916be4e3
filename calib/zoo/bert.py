"""A BERT sentence encoder (all-MiniLM-L6-v2 class) written as an ONNX graph from its safetensors weights with
onnx.helper and numpy: no torch needed.

The graph is what a PyTorch export of BertModel + mean pooling + L2 normalization gives (opset 13): embeddings
(word + position + token type, LayerNorm), `layers` encoder blocks (self-attention with MatMul Q*K^T / sqrt(d),
the additive attention mask, Softmax, MatMul with V; dense + residual + LayerNorm; GELU MLP + residual + LayerNorm;
LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div, which TensorRT fuses), then the mean of the token states under the
attention mask, divided by its L2 norm. Inputs input_ids, attention_mask, token_type_ids: int64 [batch, seq_len]
(batch dynamic); output `embedding` [batch, hidden].
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from calib.errors import ModelError
from calib.io.reading import read_json

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "BF16": None}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of a .safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelError(f"{path}: not a safetensors file (too short)")
    n = struct.unpack("<Q", data[:8])[0]
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        raise ModelError(f"{path}: not a safetensors file (bad header)") from None
    out = {}
    base = 8 + n
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ModelError(f"{path}: tensor '{name}' has dtype {spec['dtype']}, not supported")
        lo, hi = spec["data_offsets"]
        out[name] = np.frombuffer(data[base + lo:base + hi], dtype=dtype).reshape(spec["shape"]).copy()
    return out


class _G:
    """Nodes, initializers and unique names."""

    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def const(self, value, name=None) -> str:
        self.k += 1
        name = name or f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type, inputs, name, **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name


def _layer_norm(g: _G, x, w, b, eps, name) -> str:
    mean = g.op("ReduceMean", [x], f"{name}/mean", axes=[-1])
    d = g.op("Sub", [x, mean], f"{name}/sub")
    var = g.op("ReduceMean", [g.op("Pow", [d, g.const(np.float32(2))], f"{name}/pow")], f"{name}/var", axes=[-1])
    std = g.op("Sqrt", [g.op("Add", [var, g.const(np.float32(eps))], f"{name}/add_eps")], f"{name}/sqrt")
    y = g.op("Div", [d, std], f"{name}/div")
    y = g.op("Mul", [y, g.const(w, f"{name}.weight")], f"{name}/mul")
    return g.op("Add", [y, g.const(b, f"{name}.bias")], f"{name}/out")


def _dense(g: _G, x, w, b, name) -> str:
    y = g.op("MatMul", [x, g.const(np.ascontiguousarray(w.T), f"{name}.weight")], f"{name}/MatMul")
    return g.op("Add", [y, g.const(b, f"{name}.bias")], f"{name}/out")


def bert_to_onnx(weights: dict[str, np.ndarray], config: dict, seq_len: int = 128) -> onnx.ModelProto:
    """The ONNX graph of a BERT encoder + mean pooling + L2 normalization from `weights` (Hugging Face names)."""
    w = {k.removeprefix("bert."): v.astype(np.float32) if v.dtype == np.float16 else v for k, v in weights.items()}
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    layers, eps = int(config["num_hidden_layers"]), float(config.get("layer_norm_eps", 1e-12))
    if hidden % heads:
        raise ModelError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    dh = hidden // heads
    missing = [k for k in ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight")
               if k not in w]
    if missing:
        raise ModelError(f"weights lack '{missing[0]}' (not a BERT checkpoint?)")
    g = _G()
    e = "embeddings"
    words = g.op("Gather", [g.const(w[f"{e}.word_embeddings.weight"], f"{e}.word_embeddings.weight"), "input_ids"],
                 f"{e}/word")
    pos = g.const(w[f"{e}.position_embeddings.weight"][None, :seq_len], f"{e}.position_embeddings")
    types = g.op("Gather", [g.const(w[f"{e}.token_type_embeddings.weight"], f"{e}.token_type_embeddings.weight"),
                            "token_type_ids"], f"{e}/type")
    x = g.op("Add", [g.op("Add", [words, pos], f"{e}/add_pos"), types], f"{e}/sum")
    x = _layer_norm(g, x, w[f"{e}.LayerNorm.weight"], w[f"{e}.LayerNorm.bias"], eps, f"{e}/LayerNorm")
    mask_f = g.op("Cast", ["attention_mask"], "mask/float", to=TensorProto.FLOAT)
    m4 = g.op("Unsqueeze", [mask_f, g.const(np.array([1, 2], np.int64))], "mask/unsqueeze")
    bias = g.op("Mul", [g.op("Sub", [g.const(np.float32(1)), m4], "mask/invert"), g.const(np.float32(-10000.0))],
                "mask/bias")
    split_shape = g.const(np.array([-1, seq_len, heads, dh], np.int64), "shape/heads")
    merge_shape = g.const(np.array([-1, seq_len, hidden], np.int64), "shape/merge")
    scale = g.const(np.float32(np.sqrt(dh)), "attention/sqrt_dh")
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = f"{p}.attention"

        def heads_of(kind, perm):
            y = _dense(g, x, w[f"{a}.self.{kind}.weight"], w[f"{a}.self.{kind}.bias"], f"{a}.self.{kind}")
            y = g.op("Reshape", [y, split_shape], f"{a}.self.{kind}/reshape")
            return g.op("Transpose", [y], f"{a}.self.{kind}/transpose", perm=perm)

        q, k, v = heads_of("query", [0, 2, 1, 3]), heads_of("key", [0, 2, 3, 1]), heads_of("value", [0, 2, 1, 3])
        s = g.op("MatMul", [q, k], f"{a}.self/QK")
        s = g.op("Add", [g.op("Div", [s, scale], f"{a}.self/scale"), bias], f"{a}.self/masked")
        probs = g.op("Softmax", [s], f"{a}.self/softmax", axis=-1)
        ctx = g.op("MatMul", [probs, v], f"{a}.self/AV")
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], f"{a}.self/ctx_transpose", perm=[0, 2, 1, 3]), merge_shape],
                   f"{a}.self/ctx")
        y = _dense(g, ctx, w[f"{a}.output.dense.weight"], w[f"{a}.output.dense.bias"], f"{a}.output.dense")
        x = _layer_norm(g, g.op("Add", [y, x], f"{a}.output/residual"), w[f"{a}.output.LayerNorm.weight"],
                        w[f"{a}.output.LayerNorm.bias"], eps, f"{a}.output.LayerNorm")
        h = _dense(g, x, w[f"{p}.intermediate.dense.weight"], w[f"{p}.intermediate.dense.bias"],
                   f"{p}.intermediate.dense")
        erf = g.op("Erf", [g.op("Div", [h, g.const(np.float32(np.sqrt(2.0)))], f"{p}.gelu/div")], f"{p}.gelu/erf")
        h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, g.const(np.float32(1))], f"{p}.gelu/add")], f"{p}.gelu/mul"),
                         g.const(np.float32(0.5))], f"{p}.gelu/out")
        y = _dense(g, h, w[f"{p}.output.dense.weight"], w[f"{p}.output.dense.bias"], f"{p}.output.dense")
        x = _layer_norm(g, g.op("Add", [y, x], f"{p}.output/residual"), w[f"{p}.output.LayerNorm.weight"],
                        w[f"{p}.output.LayerNorm.bias"], eps, f"{p}.output.LayerNorm")
    m3 = g.op("Unsqueeze", [mask_f, g.const(np.array([2], np.int64))], "pool/mask")
    total = g.op("ReduceSum", [g.op("Mul", [x, m3], "pool/masked"), g.const(np.array([1], np.int64))], "pool/sum",
                 keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [m3, g.const(np.array([1], np.int64))], "pool/count_raw", keepdims=0),
                         g.const(np.float32(1e-9))], "pool/count")
    mean = g.op("Div", [total, count], "pool/mean")
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [mean, mean], "norm/sq"), g.const(np.array([1], np.int64))],
                                "norm/sum", keepdims=1)], "norm/l2")
    g.op("Div", [mean, g.op("Max", [norm, g.const(np.float32(1e-12))], "norm/clamp")], "embedding")
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", seq_len])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])
    graph = helper.make_graph(g.nodes, "sentence_encoder", ints, [out], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="calib")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def export(folder: str | Path, seq_len: int = 128) -> onnx.ModelProto:
    """The ONNX model of a sentence-transformers folder (model.safetensors + config.json)."""
    folder = Path(folder)
    cfg = folder / "config.json"
    if not cfg.is_file():
        raise ModelError(f"{folder}: no config.json")
    return bert_to_onnx(read_safetensors(folder / "model.safetensors"), read_json(cfg, 16 << 20, "config.json", ModelError), seq_len)
