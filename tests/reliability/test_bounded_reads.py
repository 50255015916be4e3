"""Every text/JSON input is read bounded: a device, a FIFO, a file past its size limit or JSON nested 100,000 deep
is one error line naming the file (and the limit), never a read until memory runs out, a hang or a RecursionError."""
import json
import os
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from calib.cli import main
from calib.data.labels import category_map
from calib.errors import CalibError, DataError
from conftest import conv_relu_gap
from reliability.test_bad_inputs import no_files, one_line_failure

DEEP = "[" * 100_000 + "]" * 100_000


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def work(tmp_path):
    """A tiny model, a calibration made with it, a folder of four images and a valid COCO json over them."""
    conv_relu_gap(tmp_path / "m.onnx")
    np.save(tmp_path / "a.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    r = invoke("--quiet", "calibrate", tmp_path / "m.onnx", "--data", tmp_path / "a.npy", "--algo", "minmax",
               "--out", tmp_path / "c")
    assert r.exit_code == 0, r.output
    (tmp_path / "imgs").mkdir()
    for i in range(4):
        Image.new("RGB", (12, 10), (i * 40, 0, 0)).save(tmp_path / "imgs" / f"{i}.png")
    return tmp_path


def coco_run(t, ann):
    return invoke("--quiet", "calibrate", t / "m.onnx", "--data", ann, "--images", t / "imgs", "--resize", "8x8",
                  "--preprocess", "unit", "--algo", "minmax", "--out", t / "out")


def unblock_fifo_readers(path, seconds=10.0):
    """Open the FIFO for writing and close it as soon as a reader waits, so that a reader that blocked on it gets
    end-of-file instead of hanging the test (the fixed code never blocks)."""
    def writer():
        end = time.monotonic() + seconds
        while time.monotonic() < end and path.exists():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:
                time.sleep(0.05)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    return t


def test_dev_zero_as_coco_annotations(work):
    (work / "ann.json").symlink_to("/dev/zero")
    one_line_failure(coco_run(work, work / "ann.json"), "ann.json", "not a regular file")
    assert no_files(work / "out")


def test_fifo_as_coco_annotations_does_not_block(work):
    os.mkfifo(work / "ann.json")
    t = unblock_fifo_readers(work / "ann.json")
    one_line_failure(coco_run(work, work / "ann.json"), "ann.json", "not a regular file")
    (work / "ann.json").unlink()
    t.join()


def test_coco_annotations_past_the_size_limit(work):
    with open(work / "ann.json", "wb") as fh:  # sparse: no disk space, no memory
        fh.truncate((2 << 30) + 1)
    one_line_failure(coco_run(work, work / "ann.json"), "ann.json", "COCO annotations larger than 2 GiB")


def test_deep_coco_annotations(work):
    (work / "ann.json").write_text(DEEP)
    one_line_failure(coco_run(work, work / "ann.json"), "ann.json", "nested deeper than 100 levels")


def test_dev_zero_as_layer_precisions_file(work):
    r = invoke("build", work / "m.onnx", "--precision", "fp16", "--layer-precisions-file", "/dev/zero",
               "-o", work / "m.engine")
    one_line_failure(r, "/dev/zero", "layer precisions file is not a regular file")
    assert not (work / "m.engine").exists()


def test_layer_precisions_file_past_the_size_limit(work):
    with open(work / "lp.txt", "wb") as fh:
        fh.truncate((16 << 20) + 1)
    r = invoke("build", work / "m.onnx", "--precision", "fp16", "--layer-precisions-file", work / "lp.txt",
               "-o", work / "m.engine")
    one_line_failure(r, "lp.txt", "layer precisions file larger than 16 MiB")


@pytest.mark.parametrize("content", ["/dev/zero", DEEP])
def test_engine_layers_for_evaluate(work, content):
    side = work / "e.json"
    side.symlink_to(content) if content.startswith("/") else side.write_text(content)
    r = invoke("evaluate", work / "m.onnx", "--cache", work / "c" / "minmax.cache", "--data", work / "a.npy",
               "--engine-layers", side, "-o", work / "rep")
    one_line_failure(r, "e.json", "not a regular file" if content.startswith("/") else "nested deeper than")
    assert no_files(work / "rep")


