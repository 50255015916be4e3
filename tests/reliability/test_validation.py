"""Recipes, CLI values and models checked before any work: one line naming the key or file, nothing written."""
import time

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import calib.calibrate as cal
from calib.cli import main
from calib.errors import CalibError
from reliability.test_bad_inputs import TINY, no_files, one_line_failure, workdir  # noqa: F401  (fixture)


@pytest.fixture
def no_pass(monkeypatch):
    """Any statistics pass is a failure here: every check must come first."""
    def boom(*a, **k):
        raise AssertionError("a pass over the data started before the bad value was found")

    import calib.pipeline
    import calib.search.sensitivity  # imported first: they take `collect` from calib.calibrate at import

    monkeypatch.setattr(cal, "collect", boom)
    monkeypatch.setattr(calib.pipeline, "collect", boom)
    monkeypatch.setattr(calib.search.sensitivity, "collect", boom)


def run(tmp, *args, text=None, command="run"):
    (tmp / "r.yaml").write_text(text if text is not None else TINY.format(kind="folder", path="imgs"))
    return CliRunner().invoke(main, ["--quiet", command, str(tmp / "r.yaml"), *args])


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi")) + "name: *i\n"


def test_alias_bomb_is_refused_quickly(workdir, no_pass):  # noqa: F811
    t0 = time.perf_counter()
    one_line_failure(run(workdir, text=BILLION_LAUGHS), "r.yaml", "aliases are expanded")
    assert time.perf_counter() - t0 < 10


def test_many_aliases_and_recursive_aliases_are_refused(workdir, no_pass):  # noqa: F811
    one_line_failure(run(workdir, text="a: &a [1]\nb: [" + ", ".join(["*a"] * 1500) + "]\n"), "r.yaml", "aliases")
    one_line_failure(run(workdir, text="a: &a [1, *a]\n"), "r.yaml")


def test_aliases_within_bounds_still_work(workdir):  # noqa: F811
    text = TINY.format(kind="folder", path="imgs").replace("calibration_data: {kind: folder, path: imgs}",
                                                           "calibration_data: &cal {kind: folder, path: imgs}")
    from calib.recipe import load_recipe

    (workdir / "r.yaml").write_text(text + "evaluation_data: *cal\n")
    r = load_recipe(workdir / "r.yaml")
    assert r.evaluation_data == r.calibration_data


@pytest.mark.parametrize("text,key", [
    ("name: a\nname: b\n", "'name'"),
    ("calibration: {batch_size: 4, batch_size: 8}\n", "'batch_size'"),
])
def test_duplicate_keys_are_refused(workdir, no_pass, text, key):  # noqa: F811
    base = TINY.format(kind="folder", path="imgs").replace("name: tiny\n", "").replace(
        "calibration: {algorithms: [minmax, entropy], batch_size: 4}\n", "")
    r = run(workdir, text=base + text)
    one_line_failure(r, "r.yaml", "duplicate key", key, "line")


