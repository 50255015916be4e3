"""Optimization profiles against the TensorRT stand-in: engines built with min/opt/max shapes (one or several
profiles) run any shape inside the chosen profile with outputs equal to ONNX Runtime and refuse shapes outside;
bad profiles are refused before TensorRT builds; calibration runs at profile 0's opt shape; the sidecar, `calib
build`/`calib bench` and a recipe's backend.profiles carry them. The same engine runs on real TensorRT in
tests/gpu/test_profiles_gpu.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

from calib.data.arrays import ArraySource
from calib.deploy.engine_file import bench_engine_file
from calib.errors import CalibError, DataError, RecipeError
from calib.runners.onnxruntime import OrtRunner
from calib.runners.tensorrt.builder import BuildSpec, build, write_engine
from calib.runners.tensorrt.calibrators import make_calibrator
from calib.runners.tensorrt.profiles import ShapeRange, calibration_batch, from_options, normalize
from calib.runners.tensorrt.runner import TrtRunner
from conftest import GOLDEN
from standin.tensorrt import Memory, make_trt
from test_tensorrt_cli import calib_cli

CNN = GOLDEN / "cnn" / "cnn.onnx"  # input [N, 3, 64, 64], N dynamic


def _s(n, hw=64):
    return (n, 3, hw, hw)


P1_8_32 = {"input": (_s(1), _s(8), _s(32))}
P33_40_64 = {"input": (_s(33), _s(40), _s(64))}


@pytest.fixture(scope="module")
def data():
    x = np.load(GOLDEN / "cnn" / "cnn_calib.npy")
    return np.concatenate([x, x[:8] * 0.5])  # 72 samples: enough for batch 64


@pytest.fixture(scope="module")
def ref(data):
    return OrtRunner(CNN).run({"input": data})["logits"]


def _trt(version="8.6.0"):
    mem = Memory()
    return make_trt(version, mem), mem


@pytest.mark.parametrize("version", ["8.6.0", "8.4.0", "10.3.0"])
def test_dynamic_batch_engine_runs_1_8_32_and_refuses_33(version, data, ref):
    trt, mem = _trt(version)
    built = build(CNN, BuildSpec(precisions=("fp32",), profiles=(P1_8_32,)), None, trt, mem)
    prof = trt.builds[-1]["config"].profiles
    assert [p.shapes for p in prof] == [{"input": (_s(1), _s(8), _s(32))}]
    r = TrtRunner(built.plan, trt, mem)
    assert r.execute.v3 == (version != "8.4.0")
    assert r.ranges["input"] == (_s(1), _s(8), _s(32))
    max_sizes = [32 * 10 * 4, 32 * 3 * 64 * 64 * 4]  # device buffers and their pinned host twins: max shape
    assert sorted(len(b) for p, b in mem.blocks.items() if p not in mem.pinned)[-2:] == max_sizes
    assert sorted(len(mem.blocks[p]) for p in mem.pinned) == max_sizes
    copies = mem.async_copies
    for n in (1, 8, 32, 5):
        got = r.run({"input": data[:n]})["logits"]
        assert got.shape == (n, 10)
        np.testing.assert_allclose(got, ref[:n], rtol=1e-5, atol=1e-6)
    assert mem.async_copies == copies + 4 * 2  # one copy in, one out per run, both through pinned memory
    with pytest.raises(DataError, match=r"input 'input' has shape \[33, 3, 64, 64\], outside optimization "
                                        r"profile 0: the engine takes \[1, 3, 64, 64\] to \[32, 3, 64, 64\]"):
        r.run({"input": data[:33]})
    with pytest.raises(DataError, match="outside optimization profile 0"):
        r.run({"input": data[:4, :, :32, :32]})
    r.close()
    assert mem.blocks == {}


@pytest.mark.parametrize("version", ["8.6.0", "8.4.0"])
def test_two_profiles_each_runner_on_its_own(version, data, ref):
    trt, mem = _trt(version)
    built = build(CNN, BuildSpec(precisions=("fp32",), profiles=(P1_8_32, P33_40_64)), None, trt, mem)
    assert built.info["profiles"] == [
        {"input": {"min": list(_s(1)), "opt": list(_s(8)), "max": list(_s(32))}},
        {"input": {"min": list(_s(33)), "opt": list(_s(40)), "max": list(_s(64))}}]
    r = TrtRunner(built.plan, trt, mem, profile=1)
    assert r.profile == 1 and r.context.active_optimization_profile == 1 and r.min_batch["input"] == 33
    for n in (33, 40, 64):
        np.testing.assert_allclose(r.run({"input": data[:n]})["logits"], ref[:n], rtol=1e-5, atol=1e-6)
    assert (1, "input", _s(40)) in r.context.shapes_set  # the shape was set on profile 1's binding or tensor
    small = r.run({"input": data[:8]})["logits"]  # below profile 1's min batch: padded to 33, cut back
    np.testing.assert_allclose(small, ref[:8], rtol=1e-5, atol=1e-6)
    with pytest.raises(DataError, match="outside optimization profile 1"):
        r.run({"input": data[:65]})
    r.close()
    with pytest.raises(CalibError, match=r"no optimization profile 2 \(the engine has 2: 0..1\)"):
        TrtRunner(built.plan, trt, mem, profile=2)


@pytest.mark.parametrize("profiles, message", [
    ([{"input": (_s(1), _s(8), _s(4))}], r"profile 0 input 'input': min \[1, 3, 64, 64\], opt \[8, 3, 64, 64\], "
                                         r"max \[4, 3, 64, 64\] break min <= opt <= max at dimension 0"),
    ([P1_8_32, {"input": (_s(8), _s(4), _s(16))}], "profile 1 input 'input': .* break min <= opt <= max"),
    ([{"input": ((1, 3, 64), _s(8), _s(32))}], r"profile 0 input 'input': min shape \[1, 3, 64\] has rank 3, the "
                                              r"model takes rank 4 \[\?, 3, 64, 64\]"),
    ([P1_8_32, {"input": (_s(1), _s(8, 32), _s(32))}], r"profile 1 input 'input': opt shape \[8, 3, 32, 32\] "
                                                       r"changes dimension 2, fixed at 64"),
    ([{"image": (_s(1), _s(8), _s(32))}], "profile 0: 'image' is not an input of the model"),
    ([P1_8_32, {}], r"profile 1: dynamic input 'input' \[\?, 3, 64, 64\] has no shapes"),
    ([{"input": {"min": _s(1), "opt": _s(8)}}], "profile 0 input 'input': missing 'max'"),
])
def test_bad_profiles_are_refused_naming_input_and_profile(profiles, message):
    trt, mem = _trt()
    with pytest.raises(CalibError, match=message):
        build(CNN, BuildSpec(precisions=("fp32",), profiles=profiles), None, trt, mem)
    assert trt.builds == []  # refused before TensorRT built anything


def test_fixed_shape_and_profile_for_one_input_is_refused():
    trt, mem = _trt()
    with pytest.raises(CalibError, match="input 'input': give a fixed shape or optimization profiles, not both"):
        build(CNN, BuildSpec(profiles=(P1_8_32,), shapes=(("input", _s(8)),)), None, trt, mem)


def test_calibration_runs_at_profile_0_opt_shape(data):
    trt, mem = _trt()
    c = make_calibrator("minmax", ArraySource(data[:64], "input", 8), {"input": ((3, 64, 64), np.float32)}, 8, mem,
                        None, "", trt)
    built = build(CNN, BuildSpec(precisions=("int8",), profiles=(P1_8_32, P33_40_64)), c, trt, mem)
    cfg = trt.builds[-1]["config"]
    assert cfg.calibration_profile.shapes == {"input": (_s(8), _s(8), _s(8))}  # one fixed shape: the opt
    assert trt.calibration_shapes == {"input": (_s(8),) * 3} and c.calls == 8
    assert built.info["input_shapes"] == {"input": list(_s(8))} and built.info["calibrator"]["batches"] == 8
    wrong = make_calibrator("minmax", ArraySource(data[:64], "input", 4), {"input": ((3, 64, 64), np.float32)}, 4,
                            mem, None, "", trt)
    with pytest.raises(CalibError, match="calibrator feeds batches of 4, the calibration profile .* takes 8"):
        build(CNN, BuildSpec(precisions=("int8",), profiles=(P1_8_32,)), wrong, trt, mem)
    assert calibration_batch(normalize([P33_40_64]), 8) == 40 and calibration_batch((), 8) == 8


def test_without_profiles_the_batch_is_fixed_as_before(tmp_path):
    trt, mem = _trt()
    built = build(CNN, BuildSpec(precisions=("fp32",), batch_size=4), None, trt, mem)
    write_engine(tmp_path / "cnn.engine", built)
    side = json.loads((tmp_path / "cnn.engine.json").read_text())
    assert side["profiles"] == [{"input": {"min": list(_s(4)), "opt": list(_s(4)), "max": list(_s(4))}}]
    assert side["input_shapes"] == {"input": list(_s(4))}


def test_sidecar_records_the_profiles(tmp_path):
    trt, mem = _trt()
    built = build(CNN, BuildSpec(precisions=("fp32", "fp16"), profiles=(P1_8_32, P33_40_64)), None, trt, mem)
    write_engine(tmp_path / "cnn.engine", built)
    side = json.loads((tmp_path / "cnn.engine.json").read_text())
    assert [p["input"]["opt"] for p in side["profiles"]] == [list(_s(8)), list(_s(40))]
    assert [p["input"]["max"] for p in side["profiles"]] == [list(_s(32)), list(_s(64))]
    assert side["input_shapes"] == {"input": list(_s(8))}  # the calibration shape: profile 0's opt


def test_bench_times_min_opt_max_of_every_profile(tmp_path):
    trt, mem = _trt()
    built = build(CNN, BuildSpec(precisions=("fp32",), profiles=(P1_8_32, P33_40_64)), None, trt, mem)
    eng = write_engine(tmp_path / "cnn.engine", built)
    rows = bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem)
    assert [(r["profile"], r["point"], r["batch"]) for r in rows] == [
        (0, "min", 1), (0, "opt", 8), (0, "max", 32), (1, "min", 33), (1, "opt", 40), (1, "max", 64)]
    assert rows[2]["shapes"] == {"input": list(_s(32))} and all(r["median_ms"] > 0 for r in rows)
    rows = bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem, profile=1)
    assert [r["batch"] for r in rows] == [33, 40, 64]
    rows = bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem, shapes={"input": _s(20)})
    assert [(r["profile"], r["point"], r["batch"]) for r in rows] == [(0, "given", 20)]
    rows = bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem, batch_size=50, profile=1)
    assert rows[0]["shapes"] == {"input": list(_s(50))}
    with pytest.raises(CalibError, match=r"shape \[33, 3, 64, 64\] is outside optimization profile 0"):
        bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem, shapes={"input": _s(33)})
    with pytest.raises(CalibError, match="is outside optimization profile 1"):
        bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem, batch_size=8, profile=1)
    with pytest.raises(CalibError, match="--shape 'x' is not an engine input"):
        bench_engine_file(eng, warmup=1, iters=2, repeats=2, trt=trt, cuda=mem, shapes={"x": _s(8)})
    assert mem.blocks == {}


def test_profiles_from_cli_options():
    got = from_options(["input=1x3x64x64", "input=33x3x64x64"], ["input=8x3x64x64", "input=40x3x64x64"],
                       ["input=32x3x64x64", "input=64x3x64x64"])
    assert got == normalize([P1_8_32, P33_40_64])
    assert got[0] == (("input", ShapeRange(_s(1), _s(8), _s(32))),)
    assert from_options([], [], []) == ()
    with pytest.raises(CalibError, match="input 'input': 2 --min-shape, 1 --opt-shape, 1 --max-shape"):
        from_options(["input=1x3x64x64", "input=2x3x64x64"], ["input=8x3x64x64"], ["input=32x3x64x64"])
    with pytest.raises(CalibError, match="--opt-shape input: '8x3xA' is not a shape"):
        from_options(["input=1x3x64x64"], ["input=8x3xA"], ["input=32x3x64x64"])
    with pytest.raises(CalibError, match="--max-shape '32x3': expected NAME=1x3x224x224"):
        from_options(["input=1x3x64x64"], ["input=8x3x64x64"], ["32x3"])


def test_cli_build_with_profiles_then_bench_each_shape(tmp_path, data, ref):
    eng = tmp_path / "cnn.engine"
    r = calib_cli("build", CNN, "--precision", "fp32", "-o", eng,
                  "--min-shape", "input=1x3x64x64", "--opt-shape", "input=8x3x64x64", "--max-shape", "input=32x3x64x64",
                  "--min-shape", "input=33x3x64x64", "--opt-shape", "input=40x3x64x64",
                  "--max-shape", "input=64x3x64x64")
    assert r.returncode == 0, r.stderr
    assert "profile 1: input 33x3x64x64..64x3x64x64 (opt 40x3x64x64)" in r.stdout
    side = json.loads((tmp_path / "cnn.engine.json").read_text())
    assert side["profiles"] == json.loads(json.dumps([{"input": {"min": _s(1), "opt": _s(8), "max": _s(32)}},
                                                      {"input": {"min": _s(33), "opt": _s(40), "max": _s(64)}}]))
    r = calib_cli("bench", eng, "--json", "--iters", "2", "--repeats", "2")
    assert r.returncode == 0, r.stderr
    assert [(row["profile"], row["batch"]) for row in json.loads(r.stdout)] == [
        (0, 1), (0, 8), (0, 32), (1, 33), (1, 40), (1, 64)]
    r = calib_cli("bench", eng, "--iters", "2", "--repeats", "2", "--shape", "input=48x3x64x64", "--profile", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1 and "profile 1 given (input 48x3x64x64): median" in r.stdout
    r = calib_cli("bench", eng, "--iters", "2", "--repeats", "2", "--shape", "input=48x3x64x64")
    assert r.returncode == 2 and "outside optimization profile 0" in r.stderr and "Traceback" not in r.stderr
    r = calib_cli("build", CNN, "--precision", "fp32", "-o", tmp_path / "bad.engine",
                  "--min-shape", "input=1x3x64x64", "--opt-shape", "input=8x3x64x64", "--max-shape", "input=4x3x64x64")
    assert r.returncode == 2 and "profile 0 input 'input'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "bad.engine").exists()


def test_cli_build_calibrates_at_the_opt_batch(tmp_path):
    """--calibrator over --data with profiles: TensorRT's calibration batches have profile 0's opt batch."""
    eng = tmp_path / "cnn.engine"
    r = calib_cli("build", CNN, "--calibrator", "minmax", "--data", GOLDEN / "cnn" / "cnn_calib.npy",
                  "--precision", "int8", "-o", eng, "--min-shape", "input=1x3x64x64",
                  "--opt-shape", "input=16x3x64x64", "--max-shape", "input=32x3x64x64")
    assert r.returncode == 0, r.stderr
    side = json.loads((tmp_path / "cnn.engine.json").read_text())
    assert side["calibrator"]["batches"] == 4 and side["calibrator"]["samples"] == 64  # 64 samples / 16


def test_recipe_backend_profiles(tmp_path):
    from calib.deploy.jobs import _check_batch
    from calib.recipe import ShapeRangeSpec, load_recipe

    np.save(tmp_path / "x.npy", np.zeros((2, 3, 64, 64), np.float32))
    (tmp_path / "r.yaml").write_text(f"""
