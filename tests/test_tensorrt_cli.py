"""`calib build`, `calib bench` and `calib run` with `backend: tensorrt`, in subprocesses whose `import tensorrt`
and `import cuda.cudart` find the stand-in (tests/standin/site); and the one-line error where TensorRT is absent."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from calib.io.files import sha256_file
from calib.quantize.cache import read_cache
from conftest import GOLDEN, ROOT

CNN = GOLDEN / "cnn" / "cnn.onnx"


def calib_cli(*args, standin=True, version="8.6.0", cwd=None, simulate=False):
    env = dict(os.environ)
    env["STANDIN_SIMULATE_INT8"] = "1" if simulate else "0"
    path = [str(ROOT / "tests" / "standin" / "site"), str(ROOT)] if standin else [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["STANDIN_TRT_VERSION"] = version
    return subprocess.run([sys.executable, "-m", "calib", "-q", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=600)


def test_build_from_a_calib_cache_then_bench(tmp_path):
    data = GOLDEN / "cnn" / "cnn_calib.npy"
    r = calib_cli("calibrate", CNN, "--data", data, "--algo", "mse", "-o", tmp_path / "caches")
    assert r.returncode == 0, r.stderr
    eng = tmp_path / "cnn.mse.engine"
    r = calib_cli("build", CNN, "--cache", tmp_path / "caches" / "mse.cache", "--precision", "int8,fp16",
                  "--layer-precision", "op:Gemm=fp32", "--batch-size", "8", "-o", eng)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "int8" in r.stdout
    side = json.loads((tmp_path / "cnn.mse.engine.json").read_text())
    assert side["cache_algorithm"] == "mse" and side["calibrator"]["batches"] == 0
    assert side["layer_precisions"] == ["op:Gemm=fp32"] and side["input_shapes"]["input"] == [8, 3, 64, 64]
    assert side["tf32"] is False  # FP32 layers in FP32: TensorRT's TF32 default cleared
    tf32 = tmp_path / "cnn.tf32.engine"
    r = calib_cli("build", CNN, "--precision", "fp32", "--batch-size", "8", "--tf32", "-o", tf32)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "cnn.tf32.engine.json").read_text())["tf32"] is True
    r = calib_cli("bench", eng, "--json", "--iters", "2", "--repeats", "3")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)  # a fixed-batch engine: one profile whose min = opt = max, one row
    assert [(row["profile"], row["point"], row["batch"]) for row in rows] == [(0, "min=opt=max", 8)]
    r = calib_cli("bench", eng, "--json", "--iters", "5", "--repeats", "2", "--layers")
    assert r.returncode == 0, r.stderr
    prof = json.loads(r.stdout)[0]["layers"]
    # every engine layer of the inspector, with its time (the stand-in reports 1 us x its index), precision, tactic
    names = [la["name"] for la in side["layers"]]
    assert [row["name"] for row in prof["layers"]] == names
    assert [row["ms"] for row in prof["layers"]] == pytest.approx([0.001 * (i + 1) for i in range(len(names))])
    assert {row["precision"] for row in prof["layers"]} == {la["precision"] for la in side["layers"]}
    assert sum(row["share"] for row in prof["layers"]) == pytest.approx(1.0, abs=1e-3)
    r = calib_cli("bench", eng, "--iters", "5", "--repeats", "2", "--layers", "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "| engine layer | precision | ms | share | tactic |" in r.stdout and names[-1] in r.stdout
    side_path = tmp_path / "cnn.mse.engine.json"  # an engine and a sidecar of another build: named, not used
    doc = json.loads(side_path.read_text())
    assert len(doc["engine_sha256"]) == 64
    side_path.write_text(json.dumps({**doc, "engine_sha256": "0" * 64}))
    r = calib_cli("bench", eng, "--json")
    assert r.returncode != 0 and "describes another build" in r.stderr and "Traceback" not in r.stderr


def test_build_with_tensorrt_calibrator_writes_its_cache(tmp_path):
    eng = tmp_path / "cnn.engine"
    r = calib_cli("build", CNN, "--calibrator", "minmax", "--data", GOLDEN / "cnn" / "cnn_calib.npy",
                  "--precision", "int8", "--batch-size", "8", "-o", eng)
    assert r.returncode == 0, r.stderr
    c = read_cache(tmp_path / "cnn.cache")
    gold = read_cache(GOLDEN / "cnn" / "int8-minmax.cache")
    assert c.scales["conv2"] == pytest.approx(gold.scales["conv2"], rel=1e-5)


@pytest.mark.parametrize("args, message", [
    (["--precision", "int8"], "needs --cache"),
    (["--precision", "int8", "--calibrator", "entropy2"], "needs --data"),
    (["--precision", "fp64"], "not one of"),
    (["--precision", "int8,fp16", "--cache", GOLDEN / "mobilenet_v2" / "minmax.cache"], "not in the model"),
    (["--layer-precision", "nosuch=fp16", "--precision", "fp16"], "matches no layer"),
    (["--shape", "input=8x3xA"], "NAME=1x3x224x224"),
])
def test_build_errors_are_one_line(tmp_path, args, message):
    out = tmp_path / "x.engine"
    r = calib_cli("build", CNN, "-o", out, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not (tmp_path / "x.engine.json").exists()


def test_tensorrt_11_build_from_cache_or_calibrator_says_what_went_and_what_to_run(tmp_path):
    """TensorRT 11 removed implicit INT8: --cache and --calibrator stop in one line that names what went and the
    commands that make and build the FP16+INT8 model instead (the calibrator's before its data is read)."""
    cache, out = GOLDEN / "cnn" / "int8-minmax.cache", tmp_path / "x.engine"
    fp16 = GOLDEN / "cnn" / "cnn.fp16.qdq.onnx"
    r = calib_cli("build", CNN, "--cache", cache, "--precision", "int8", "-o", out, version="11.4.0")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert ("TensorRT 11.4.0 removed implicit INT8 (IInt8Calibrator, so calibration caches, and the INT8/FP16 "
            "builder flags): every network is strongly typed") in r.stderr
    assert (f"calib cache migrate {cache} --model {CNN} -o {fp16}, then calib build {fp16} -o {out} "
            f"(or trtexec --onnx={fp16} --saveEngine={out})") in r.stderr
    r = calib_cli("build", CNN, "--calibrator", "minmax", "--data", tmp_path / "not-read.npy", "-o", out,
                  version="11.0.0")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "TensorRT's own calibrators" in r.stderr
    assert (f"calib calibrate {CNN} --data {tmp_path / 'not-read.npy'} --algo minmax -o {tmp_path / 'caches'} "
            f"(with the same preprocessing options), calib cache migrate {tmp_path / 'caches' / 'minmax.cache'} "
            f"--model {CNN} -o {fp16}, then calib build {fp16} -o {out}") in r.stderr
    assert not out.exists()
    r = calib_cli("build", CNN, "--cache", cache, "--precision", "int8", "-o", out, version="10.3.0")
    assert r.returncode == 0 and "removed" not in r.stderr + r.stdout  # 10.x still builds from the cache


def test_a_strongly_typed_build_says_so(tmp_path):
    """A Q/DQ model on TensorRT 11 is built strongly typed, and calib build says that its layers run in the model's
    types; on TensorRT 10 it is built weakly typed unless asked, and says nothing of the kind."""
    q = tmp_path / "cnn.qdq.onnx"
    r = calib_cli("cache", "convert", GOLDEN / "cnn" / "int8-minmax.cache", "--model", CNN, "--to", "qdq", "-o", q)
    assert r.returncode == 0, r.stderr
    said = "strongly typed (TensorRT 11.0.0): every layer runs in the type the model gives it"
    r = calib_cli("build", q, "--precision", "int8", "--batch-size", "8", "-o", tmp_path / "q.engine",
                  version="11.0.0")
    assert r.returncode == 0 and said in r.stdout, r.stdout + r.stderr
    r = calib_cli("build", q, "--batch-size", "8", "-o", tmp_path / "q.engine", version="11.0.0")  # int8,fp16
    assert r.returncode == 2 and "FP32 here" in r.stderr and "calib cache migrate CACHE --model MODEL" in r.stderr
    r = calib_cli("build", q, "--batch-size", "8", "-o", tmp_path / "q10.engine", version="10.3.0")
    assert r.returncode == 0 and "strongly typed" not in r.stdout, r.stdout + r.stderr
    r = calib_cli("build", q, "--precision", "int8", "--strongly-typed", "--batch-size", "8",
                  "-o", tmp_path / "q10s.engine", version="10.3.0")
    assert r.returncode == 0 and "strongly typed (TensorRT 10.3.0)" in r.stdout, r.stdout + r.stderr


def test_without_tensorrt_build_names_the_extra(tmp_path):
    r = calib_cli("build", CNN, "--precision", "fp16", "-o", tmp_path / "x.engine", standin=False)
    if r.returncode == 0:
        pytest.skip("tensorrt is installed here")
    assert r.returncode == 2 and "pip install 'tensorrt>=8.6' 'cuda-python>=12'" in r.stderr and "Traceback" not in r.stderr


def test_run_recipe_with_tensorrt_backend(tmp_path):
    """The whole `calib run` with engines: caches, engines from each cache and from TensorRT's calibrator, the
    simulation told the engines' precisions, latency, the best engine and its sidecar, the report."""
    data = np.load(GOLDEN / "cnn" / "cnn_calib.npy")
    np.save(tmp_path / "calib.npy", data[:24])
    np.save(tmp_path / "eval.npy", data[24:40])
    (tmp_path / "r.yaml").write_text(f"""
name: cnn_trt
model: {CNN}
calibration_data: {{kind: npy, path: calib.npy}}
evaluation_data: {{kind: npy, path: eval.npy}}
preprocess: {{scale: 1.0, layout: NCHW}}
calibration: {{algorithms: [minmax, percentile], batch_size: 8}}
evaluation: {{task: outputs}}
backend: {{kind: tensorrt, batch_size: 8, layer_precisions: ["op:Gemm=fp32"], trt_calibrator: minmax,
          layerwise: [percentile]}}
output: out
""")
    r = calib_cli("run", tmp_path / "r.yaml")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    rep = json.loads((out / "report.json").read_text())
    t = rep["tensorrt"]
    assert set(t["engines"]) == {"trt-fp32", "trt-fp16", "trt-int8-minmax", "trt-int8-percentile",
                                 "trt-int8-percentile-marked", "trt-int8-tensorrt-minmax"}
    assert t["engines"]["trt-int8-minmax"]["calibrator"]["batches"] == 0  # fed from calib's cache
    assert t["engines"]["trt-int8-tensorrt-minmax"]["calibrator"]["batches"] == 3  # 24 samples / 8
    assert t["engines"]["trt-int8-minmax"]["layers_set"] and t["layer_precisions"] == ["op:Gemm=fp32"]
    assert all(e["graph_latency"]["cuda_graph"] for e in t["engines"].values())  # timed as CUDA graphs too
    configs = rep["evaluation"]["configs"]
    assert {"minmax@engine", "percentile@engine", "trt-fp16"} <= set(configs)
    fp32_sqnr = configs["trt-fp32"]["outputs"]["logits"]["sqnr_db"]  # stand-in engines run FP32: identical outputs
    assert fp32_sqnr is None or fp32_sqnr > 100  # an infinite SQNR is null in strict JSON
    marked = configs["trt-int8-percentile-marked"]  # the perturbed engine: every tensor compared with FP32
    assert marked["perturbed"] and len(marked["layers"]) > 5 and not configs["trt-int8-percentile"]["layers"]
    assert {l["tensor"] for l in marked["layers"]} <= {l["tensor"] for l in configs["percentile"]["layers"]}
    assert "percentile-marked@engine" not in configs
    best = t["best_engine"]
    assert not best.endswith("-marked")
    eng = out / f"cnn.{best[len('trt-int8-'):]}.engine"
    assert eng.is_file() and json.loads(eng.with_name(eng.name + ".json").read_text())["latency"]["batch"] == 8
    assert (out / "tensorrt-minmax.cache").is_file() and (out / "tensorrt-minmax.json").is_file()
    md = (out / "report.md").read_text()
    assert "## TensorRT engines (8.6.0" in md and "trt-int8-percentile" in md and "as CUDA graphs: ms" in md
    assert "## Worst layers (trt-int8-percentile-marked: a perturbed engine)" in md
    assert rep["summary"]["best"] in ("minmax", "percentile")  # the Q/DQ model comes from an algorithm
    prof = t["engines"]["trt-int8-minmax"]["profile"]  # every INT8 engine profiled per layer (IProfiler)
    assert prof["runs"] == 10 and prof["slowest_layers"][0]["ms"] >= prof["slowest_layers"][-1]["ms"]
    text = (out / "engine-profile.md").read_text()
    assert "## trt-int8-minmax" in text and "## trt-int8-percentile-marked" not in text
    assert "| engine layer | precision | ms | share | tactic |" in text
    from calib.zoo import home

    head = f"trt-8.6.0-{sha256_file(CNN)[:16]}-"
    timing = sorted(p.name[len(head):] for p in (home() / "timing").glob(f"{head}*.timing"))
    # one per precision set and INT8 cache, none shared with other graphs (a marked engine is another graph)
    assert timing == ["fp32+fp16.timing", "fp32.timing", "int8+fp16+minmax.timing",
                      "int8+fp16+percentile+marked.timing", "int8+fp16+percentile.timing",
                      "int8+fp16+tensorrt-minmax.timing"], timing


def test_sensitivity_with_tensorrt_backend_verifies_on_engines(tmp_path):
    """`calib sensitivity` with `backend: tensorrt`: the CPU search, then the same bisection on engines; the
    layer_precisions file holds the engine's answer, the report puts simulation and engine side by side."""
    from test_fallback import sensitive_model

    sensitive_model(tmp_path / "s.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0.1, 1, (8, 2, 4, 4)).astype(np.float32))
    (tmp_path / "r.yaml").write_text("""
name: s
model: s.onnx
calibration_data: {kind: npy, path: x.npy}
sensitivity: {metric: output_sqnr, min_sqnr_db: 30, samples: 8, pin_int8: true}
backend: {kind: tensorrt, batch_size: 8}
output: out
""")
    r = calib_cli("sensitivity", tmp_path / "r.yaml", "--set", "backend.kind=onnxruntime")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / "sensitivity"
    assert "engine" not in json.loads((out / "sensitivity.json").read_text())
    r = calib_cli("sensitivity", tmp_path / "r.yaml", simulate=True)  # the CPU part comes from the first run
    assert r.returncode == 0, r.stderr
    assert "reusing the ranking and search of" in (out / "run.log").read_text()
    res = json.loads((out / "sensitivity.json").read_text())
    e = res["engine"]
    assert e["float_layers"] == ["convB"] == res["float_layers"] and e["met"] and e["pin_int8"]
    assert (out / "layer_precisions.txt").read_text() == "convB=fp16\n"
    md = (out / "sensitivity.md").read_text()
    assert "## On TensorRT engines (batch 8" in md and "| layers in float | simulation | as built | engine |" in md
    assert "Fastest variant within the budget: 1 layers in float" in md


def test_engines_take_the_recipes_input_shapes_for_dims_past_the_batch(tmp_path):
    """A model whose height and width are dynamic (a detector's pyramid level): `input_shapes` fixes them for the
    CPU passes and for every engine `calib sensitivity` and `calib run` build, the batch dim the engine's own. Before
    the engines took them, both stopped at "dynamic dims beyond the batch"."""
    import onnx

    from test_fallback import sensitive_model

    m = onnx.load(str(sensitive_model(tmp_path / "s.onnx")))
    for d, name in zip(m.graph.input[0].type.tensor_type.shape.dim[2:], ("H", "W")):
        d.dim_param = name
    for d, name in zip(m.graph.output[0].type.tensor_type.shape.dim[2:], ("H", "W")):
        d.dim_param = name
    onnx.save(m, str(tmp_path / "s.onnx"))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0.1, 1, (8, 2, 4, 4)).astype(np.float32))
    (tmp_path / "r.yaml").write_text("""
name: s
model: s.onnx
calibration_data: {kind: npy, path: x.npy}
input_shapes: {input: [1, 2, 4, 4]}
sensitivity: {metric: output_sqnr, min_sqnr_db: 30, samples: 8, pin_int8: true}
backend: {kind: tensorrt, batch_size: 8}
output: out
""")
    r = calib_cli("sensitivity", tmp_path / "r.yaml", simulate=True)
    assert r.returncode == 0, r.stderr
    e = json.loads((tmp_path / "out" / "sensitivity" / "sensitivity.json").read_text())["engine"]
    assert e["float_layers"] == ["convB"] and e["met"]
    r = calib_cli("run", tmp_path / "r.yaml", "--set", "calibration.algorithms=[minmax]")
    assert r.returncode == 0, r.stderr
    side = json.loads(next((tmp_path / "out").glob("*.engine.json")).read_text())
    assert side["input_shapes"]["input"] == [8, 2, 4, 4]


