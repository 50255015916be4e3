"""A cache is never applied silently to the wrong model or with the wrong values: sidecars checked, partial caches
refused, reads bounded, a garbage search cache ignored."""
import json
import shutil
import time

import numpy as np
import pytest
from click.testing import CliRunner

from calib.cli import main
from conftest import conv_relu_gap
from reliability.test_bad_inputs import one_line_failure


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def made(tmp_path):
    """Two calib runs on different data (a, b) of one model, and a second model with the same tensor names."""
    conv_relu_gap(tmp_path / "m.onnx")
    conv_relu_gap(tmp_path / "other.onnx", seed=1)
    rng = np.random.default_rng(0)
    for name, k in (("a", 1), ("b", 3)):
        np.save(tmp_path / f"{name}.npy", rng.random((6, 3, 8, 8), dtype=np.float32) * k)
        r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / f"{name}.npy", "--algo", "minmax",
                   "--out", tmp_path / name)
        assert r.exit_code == 0, r.output
    return tmp_path


def uses(t, cache, *extra):
    """Every command that reads a cache, checked against the model."""
    m = t / "m.onnx"
    return [
        ["cache", "convert", cache, "--model", m, "--to", "qdq", "-o", t / "q.onnx", *extra],
        ["cache", "convert", cache, "--model", m, "--to", "cache", "-o", t / "c2.cache", *extra],
        ["cache", "inspect", cache, "--model", m, *extra],
        ["evaluate", m, "--cache", cache, "--data", t / "a.npy", "-o", t / "rep", *extra],
        ["build", m, "--cache", cache, "-o", t / "m.engine", *extra],  # refused before TensorRT is needed
    ]


@pytest.mark.parametrize("content", ["null", "42", "garbage{", "[]", '"text"',
                                     '{"algorithm": "minmax", "amax": null, "model_sha256": "x"}',
                                     '{"algorithm": 7, "amax": {}, "model_sha256": "x"}',
                                     '{"algorithm": "minmax", "amax": {"input": "big"}, "model_sha256": "x"}'])
def test_malformed_sidecar_is_named(made, content):
    (made / "a" / "minmax.json").write_text(content)
    for args in uses(made, made / "a" / "minmax.cache"):
        one_line_failure(invoke(*args), "minmax.json")
    assert not (made / "q.onnx").exists() and not (made / "c2.cache").exists() and not (made / "rep").exists()


def test_sidecar_of_another_run_is_refused(made):
    shutil.copy(made / "b" / "minmax.json", made / "a" / "minmax.json")
    for args in uses(made, made / "a" / "minmax.cache"):
        one_line_failure(invoke(*args), "minmax.json", "disagrees", "--ignore-sidecar")
    r = invoke(*uses(made, made / "a" / "minmax.cache", "--ignore-sidecar")[0])
    assert r.exit_code == 0, r.output


def test_deleted_sidecar_of_a_calib_cache_is_noticed(made):
    (made / "a" / "minmax.json").unlink()
    for args in uses(made, made / "a" / "minmax.cache"):
        one_line_failure(invoke(*args), "minmax.json", "missing", "--ignore-sidecar")
    assert invoke(*uses(made, made / "a" / "minmax.cache", "--ignore-sidecar")[0]).exit_code == 0


def test_cache_cut_short_is_refused(made):
    """A calib cache cut to a few tensors (its folder's manifest knows), and a TensorRT cache cut likewise."""
    cache = made / "a" / "minmax.cache"
    lines = cache.read_text().splitlines(keepends=True)
    cache.write_text("".join(lines[:3]))
    for args in uses(made, cache):
        one_line_failure(invoke(*args), "minmax.cache")
    trt = made / "trt.cache"  # no sidecar, no manifest: TensorRT's own, names checked, coverage too
    trt.write_text("".join(lines[:3]))
    for args in uses(made, trt):
        one_line_failure(invoke(*args), "trt.cache", "no scale for", "--allow-partial")
    trt.write_text(lines[0])  # the header alone
    one_line_failure(invoke(*uses(made, trt)[0]), "trt.cache", "no scale for")
    r = invoke(*uses(made, trt, "--allow-partial")[0])
    assert r.exit_code == 0, r.output