model: {CNN}
calibration_data: {{kind: npy, path: x.npy}}
backend:
  kind: tensorrt
  batch_size: 8
  profiles:
    - input: {{min: [1, 3, 64, 64], opt: [8, 3, 64, 64], max: [32, 3, 64, 64]}}
    - input: {{min: [33, 3, 64, 64], opt: [40, 3, 64, 64], max: [64, 3, 64, 64]}}
""")
    rec = load_recipe(tmp_path / "r.yaml")
    assert rec.backend.profiles[1]["input"] == ShapeRangeSpec((33, 3, 64, 64), (40, 3, 64, 64), (64, 3, 64, 64))
    profiles = normalize(rec.backend.profiles)
    assert profiles == normalize([P1_8_32, P33_40_64])
    _check_batch(profiles, 32, "r.yaml")
    with pytest.raises(RecipeError, match=r"r.yaml: backend.batch_size 33 is above the max batch 32 of input "
                                          r"'input' in backend.profiles\[0\]"):
        _check_batch(profiles, 33, "r.yaml")
    for bad, message in [("[{input: {min: [1], opt: [2]}}]", r"backend.profiles\[0\].input.max: required key"),
                         ("[{input: {min: [0], opt: [2], max: [3]}}]", r"backend.profiles\[0\].input.min\[0\]: must"),
                         ("[{input: {min: [1], opt: [2], max: [3], mx: 1}}]", "did you mean 'max'"),
                         ("[3]", r"backend.profiles\[0\]: expected a mapping")]:
        with pytest.raises(RecipeError, match=message):
            load_recipe(tmp_path / "r.yaml", [f"backend.profiles={bad}"])


def test_recipe_run_builds_engines_with_the_profiles(tmp_path):
    """The engines are built for the recipe's batch range, whose tensors TensorRT 8.6 lists without formats: on an
    H100, calib read recipes/yolov8n.yaml's engines (batch 1-8) as FP32 and said 'TensorRT ran no layer in INT8'
    where the same model at a fixed batch ran 94 INT8 layers. The kernels' names give the Convs' and the Gemm's."""
    data = np.load(GOLDEN / "cnn" / "cnn_calib.npy")
    np.save(tmp_path / "calib.npy", data[:24])
    np.save(tmp_path / "eval.npy", data[24:40])
    (tmp_path / "r.yaml").write_text(f"""
name: cnn_trt
model: {CNN}
calibration_data: {{kind: npy, path: calib.npy}}
evaluation_data: {{kind: npy, path: eval.npy}}
preprocess: {{scale: 1.0, layout: NCHW}}
calibration: {{algorithms: [minmax], batch_size: 8}}
evaluation: {{task: outputs}}
backend:
  kind: tensorrt
  batch_size: 16
  reference: [fp32]
  trt_calibrator: minmax
  profiles: [{{input: {{min: [1, 3, 64, 64], opt: [4, 3, 64, 64], max: [16, 3, 64, 64]}}}}]
output: out
""")
    r = calib_cli("run", tmp_path / "r.yaml")
    assert r.returncode == 0, r.stderr
    t = json.loads((tmp_path / "out" / "report.json").read_text())["tensorrt"]
    assert t["profiles"] == [{"input": {"min": [1, 3, 64, 64], "opt": [4, 3, 64, 64], "max": [16, 3, 64, 64]}}]
    summary = t["engines"]["trt-int8-minmax"]["layer_summary"]
    assert summary.get("int8") == 4 and "fp32" not in summary and "ran no layer in INT8" not in r.stderr, summary
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    pm = report["evaluation"]["configs"]["minmax@engine"]["precision_model"]  # the engine as the CPU simulates it
    assert pm["source"] == "inspector" and pm["counts"] == {"int8": 9}, pm  # the ReLUs and Flatten: the rules'
    assert pm["notes"] == ["the rules (implicit-INT8 rules, TensorRT 8.6) give the 5 nodes whose engine layers list "
                           "no precision"], pm
    assert t["engines"]["trt-int8-tensorrt-minmax"]["calibrator"]["batches"] == 6  # 24 samples at opt batch 4
    assert t["engines"]["trt-int8-minmax"]["latency"]["batch"] == 16  # evaluated and timed on profile 0
    best = tmp_path / "out" / f"cnn.{t['best_engine'][len('trt-int8-'):]}.engine"
    assert json.loads(best.with_name(best.name + ".json").read_text())["profiles"] == t["profiles"]