@pytest.mark.parametrize("content", ["/dev/zero", DEEP])
def test_like_engine_json(work, content):
    side = work / "e.json"
    side.symlink_to(content) if content.startswith("/") else side.write_text(content)
    r = invoke("cache", "convert", work / "c" / "minmax.cache", "--model", work / "m.onnx", "--to", "qdq",
               "--like-engine", side, "-o", work / "q.onnx")
    one_line_failure(r, "e.json", "not a regular file" if content.startswith("/") else "nested deeper than")
    assert not (work / "q.onnx").exists()


def test_deep_sidecar(work):
    (work / "c" / "minmax.json").write_text(DEEP)
    r = invoke("cache", "inspect", work / "c" / "minmax.cache", "--model", work / "m.onnx")
    one_line_failure(r, "minmax.json", "nested deeper than")


@pytest.mark.parametrize("content", ["/dev/zero", DEEP])
def test_sources_json_of_an_image_folder(work, content):
    side = work / "imgs" / "sources.json"
    side.symlink_to(content) if content.startswith("/") else side.write_text(content)
    r = invoke("--quiet", "calibrate", work / "m.onnx", "--data", work / "imgs", "--resize", "8x8", "--preprocess",
               "unit", "--algo", "minmax", "--out", work / "out")
    one_line_failure(r, "sources.json", "not a regular file" if content.startswith("/") else "nested deeper than")
    assert no_files(work / "out")


def test_category_map_file_limits(tmp_path):
    big = tmp_path / "map.json"
    with open(big, "wb") as fh:
        fh.truncate((16 << 20) + 1)
    with pytest.raises(DataError, match="category_map_file larger than 16 MiB"):
        category_map("auto", [1], "ann.json", str(big))
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    with pytest.raises(DataError, match="nested deeper than"):
        category_map("auto", [1], "ann.json", str(deep))
    yaml_deep = tmp_path / "deep.yaml"
    yaml_deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="deep.yaml"):
        category_map("auto", [1], "ann.json", str(yaml_deep))
    dev = tmp_path / "dev.yaml"
    dev.symlink_to("/dev/zero")
    with pytest.raises(DataError, match="not a regular file"):
        category_map("auto", [1], "ann.json", str(dev))


def test_depth_limit_is_exact(tmp_path):
    from calib.io.reading import MAX_DEPTH, read_json

    ok, deep = tmp_path / "ok.json", tmp_path / "deep.json"
    ok.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    deep.write_text("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert read_json(ok, 1 << 20) is not None
    with pytest.raises(CalibError, match=f"deep.json: JSON file nested deeper than {MAX_DEPTH} levels"):
        read_json(deep, 1 << 20)
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps({"a": [[1]] * 10000}))
    assert len(read_json(wide, 1 << 20)["a"]) == 10000


@pytest.mark.parametrize("content", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
                                     b"[" * 1000 + b"]" * 1000, b"[" * 100_000])
def test_deep_search_cache_is_read_through_the_bounded_reader(tmp_path, content, caplog):
    from calib.search.sensitivity import SEARCH_CACHE, _cached_search

    (tmp_path / SEARCH_CACHE).write_bytes(content)
    assert _cached_search(tmp_path, "k") is None
    assert any(SEARCH_CACHE in r.getMessage() for r in caplog.records)


def test_deep_search_cache_in_the_sensitivity_folder(tmp_path):
    """A search-cache.json nested 100,000 deep in the output folder gave a RecursionError traceback."""
    from reliability.test_bad_inputs import TINY, snapshot

    conv_relu_gap(tmp_path / "tiny.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((8, 3, 8, 8), dtype=np.float32))
    (tmp_path / "r.yaml").write_text(TINY.format(kind="npy", path="x.npy").replace(
        "preprocess: {resize: [8, 8], mode: exact}\n", "") + "sensitivity: {samples: 4}\n")
    r = invoke("--quiet", "sensitivity", tmp_path / "r.yaml")
    assert r.exit_code == 0, r.output
    cache = tmp_path / "out" / "sensitivity" / "search-cache.json"
    cache.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    before = snapshot(tmp_path)
    r = invoke("--quiet", "sensitivity", tmp_path / "r.yaml")
    one_line_failure(r, "search-cache.json")
    assert r.exit_code == 2 and "Recursion" not in r.output and snapshot(tmp_path) == before