def test_trt_cache_without_sidecar_says_only_names_were_checked(made):
    shutil.copy(made / "a" / "minmax.cache", made / "trt.cache")
    r = invoke(*uses(made, made / "trt.cache")[0])
    assert r.exit_code == 0 and "only its tensor names were checked" in r.output


def test_converted_cache_has_a_sidecar_and_refuses_another_model(made):
    conv = made / "conv.cache"
    r = invoke("cache", "convert", made / "a" / "minmax.cache", "--model", made / "m.onnx", "--to", "cache",
               "--carrier", "MinMaxCalibration", "-o", conv)
    assert r.exit_code == 0, r.output
    side = json.loads((made / "conv.json").read_text())
    assert side["algorithm"] == "minmax" and side["carrier"] == "MinMaxCalibration"
    args = ["cache", "convert", conv, "--model", made / "other.onnx", "--to", "qdq", "-o", made / "q.onnx"]
    one_line_failure(invoke(*args), "conv.json", "--ignore-hash")
    assert invoke(*args, "--ignore-hash").exit_code == 0
    # a TensorRT cache converted gets a sidecar naming the model it was checked against
    shutil.copy(made / "a" / "minmax.cache", made / "trt.cache")
    assert invoke("cache", "convert", made / "trt.cache", "--model", made / "m.onnx", "--to", "cache", "-o",
                  made / "trt2.cache").exit_code == 0
    one_line_failure(invoke("cache", "convert", made / "trt2.cache", "--model", made / "other.onnx", "--to", "qdq",
                            "-o", made / "q2.onnx"), "trt2.json")


