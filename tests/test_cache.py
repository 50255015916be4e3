"""Cache format against TensorRT's own files, sidecars and validation."""
import json
import struct

import numpy as np
import pytest

from calib.quantize.cache import (amax_to_hex, check_model_hash, format_cache, hex_to_scale, parse_cache, read_cache,
                         validate_against, write_cache)
from calib.errors import CacheError
from calib.quantize.model import inspect_model
from conftest import golden


def test_hex_is_big_endian_float32_of_amax_over_127():
    assert amax_to_hex(127.0) == "3f800000"
    assert amax_to_hex(1.0) == struct.pack(">f", np.float32(1 / 127)).hex()


def test_format_matches_tensorrt_bytes():
    trt = golden("cnn", "int8-minmax.cache").read_text()
    c = parse_cache(trt)
    assert format_cache(c.amaxes(), c.version, c.carrier) == trt


@pytest.mark.parametrize("f", ["cnn/int8-entropy2.cache", "cnn/int8-minmax.cache", "mobilenet_v2/entropy2.cache",
                               "mobilenet_v2/minmax.cache"])
def test_reads_tensorrt_caches(f):
    c = read_cache(golden(*f.split("/")))
    assert c.version == "8600" and len(c.scales) >= 14
    assert all(s > 0 for s in c.scales.values())


def test_trt_internal_names_accepted_unknown_rejected():
    info = inspect_model(golden("cnn", "cnn.onnx"))
    c = read_cache(golden("cnn", "int8-entropy2.cache"))
    internal = validate_against(c, info.activations)
    assert len(internal) == 4 and all(n.startswith("(Unnamed Layer*") for n in internal)
    bad = parse_cache(c.header + "\nnot_a_tensor: 3c010204\n")
    with pytest.raises(CacheError, match="'not_a_tensor' is not in the model"):
        validate_against(bad, info.activations)
    validate_against(bad, info.activations, allow_unknown=True)


@pytest.mark.parametrize("text,msg", [
    ("", "empty file"),
    ("TRT-86-\nx: 00000000\n", "line 1"),
    ("TRT-8600-EntropyCalibration2\nx 3c010204\n", "line 2"),
    ("TRT-8600-EntropyCalibration2\nx: 7fc00000\n", "tensor 'x' has scale nan"),
    ("TRT-8600-EntropyCalibration2\nx: bc010204\n", "tensor 'x' has scale -"),
    ("TRT-8600-EntropyCalibration2\nx: 3c010204\nx: 3c010204\n", "appears twice"),
])
def test_malformed_caches(text, msg):
    with pytest.raises(CacheError, match=msg):
        parse_cache(text)


def test_binary_and_missing_files(tmp_path):
    (tmp_path / "b.cache").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CacheError, match="binary"):
        read_cache(tmp_path / "b.cache")
    with pytest.raises(CacheError, match="not found"):
        read_cache(tmp_path / "none.cache")


def test_write_rejects_nonfinite(tmp_path):
    with pytest.raises(CacheError, match="tensor 'a'"):
        write_cache(tmp_path / "x.cache", {"a": float("nan")})
    assert not (tmp_path / "x.cache").exists()
    with pytest.raises(CacheError, match="header algorithm"):
        format_cache({"a": 1.0}, carrier="Bogus")


def test_hash_mismatch(tmp_path):
    p = write_cache(tmp_path / "e.cache", {"a": 1.0})
    (tmp_path / "e.json").write_text(json.dumps({"algorithm": "entropy", "amax": {"a": 1.0}, "model_sha256": "ab" * 32}))
    with pytest.raises(CacheError, match="--ignore-hash"):
        check_model_hash(p, "cd" * 32)
    assert check_model_hash(p, "cd" * 32, override=True)["algorithm"] == "entropy"


def test_reads_tensorrt_bits_without_leading_zeros():
    """TensorRT 8.6 wrote 'negonly_relu: 0' for a ReLU output that was zero on every batch (a probe network on an
    H200) and '(Unnamed Layer* 269) [Constant]_output: 0' in YOLOv8n's EntropyCalibration2 cache: the bits are
    written without leading zeros."""
    c = parse_cache("TRT-8600-EntropyCalibration2\nnegonly_relu: 0\n(Unnamed Layer* 269) [Constant]_output: 0\n"
                    "x: 3c010204\n")
    assert c.scales["negonly_relu"] == 0.0 and c.scales["(Unnamed Layer* 269) [Constant]_output"] == 0.0
    assert c.scales["x"] == hex_to_scale("3c010204")
    for cut in ("3c0102040", "3c0102", "1"):  # a line cut short (or run on) is not a scale
        with pytest.raises(CacheError, match="line 2"):
            parse_cache(f"TRT-8600-EntropyCalibration2\nx: {cut}\n")