def test_recipe_shapes_put_the_engine_batch_where_the_model_has_a_dynamic_one():
    from calib.runners.tensorrt.builder import recipe_shapes

    dims = {"images": (None, 3, None, None), "fixed": (1, 4), "dyn": (-1, 2)}
    got = recipe_shapes({"images": (1, 3, 320, 240), "fixed": (1, 4), "dyn": (5, 2), "absent": (1,)}, dims, 8)
    assert got == (("images", (8, 3, 320, 240)), ("fixed", (1, 4)), ("dyn", (8, 2)))


def test_layerwise_names_an_algorithm_of_the_recipe(tmp_path):
    np.save(tmp_path / "calib.npy", np.load(GOLDEN / "cnn" / "cnn_calib.npy")[:8])
    (tmp_path / "r.yaml").write_text(f"""
name: cnn_trt
model: {CNN}
calibration_data: {{kind: npy, path: calib.npy}}
preprocess: {{scale: 1.0, layout: NCHW}}
calibration: {{algorithms: [minmax], batch_size: 8}}
backend: {{kind: tensorrt, batch_size: 8, layerwise: [mse]}}
output: out
""")
    r = calib_cli("run", tmp_path / "r.yaml")
    assert r.returncode != 0 and "backend.layerwise: 'mse' is not one of the recipe's algorithms" in r.stderr
    assert not (tmp_path / "out").exists()
