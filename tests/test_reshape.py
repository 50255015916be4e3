"""--input-shape past a dimension the model fixes (a placeholder batch of 10, a 32x32 image): taken where the graph
checks and runs at the new shape, said, and the caches and Q/DQ model are for the model at that shape; refused in
one line where it does not hold. A run whose images shrink more than 4x to the model's fixed input says so."""
import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.cli import main
from calib.errors import ModelError
from calib.quantize.model import inspect_model
from calib.quantize.shapes import fix_input_shapes
from calib.runners.reshape import reshape_model
from nets import conv_net, image_folder


def invoke(*args):
    return CliRunner().invoke(main, [*map(str, args)])


def flat_classifier(path, dims=(10, 3, 32, 32)):
    """Conv -> Flatten -> Gemm whose weight fixes the flattened size: it runs at 32x32 only."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (2, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.3, (2 * 32 * 32, 5)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["images", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("images", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [dims[0], 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_a_fixed_placeholder_shape_is_overridden_where_the_graph_runs(tmp_path):
    model = conv_net(tmp_path / "b10.onnx", [10, 3, 32, 32])
    info = fix_input_shapes(inspect_model(model), {"images": (1, 3, 64, 48)}, "--input-shape", override=True)
    assert info.overridden == (("images", 0, 10, 1), ("images", 2, 32, 64), ("images", 3, 32, 48))
    path, info2 = reshape_model(model, info, "--input-shape")
    m = onnx.load(str(path))
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 48]
    assert info2.sha256 != info.sha256 and info2.activations == info.activations
    assert reshape_model(path, info2)[0] == path  # at that shape already: nothing more


def test_a_shape_the_graph_does_not_hold_is_refused_in_one_line(tmp_path):
    model = flat_classifier(tmp_path / "fc.onnx")
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 64, 64), np.float32))
    r = invoke("--quiet", "calibrate", model, "--data", tmp_path / "x.npy", "--input-shape", "images=1x3x64x64",
               "-o", tmp_path / "c")
    assert r.exit_code == 2, r.output
    line, = r.output.strip().splitlines()
    assert line.startswith("error: --input-shape images=1x3x64x64: dimension 0 of input 'images' is fixed at 10 by "
                           "the model, and the model does not run at the given shape: ")
    assert not (tmp_path / "c").exists()
    info = fix_input_shapes(inspect_model(model), {"images": (1, 3, 32, 32)}, override=True)
    assert reshape_model(model, info)[1].overridden == (("images", 0, 10, 1),)  # the batch alone: it runs
    try:
        fix_input_shapes(inspect_model(model), {"images": (1, 3, 32, 32)}, "--input-shape")
    except ModelError as e:  # without override (calib recover's own callers): refused as before
        assert "fixed at 10" in str(e)
    else:
        raise AssertionError("a fixed dimension was taken without override")


def test_calibrate_and_evaluate_at_the_overridden_shape_from_the_cli(tmp_path):
    model = conv_net(tmp_path / "b10.onnx", [10, 3, 32, 32])
    imgs = image_folder(tmp_path / "imgs", [(64, 64)] * 13)
    args = ["--data", imgs, "--input-shape", "images=1x3x64x64"]
    r = invoke("calibrate", model, *args, "--algo", "minmax", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert ("--input-shape overrides what the model fixes: input 'images' dimension 0 (10 -> 1), dimension 2 "
            "(32 -> 64), dimension 3 (32 -> 64)") in r.output
    side = json.loads((tmp_path / "c" / "minmax.json").read_text())
    assert side["samples"] == 13  # not 10 of them in one fixed batch
    m = onnx.load(str(tmp_path / "c" / "b10.reshaped.onnx"))
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]
    r = invoke("--quiet", "evaluate", model, "--cache", tmp_path / "c" / "minmax.cache", *args, "-o",
               tmp_path / "e")
    assert r.exit_code == 0, r.output  # the same model at the same shape: the cache's hash matches
    assert json.loads((tmp_path / "e" / "report.json").read_text())["evaluation"]["samples"] == 13


def _recipe(tmp_path, shapes: str = "") -> str:
    (tmp_path / "r.yaml").write_text(
        "name: s\nmodel: b10.onnx\ncalibration_data: {kind: folder, path: imgs}\n"
        "calibration: {algorithms: [minmax], batch_size: 4}\n" + shapes + "output: out\n")
    return str(tmp_path / "r.yaml")


def test_run_writes_the_qdq_model_at_the_shape_and_notes_tiny_inputs(tmp_path):
    conv_net(tmp_path / "b10.onnx", [10, 3, 8, 8])
    image_folder(tmp_path / "imgs", [(64, 64)] * 20)
    r = invoke("--quiet", "run", _recipe(tmp_path))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "scaled down 8.0x (median, per side) to the model's fixed 8x8 input" in rep["input_notes"][0]
    assert "scaled down 8.0x" in (tmp_path / "out" / "report.md").read_text()
    r = invoke("--quiet", "run", _recipe(tmp_path, "input_shapes: {images: [1, 3, 64, 64]}\n"), "--out",
               tmp_path / "o2")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o2" / "report.json").read_text())
    assert rep["input_notes"] == ["input_shapes overrides what the model fixes: input 'images' dimension 0 (10 -> 1), "
                                  "dimension 2 (8 -> 64), dimension 3 (8 -> 64); the caches and Q/DQ model are for "
                                  "the model at that shape (b10.reshaped.onnx)"]  # and no note of shrunk images
    assert "b10.reshaped.onnx" in rep["files"]
    q = onnx.load(str(tmp_path / "o2" / rep["qdq_model"]))
    assert [d.dim_value for d in q.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]


def test_convert_given_the_users_model_uses_calibs_reshaped_copy(tmp_path):
    model = conv_net(tmp_path / "b10.onnx", [10, 3, 32, 32])
    imgs = image_folder(tmp_path / "imgs", [(64, 64)] * 6)
    r = invoke("calibrate", model, "--data", imgs, "--input-shape", "images=1x3x64x64", "--algo", "minmax",
               "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    side = json.loads((tmp_path / "c" / "minmax.json").read_text())
    d = side["extra"]["derived_from"]
    assert (d["model"], d["file"], d["how"]) == ("b10.onnx", "b10.reshaped.onnx", "reshaped at images=1x3x64x64")
    r = invoke("cache", "convert", tmp_path / "c" / "minmax.cache", "--model", model, "--to", "qdq",
               "-o", tmp_path / "q.onnx")
    assert r.exit_code == 0, r.output
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert [d.dim_value for d in q.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]
    r = invoke("cache", "inspect", tmp_path / "c" / "minmax.cache", "--model", model)
    assert r.exit_code == 0, r.output
    # the copy gone: one line naming the file to pass, nothing written
    (tmp_path / "c" / "b10.reshaped.onnx").rename(tmp_path / "elsewhere.onnx")
    r = invoke("--quiet", "cache", "convert", tmp_path / "c" / "minmax.cache", "--model", model, "--to", "qdq",
               "-o", tmp_path / "q2.onnx")
    assert r.exit_code == 2, r.output
    line, = r.output.strip().splitlines()
    assert line.endswith("is for " + str(model) + " reshaped at images=1x3x64x64 by calib calibrate, whose copy "
                         "b10.reshaped.onnx is not beside the cache: pass --model that file")
    assert not (tmp_path / "q2.onnx").exists()
    r = invoke("--quiet", "cache", "convert", tmp_path / "c" / "minmax.cache", "--model", tmp_path / "elsewhere.onnx",
               "--to", "qdq", "-o", tmp_path / "q3.onnx")
    assert r.exit_code == 0, r.output