@pytest.mark.parametrize("setting,key", [
    ("calibration.batch_size=0", "calibration.batch_size"),
    ("calibration.batch_size=-3", "calibration.batch_size"),
    ("evaluation.batch_size=0", "evaluation.batch_size"),
    ("backend.batch_size=0", "backend.batch_size"),
    ("calibration_data.limit=0", "calibration_data.limit"),
    ("calibration_data.limit=-1", "calibration_data.limit"),
    ("calibration_data.offset=-1", "calibration_data.offset"),
    ("calibration_data.seed=-1", "calibration_data.seed"),
    ("calibration_data.max_bad=2", "calibration_data.max_bad"),
    ("calibration_data.max_pixels=0", "calibration_data.max_pixels"),
    ("calibration_data.path=", "calibration_data.path"),
    ("calibration_data.path=' '", "calibration_data.path"),
    ("model=", "model"),
    ("output=", "output"),
    ("calibration.algorithms=[minmax, kl]", "calibration.algorithms[1]"),
    ("calibration.algorithms=[]", "calibration.algorithms"),
    ("calibration.percentile=150", "calibration.percentile"),
    ("calibration.percentile=0", "calibration.percentile"),
    ("calibration.percentile=.nan", "calibration.percentile"),
    ("calibration.trt_version=8.6", "calibration.trt_version"),
    ("preprocess.resize=[0, 0]", "preprocess.resize[0]"),
    ("preprocess.resize=[8, 8, 8]", "preprocess.resize"),
    ("preprocess.crop=[-1]", "preprocess.crop[0]"),
    ("preprocess.std=[0.2, 0, 0.2]", "preprocess.std[1]"),
    ("preprocess.std=0", "preprocess.std[0]"),
    ("preprocess.scale=0", "preprocess.scale"),
    ("preprocess.pad_value=300", "preprocess.pad_value"),
    ("evaluation.detection.iou_threshold=1.5", "evaluation.detection.iou_threshold"),
    ("sensitivity.algorithm=kl", "sensitivity.algorithm"),
    ("sensitivity.per_tensor=[mse, kl]", "sensitivity.per_tensor[1]"),
    ("sensitivity.samples=0", "sensitivity.samples"),
    ("backend.optimization_level=9", "backend.optimization_level"),
    ("backend.layerwise=[kl]", "backend.layerwise[0]"),
])
def test_bad_values_are_refused_before_any_work(workdir, no_pass, setting, key):  # noqa: F811
    for command in ("run", "sensitivity"):
        r = run(workdir, "--set", setting, command=command)
        one_line_failure(r, "r.yaml", f"{key}:")
        assert no_files(workdir / "out")


def test_cli_values_are_checked_before_any_work(workdir, no_pass):  # noqa: F811
    np.save(workdir / "x.npy", np.zeros((4, 3, 8, 8), np.float32))
    base = ["calibrate", str(workdir / "tiny.onnx"), "--data", str(workdir / "x.npy"), "--out", str(workdir / "c")]
    for extra, needle in ((["--percentile", "150"], "--percentile"), (["--batch-size", "0"], "--batch-size"),
                          (["--algo", "minmax,kl"], "unknown algorithm 'kl'"), (["--algo", ","], "--algo")):
        r = CliRunner().invoke(main, [*base, *extra])
        assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, r.output
        assert no_files(workdir / "c")
    with pytest.raises(CalibError, match="percentile"):
        cal.calibrate(workdir / "tiny.onnx", workdir / "x.npy", ["percentile"], {"percentile": {"percentile": 150}})


def _no_inputs(path):
    g = helper.make_graph([helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", 1, [1], [1.0]))],
                          "g", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g), str(path))


@pytest.mark.parametrize("make,needle", [
    (lambda p: p.write_bytes(b""), "empty file"),
    (lambda p: p.write_text("name: not a model\n" * 20), "ONNX model"),
    (lambda p: p.write_bytes(bytes(range(256)) * 4), "model"),
    (_no_inputs, "no inputs"),
])
def test_bad_model_files_are_named(workdir, make, needle):  # noqa: F811
    make(workdir / "bad.onnx")
    np.save(workdir / "x.npy", np.zeros((4, 3, 8, 8), np.float32))
    r = CliRunner().invoke(main, ["calibrate", str(workdir / "bad.onnx"), "--data", str(workdir / "x.npy"), "--out",
                                  str(workdir / "c")])
    one_line_failure(r, "bad.onnx", needle)
    (workdir / "r.yaml").write_text(TINY.format(kind="folder", path="imgs").replace("tiny.onnx", "bad.onnx"))
    one_line_failure(CliRunner().invoke(main, ["--quiet", "run", str(workdir / "r.yaml")]), "bad.onnx")
    assert no_files(workdir / "c") and no_files(workdir / "out")