def test_interrupted_convert_keeps_the_previous_pair(made, monkeypatch):
    """cache convert writes both files before replacing either: a full disk changes nothing, and a run killed
    between the two renames gets the previous pair back at the next read."""
    import os

    import calib.io.files as cio

    out = made / "conv.cache"
    src = ["cache", "convert", made / "a" / "minmax.cache", "--model", made / "m.onnx", "--to", "cache", "-o", out]
    assert invoke(*src).exit_code == 0
    before = (out.read_bytes(), out.with_suffix(".json").read_bytes())
    src[2] = made / "b" / "minmax.cache"
    real_stage = cio._stage_bytes
    calls = []

    def full_at_second(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        return real_stage(path, data)

    monkeypatch.setattr(cio, "_stage_bytes", full_at_second)
    one_line_failure(invoke(*src), "conv", "No space left")
    monkeypatch.setattr(cio, "_stage_bytes", real_stage)
    assert (out.read_bytes(), out.with_suffix(".json").read_bytes()) == before
    assert not [p for p in made.iterdir() if p.name.endswith(".tmp")]

    real_replace, renames = os.replace, []

    def killed_after_first(a, b):
        renames.append(b)
        if len(renames) == 2:
            raise KeyboardInterrupt  # the process dies between the sidecar's rename and the cache's
        return real_replace(a, b)

    monkeypatch.setattr(cio.os, "replace", killed_after_first)
    invoke(*src)
    monkeypatch.setattr(cio.os, "replace", real_replace)
    assert out.read_bytes() == before[0] and out.with_suffix(".json").read_bytes() != before[1]  # mixed on disk
    r = invoke("cache", "inspect", out)  # the next read puts the previous pair back
    assert r.exit_code == 0, r.output
    assert (out.read_bytes(), out.with_suffix(".json").read_bytes()) == before
    assert not [p for p in made.iterdir() if p.name.endswith(cio.PREV)]


def test_dev_zero_as_a_cache_fails_fast(made):
    t0 = time.perf_counter()
    for args in uses(made, "/dev/zero")[:3]:
        one_line_failure(invoke(*args), "/dev/zero", "not a regular file")
    one_line_failure(invoke("cache", "diff", "/dev/zero", made / "a" / "minmax.cache"), "/dev/zero")
    assert time.perf_counter() - t0 < 30


def test_dev_zero_as_a_sidecar_fails_fast(made):
    (made / "a" / "minmax.json").unlink()
    (made / "a" / "minmax.json").symlink_to("/dev/zero")
    one_line_failure(invoke(*uses(made, made / "a" / "minmax.cache")[0]), "minmax.json", "not a regular file")


@pytest.mark.parametrize("content", [b"[]", b"42", b"null", b"\x00\xff garbage", b'{"key": 1}',
                                     b'{"key": "k", "ranking": 3, "found": {}, "per_tensor": null, "split": {}}'])
def test_garbage_search_cache_is_ignored_with_a_warning(tmp_path, content, caplog):
    from calib.search.sensitivity import SEARCH_CACHE, _cached_search

    (tmp_path / SEARCH_CACHE).write_bytes(content)
    assert _cached_search(tmp_path, "k") is None
    assert any(SEARCH_CACHE in r.getMessage() for r in caplog.records)


def test_convert_onto_a_published_cache_keeps_it_usable(made, tmp_path):
    """Converting a cache onto itself is refused (an input is never overwritten); onto another cache of a
    published folder, the folder's manifest follows, so readers still take it for calib's."""
    cache = made / "a" / "minmax.cache"
    one_line_failure(invoke("cache", "convert", cache, "--model", made / "m.onnx", "--to", "cache", "--carrier",
                            "MinMaxCalibration", "-o", cache), "minmax.cache", "input")
    assert invoke("cache", "inspect", cache, "--model", made / "m.onnx").exit_code == 0
    copy = tmp_path / "copy.cache"
    copy.write_bytes(cache.read_bytes())
    (tmp_path / "copy.json").write_bytes((made / "a" / "minmax.json").read_bytes())
    r = invoke("cache", "convert", copy, "--model", made / "m.onnx", "--to", "cache", "--carrier",
               "MinMaxCalibration", "-o", cache)
    assert r.exit_code == 0, r.output
    r = invoke("cache", "inspect", cache, "--model", made / "m.onnx")
    assert r.exit_code == 0 and "TRT-8600-MinMaxCalibration" in r.output, r.output


def test_cache_diff_checks_the_sidecars_too(made):
    """cache diff reads calib caches the same way: a sidecar from another run is named, unless overridden."""
    a = made / "a" / "minmax.cache"
    side = json.loads((made / "a" / "minmax.json").read_text())
    first = next(iter(side["amax"]))
    side["amax"][first] *= 2
    (made / "a" / "minmax.json").write_text(json.dumps(side))
    one_line_failure(invoke("cache", "diff", a, a), "minmax.json", "disagrees", "--ignore-sidecar")
    assert invoke("cache", "diff", a, a, "--ignore-sidecar").exit_code == 0


def test_python_api_checks_cache_paths_like_the_cli(made):
    """calib.evaluate(model, {name: path}, ...) refuses a cache whose sidecar is another run's, as the CLI does."""
    from calib.data.arrays import ArraySource
    from calib.errors import CacheError
    from calib.evaluate.api import evaluate
    from calib.quantize.cachecheck import CacheChecks

    x = np.load(made / "a.npy")
    src = ArraySource(x, "input", 3)
    ok = evaluate(made / "m.onnx", {"a": made / "a" / "minmax.cache"}, src, layerwise=False)
    assert "a" in ok["configs"]
    shutil.copy(made / "b" / "minmax.json", made / "a" / "minmax.json")
    with pytest.raises(CacheError, match="disagrees"):
        evaluate(made / "m.onnx", {"a": made / "a" / "minmax.cache"}, src, layerwise=False)
    r = evaluate(made / "m.onnx", {"a": made / "a" / "minmax.cache"}, src, layerwise=False,
                 checks=CacheChecks(ignore_sidecar=True))
    assert "a" in r["configs"]