def test_nan_in_recipe_data_is_refused_or_skipped_and_reported(workdir):  # noqa: F811
    x = np.random.default_rng(0).random((8, 3, 8, 8), dtype=np.float32)
    x[3, 0, 1, 1] = np.inf
    np.save(workdir / "x.npy", x)
    text = TINY.format(kind="npy", path="x.npy")
    one_line_failure(run(workdir, text=text), "x.npy", "sample 3", "NaN or Inf", "skip_nonfinite")
    assert no_files(workdir / "out")
    r = run(workdir, "--set", "calibration_data.skip_nonfinite=true", text=text)
    assert r.exit_code == 0, r.output
    import json

    report = json.loads((workdir / "out" / "report.json").read_text())
    assert report["calibration"]["nonfinite_left_out"] == ["sample 3 (row 3)"]
    assert report["calibration"]["samples"] == 7
    assert "NaN or Inf" in (workdir / "out" / "run.log").read_text()


@pytest.mark.parametrize("flag,value,needle", [
    ("--input-shape", "images=1x3x2000000000x2000000000", "too small for one sample"),  # int64 product wrapped
    ("--input-shape", "images=1x3x3037000500x3037000500", "too small for one sample"),
    ("--input-shape", "images=4611686018427387904x3x8x8", "too small for one sample"),
    ("--input-shape", "images=1x3x99999999999999999999x32", "int64"),  # past ONNX's dim_value
    ("--input-shape", "images=1x3x9223372036854775808x8", "int64"),
    ("--memory-budget", "1e308TB", "--memory-budget"),  # float infinity once multiplied
    ("--memory-budget", "1e30GB", "--memory-budget"),
    ("--memory-budget", "1e19B", "--memory-budget"),
])
def test_sizes_that_overflow_are_one_line_naming_the_option(tmp_path, flag, value, needle):
    from nets import conv_net

    from reliability.test_bad_inputs import snapshot

    conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 8, 8), np.float32))
    before = snapshot(tmp_path)
    args = ["--input-shape", "images=1x3x8x8", "--memory-budget", "2GB"]
    args[args.index(flag) + 1] = value
    r = CliRunner().invoke(main, ["calibrate", str(tmp_path / "dyn.onnx"), "--data", str(tmp_path / "x.npy"),
                                  "--algo", "minmax", *args, "--out", str(tmp_path / "c")])
    one_line_failure(r, needle, "--memory-budget" if needle == "too small for one sample" else flag)
    assert r.exit_code == 2 and no_files(tmp_path / "c")
    assert snapshot(tmp_path, [tmp_path / "c"]) == before


@pytest.mark.parametrize("setting,key", [
    ("memory_budget=1e308TB", "memory_budget"),
    ("memory_budget=1e30GB", "memory_budget"),
    ("input_shapes={images: 1x3x99999999999999999999x32}", "input_shapes"),
    ("input_shapes={images: [1, 3, 18446744073709551616, 8]}", "input_shapes"),
    ("input_shapes={images: 1x3x2000000000x2000000000}", "memory_budget"),
])
def test_sizes_that_overflow_in_a_recipe_name_the_key(tmp_path, setting, key):
    from nets import conv_net, image_folder

    conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    image_folder(tmp_path / "imgs", [(10, 12)] * 4)
    text = TINY.format(kind="folder", path="imgs").replace("tiny.onnx", "dyn.onnx").replace(
        "preprocess: {resize: [8, 8], mode: exact}\n", "")
    for command in ("run", "sensitivity"):
        r = run(tmp_path, "--set", setting, text=text, command=command)
        one_line_failure(r, key)
        assert r.exit_code == 2 and no_files(tmp_path / "out")


@pytest.mark.parametrize("flag,value", [
    ("--std", "inf"), ("--std", "nan"), ("--std", "1e39"), ("--std", "0.2,inf,0.2"), ("--std", "1e-39"),
    ("--std", "1e-50"), ("--mean", "nan"), ("--mean", "inf"), ("--mean", "-1e39"), ("--mean", "0,0,-inf"),
])
def test_normalization_that_is_not_finite_is_refused_naming_the_flag(workdir, flag, value):  # noqa: F811
    """--std inf gave caches of all-zero scales (exit 0); nan and 1e39 were blamed on the data."""
    from reliability.test_bad_inputs import snapshot

    before = snapshot(workdir)
    for data in ("imgs", "u8.npy"):
        if data == "u8.npy":
            np.save(workdir / "u8.npy", np.full((4, 8, 8, 3), 200, np.uint8))
            before = snapshot(workdir)
        r = CliRunner().invoke(main, ["calibrate", str(workdir / "tiny.onnx"), "--data", str(workdir / data),
                                      "--preprocess", "unit", f"{flag}={value}", "--out", str(workdir / "c")])
        one_line_failure(r, f"error: {flag}:")
        assert r.exit_code == 2 and "skip-nonfinite" not in r.output and no_files(workdir / "c")
        assert snapshot(workdir, [workdir / "c"]) == before


@pytest.mark.parametrize("setting,key", [
    ("preprocess.std=1.0e+39", "preprocess.std[0]"), ("preprocess.std=[0.2, 1.0e-39, 0.2]", "preprocess.std"),
    ("preprocess.std=[0.2, .inf, 0.2]", "preprocess.std[1]"), ("preprocess.std=.nan", "preprocess.std[0]"),
    ("preprocess.mean=[0, -1.0e+39, 0]", "preprocess.mean[1]"), ("preprocess.mean=.inf", "preprocess.mean[0]"),
    ("preprocess.std=1.0e-50", "preprocess.std[0]"), ("preprocess.scale=1.0e+39", "preprocess.scale"),
])
def test_normalization_that_is_not_finite_in_a_recipe_names_the_key(workdir, no_pass, setting, key):  # noqa: F811
    for command in ("run", "sensitivity"):
        r = run(workdir, "--set", setting, command=command)
        one_line_failure(r, "r.yaml", f"{key}:")
        assert r.exit_code == 2 and no_files(workdir / "out")


def _old_model(path, opset: int, first: bool):
    """conv_relu_gap as an old exporter wrote it: IR 3, every initializer listed as a graph input too (before or
    after the data input), at `opset`; ONNX Runtime runs it fed `input` alone."""
    from conftest import conv_relu_gap

    conv_relu_gap(path)
    m = onnx.load(str(path))
    weights = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in m.graph.initializer]
    inputs = list(m.graph.input)
    del m.graph.input[:]
    m.graph.input.extend(weights + inputs if first else inputs + weights)
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("", opset))
    m.ir_version = 3
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("opset,first", [(7, False), (7, True), (9, True), (11, False)])
def test_legal_old_models_take_their_initializers_for_weights(tmp_path, opset, first):
    import onnxruntime as ort

    from reliability.test_bad_inputs import snapshot

    model = _old_model(tmp_path / "old.onnx", opset, first)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((8, 3, 8, 8), dtype=np.float32))
    before = snapshot(tmp_path)
    t = tmp_path

    def ok(*args):
        r = CliRunner().invoke(main, ["--quiet", *map(str, args)])
        assert r.exit_code == 0 and "lacks model input" not in r.output, r.output
        return r

    ok("calibrate", model, "--data", t / "x.npy", "--algo", "minmax,entropy", "--equalize", "--out", t / "c")
    ok("calibrate", model, "--data", t / "x.npy", "--algo", "minmax", "--batch-size", "3", "--out", t / "c2")
    ok("evaluate", model, "--cache", t / "c2" / "minmax.cache", "--data", t / "x.npy", "--float-type", "fp16",
       "--out", t / "e")
    ok("cache", "convert", t / "c2" / "minmax.cache", "--model", model, "--to", "qdq", "-o", t / "q.onnx")
    ok("cache", "convert", t / "c2" / "minmax.cache", "--model", model, "--to", "qdq", "--int8-weights",
       "-o", t / "q8.onnx")
    ok("cache", "migrate", t / "c2" / "minmax.cache", "--model", model, "-o", t / "m.onnx")
    ok("cache", "migrate", t / "c2" / "minmax.cache", "--model", model, "--int8-weights", "-o", t / "m8.onnx")
    written = [t / "q.onnx", t / "q8.onnx", t / "m.onnx", t / "m8.onnx", t / "c" / "old.equalized.onnx"]
    for f in written:
        m = onnx.load(str(f))
        onnx.checker.check_model(m, full_check=True)
        sess = ort.InferenceSession(str(f), providers=["CPUExecutionProvider"])
        assert [i.name for i in sess.get_inputs()] == ["input"], f
        out = sess.run(None, {"input": np.ones((2, 3, 8, 8), np.float32)})[0]
        assert out.shape == (2, 5) and np.isfinite(out).all()
    new = {k for k in snapshot(tmp_path)} - set(before)
    assert all(k.split("/")[0] in {"c", "c2", "e"} or k in {p.name for p in written} for k in new), new
    assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before


@pytest.mark.parametrize("empty", ["", " ", "\t"])
def test_an_empty_output_path_is_refused_naming_the_flag(workdir, empty):  # noqa: F811
    """`-o ''` was refused with a message naming an internal .tmp file (or a traceback, --to cache)."""
    from reliability.test_bad_inputs import snapshot

    t = workdir
    np.save(t / "x.npy", np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    (t / "c.cache").write_text("TRT-8600-EntropyCalibration2\n" + "".join(
        f"{n}: 3c810204\n" for n in ("input", "conv1", "relu1", "pool1", "conv2", "add1", "gap", "flat", "logits")))
    (t / "r.yaml").write_text(TINY.format(kind="folder", path="imgs"))
    before = snapshot(t)
    for args, flag in ((["calibrate", t / "tiny.onnx", "--data", t / "x.npy", "-o", empty], "-o"),
                       (["evaluate", t / "tiny.onnx", "--cache", t / "c.cache", "--data", t / "x.npy", "-o", empty],
                        "-o"),
                       (["cache", "convert", t / "c.cache", "--model", t / "tiny.onnx", "--to", "qdq", "-o", empty],
                        "-o"),
                       (["cache", "convert", t / "c.cache", "--model", t / "tiny.onnx", "--to", "cache", "-o", empty],
                        "-o"),
                       (["cache", "migrate", t / "c.cache", "--model", t / "tiny.onnx", "-o", empty], "-o"),
                       (["build", t / "tiny.onnx", "--precision", "fp16", "-o", empty], "-o"),
                       (["run", t / "r.yaml", "--out", empty], "--out"),
                       (["sensitivity", t / "r.yaml", "--out", empty], "--out")):
        r = CliRunner().invoke(main, ["--quiet", *map(str, args)])
        one_line_failure(r, flag, "empty path")
        assert r.exit_code == 2 and ".tmp" not in r.output and snapshot(t) == before, args


@pytest.mark.parametrize("second", ["images=1x3x9x9", "images=2x3x8x8", "images:1x3x8x16"])
def test_an_input_shape_given_twice_is_refused(tmp_path, second):
    from nets import conv_net

    conv_net(tmp_path / "dyn.onnx", ["N", 3, "H", "W"])
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 8, 8), np.float32))
    r = CliRunner().invoke(main, ["calibrate", str(tmp_path / "dyn.onnx"), "--data", str(tmp_path / "x.npy"),
                                  "--input-shape", "images=1x3x8x8", "--input-shape", second,
                                  "--out", str(tmp_path / "c")])
    one_line_failure(r, "--input-shape", "'images' given twice")
    assert r.exit_code == 2 and no_files(tmp_path / "c")
