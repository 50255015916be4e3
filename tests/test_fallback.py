"""The sensitivity ranking and the fallback search on a graph with one known sensitive layer."""
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from calib.calibrate import calibrate
from calib.quantize.qdq import quantizable_layers
from calib.search.fallback import Scorer, budget_target, layer_precisions, rank, search


def sensitive_model(path):
    """convA multiplies channel 1 by 1000, so one per-tensor int8 scale at convB's input wipes out channel 0,
    which carries convB's output: convB is the layer that must stay in float; convA is harmless."""
    wa = np.array([[1.0, 0.0], [0.0, 1000.0]], np.float32).reshape(2, 2, 1, 1)
    wb = np.array([[1.0, 1e-4]], np.float32).reshape(1, 2, 1, 1)
    nodes = [helper.make_node("Conv", ["input", "wa"], ["ta"], name="convA"),
             helper.make_node("Conv", ["ta", "wb"], ["out"], name="convB")]
    g = helper.make_graph(nodes, "sens", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 2, 4, 4])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1, 4, 4])],
                          [numpy_helper.from_array(wa, "wa"), numpy_helper.from_array(wb, "wb")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_finds_the_sensitive_layer(tmp_path):
    p = sensitive_model(tmp_path / "s.onnx")
    x = np.random.default_rng(0).uniform(0.1, 1.0, (16, 2, 4, 4)).astype(np.float32)
    amax = calibrate(p, x, ["minmax"]).amax["minmax"]
    m = onnx.load(str(p))
    scorer = Scorer(m, amax, [({"input": x[:8]}, None), ({"input": x[8:]}, None)], "output_sqnr")
    layers = quantizable_layers(m)
    assert layers == ["convA", "convB"]
    ranking = rank(scorer, layers)
    assert ranking[0]["layer"] == "convB" and ranking[0]["gain"] > 20
    assert scorer.score(()) < 15
    found = search(scorer, ranking, budget_target("output_sqnr", scorer.fp32_score, 0, 30.0))
    assert found["float_layers"] == ["convB"] and found["met"]
    runs = scorer.runs
    search(scorer, ranking, 30.0)
    assert scorer.runs == runs  # every variant came from the cache
    assert layer_precisions(found["float_layers"]) == "convB=fp16\n"


def test_error_split_tells_weights_from_activations(tmp_path):
    p = sensitive_model(tmp_path / "s.onnx")
    x = np.random.default_rng(0).uniform(0.1, 1.0, (16, 2, 4, 4)).astype(np.float32)
    amax = calibrate(p, x, ["minmax"]).amax["minmax"]
    scorer = Scorer(onnx.load(str(p)), amax, [({"input": x}, None)], "output_sqnr")
    split = scorer.split()
    # weights alone: convA's are exact per channel (1 and 1000 are each their channel's maximum); convB's 1e-4
    # rounds to 0 against its 1.0, so the output loses exactly 1000 * 1e-4 * x1
    ref = x[:, 0] + 0.1 * x[:, 1]
    want = 10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((0.1 * x[:, 1].astype(np.float64)) ** 2).sum())
    assert split["weights_only"]["sqnr_db"] == pytest.approx(want, abs=0.05)
    # activations alone: one scale for convB's input (amax about 1000) rounds channel 0 (at most 1.0) to 0
    assert split["activations_only"]["sqnr_db"] < 3
    from calib.search.sensitivity import _split_md

    assert "mostly the activations" in _split_md(split, "output_sqnr")


def test_agreement_budget_target():
    assert budget_target("top1_agreement", 1.0, 0.05, 99) == pytest.approx(0.95)
    assert budget_target("output_sqnr", float("inf"), 0.05, 30.0) == 30.0


def test_sensitivity_command(tmp_path):
    from calib.cli import main

    sensitive_model(tmp_path / "s.onnx")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.uniform(0.1, 1, (8, 2, 4, 4)).astype(np.float32))
    (tmp_path / "r.yaml").write_text("""
name: s
model: s.onnx
calibration_data: {kind: npy, path: x.npy}
sensitivity: {metric: output_sqnr, min_sqnr_db: 30, samples: 8}
output: out
""")
    r = CliRunner().invoke(main, ["--quiet", "sensitivity", str(tmp_path / "r.yaml")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "sensitivity" / "exclude.txt").read_text() == "convB\n"
    assert (tmp_path / "out" / "sensitivity" / "layer_precisions.txt").read_text() == "convB=fp16\n"
    import json

    res = json.loads((tmp_path / "out" / "sensitivity" / "sensitivity.json").read_text())
    assert res["error_split"]["activations_only"]["sqnr_db"] < res["error_split"]["weights_only"]["sqnr_db"]
    assert "mostly the activations" in (tmp_path / "out" / "sensitivity" / "sensitivity.md").read_text()


def test_unnamed_nodes_go_by_their_output(tmp_path):
    p = sensitive_model(tmp_path / "s.onnx")
    m = onnx.load(str(p))
    for n in m.graph.node:
        n.name = ""
    assert quantizable_layers(m) == ["ta", "out"]


def test_unknown_sensitivity_algorithm_fails_before_the_pass(tmp_path):
    from calib.cli import main

    sensitive_model(tmp_path / "s.onnx")
    np.save(tmp_path / "x.npy", np.ones((2, 2, 4, 4), np.float32))
    (tmp_path / "r.yaml").write_text("name: s\nmodel: s.onnx\ncalibration_data: {kind: npy, path: x.npy}\n"
                                     "sensitivity: {algorithm: kl}\noutput: out\n")
    r = CliRunner().invoke(main, ["--quiet", "sensitivity", str(tmp_path / "r.yaml")])
    assert r.exit_code == 2 and "sensitivity.algorithm: unknown algorithm 'kl'" in r.output
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


def test_best_of_per_tensor_picks_the_algorithm_that_helps(tmp_path):
    """convB's input mixes a channel near 1 (which carries the output) with one near 1000: minmax's scale wipes
    the first out, a clipping scale (amax 1.0) keeps it. Best-of per tensor takes the clipping scale for that
    one tensor and leaves the others, and the output SQNR goes from ~0 dB to well above 15 dB with no layer in
    float."""
    from calib.search.fallback import best_of, layer_inputs

    p = sensitive_model(tmp_path / "s.onnx")
    x = np.random.default_rng(0).uniform(0.1, 1.0, (16, 2, 4, 4)).astype(np.float32)
    mm = calibrate(p, x, ["minmax"]).amax["minmax"]
    tight = {k: v * 0.5 for k, v in mm.items()}
    tight["ta"] = 1.0
    m = onnx.load(str(p))
    scorer = Scorer(m, mm, [({"input": x[:8]}, None), ({"input": x[8:]}, None)], "output_sqnr")
    assert layer_inputs(m, ["convB", "convA"]) == ["ta", "input"]
    res = best_of(scorer, {"tight": tight}, ["ta", "input"])
    assert res["choices"] == {"ta": ("tight", 1.0)}  # halving the input's amax would clip: not taken
    assert res["before"] < 5 and res["after"] > 15
    assert scorer.score((), {"ta": 1.0}) == res["after"]


def test_engine_search_on_the_standin_finds_the_sensitive_layer(tmp_path):
    """The bisection repeated on (stand-in) TensorRT engines: each variant built with the fallback layers in FP16,
    every other quantizable layer pinned to INT8, run, and scored against the same FP32 reference as the CPU
    simulation. The stand-in's INT8 engines run the Q/DQ simulation of the layers they hold in INT8, so the
    engine's scores must equal the simulation's, and the answer must be convB."""
    from calib.recipe import load_recipe
    from calib.search.engines import engine_search, pin_rules
    from standin.tensorrt import Memory, make_trt

    p = sensitive_model(tmp_path / "s.onnx")
    x = np.random.default_rng(0).uniform(0.1, 1.0, (16, 2, 4, 4)).astype(np.float32)
    amax = calibrate(p, x, ["minmax"]).amax["minmax"]
    m = onnx.load(str(p))
    scorer = Scorer(m, amax, [({"input": x[:8]}, None), ({"input": x[8:]}, None)], "output_sqnr")
    ranking = rank(scorer, quantizable_layers(m))
    (tmp_path / "r.yaml").write_text("name: s\nmodel: s.onnx\ncalibration_data: {kind: npy, path: x.npy}\n"
                                     "sensitivity: {pin_int8: true, min_speedup: 1.2}\nbackend: {kind: tensorrt}\n")
    np.save(tmp_path / "x.npy", x)
    recipe = load_recipe(tmp_path / "r.yaml")
    mem = Memory()
    trt = make_trt("8.6.0", mem)
    trt.simulate_int8 = True
    e = engine_search(scorer, ranking, 30.0, p, amax, recipe, trt=trt, cuda=mem)
    assert e["float_layers"] == ["convB"] and e["met"]
    assert pin_rules(m, ["convA", "convB"]) == ("op:Conv=int8",)
    for row in e["variants"]:
        assert row["engine_score"] == pytest.approx(row["sim_score"], abs=1e-3)
    by_k = {r["float_layers"]: r for r in e["variants"]}
    assert by_k[0]["engine_score"] < 15 and by_k[1]["engine_score"] > 30
    assert by_k[1]["engine_layers"].get("fp16", 0) >= 1 and by_k[0]["engine_layers"].get("int8", 0) == 2
    # which output each engine loses on (one output: the score itself), and the precision of each engine layer
    for row in e["variants"]:
        (only,) = row["engine_output_sqnr_db"].values()
        assert only == pytest.approx(row["engine_score"], abs=1e-3)
    assert by_k[1]["engine_precisions"]["convB"] == "fp16" and by_k[0]["engine_precisions"]["convB"] == "int8"
    last = trt.builds[-1]["network"]
    assert {la.name: la.precision for la in last.layers if la.precision is not None}  # rules reached the builder
    assert e["fp16_ms"] > 0 and e["speed_met"] is False  # the stand-in's engines all take the same time
    assert e["engines_built"] == len(e["variants"]) + 1
    assert e["fastest_meeting_budget"]["float_layers"] == 1 and e["best_meeting_speed"] is None


@pytest.mark.parametrize("prelu_reads_int8", [True, False])
def test_engine_rows_simulate_the_implicit_engine_where_a_prelu_reads_an_int8_conv(tmp_path, prelu_reads_int8):
    """Conv -> PRelu -> Conv on (stand-in) engines, every quantizable layer pinned to INT8: TensorRT 8.6 runs the
    PRelu as a float layer that reads the first Conv's INT8 output (P-Net on an H100). The engine rows' simulation
    is the implicit engine's (that rounding included), so it equals the engine; the Q/DQ placement the CPU search
    ranks with does not round there and scores the all-INT8 variant higher. TensorRT chooses that per build (a
    second H100 build of the same variant wrote float into the PRelu): the simulation of the engine as built
    reads the tensors' formats from its inspector and equals the engine either way."""
    from calib.recipe import load_recipe
    from calib.search.engines import engine_search
    from standin.tensorrt import Memory, make_trt

    rng = np.random.default_rng(1)
    # a negative bias: the Conv's output reaches far below zero, the PRelu's hardly, so the Conv's own scale (the
    # engine's rounding into the PRelu) is several times coarser than the PRelu's
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1"),
             helper.make_node("PRelu", ["c1", "slope"], ["p1"], name="prelu1"),
             helper.make_node("Conv", ["p1", "w2"], ["out"], name="conv2")]
    g = helper.make_graph(nodes, "prelu", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 6, 6])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 2, 4, 4])],
                          [numpy_helper.from_array(rng.normal(0, 1.0, (4, 3, 3, 3)).astype(np.float32), "w1"),
                           numpy_helper.from_array(rng.normal(0, 0.5, (2, 4, 1, 1)).astype(np.float32), "w2"),
                           numpy_helper.from_array(np.full(4, -6.0, np.float32), "b1"),
                           numpy_helper.from_array(np.full((4, 1, 1), 0.01, np.float32), "slope")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    p = tmp_path / "p.onnx"
    onnx.save(m, str(p))
    x = rng.uniform(-1, 1, (16, 3, 6, 6)).astype(np.float32)
    amax = calibrate(p, x, ["minmax"]).amax["minmax"]
    scorer = Scorer(m, amax, [({"input": x[:8]}, None), ({"input": x[8:]}, None)], "output_sqnr")
    ranking = rank(scorer, quantizable_layers(m))
    (tmp_path / "r.yaml").write_text("name: p\nmodel: p.onnx\ncalibration_data: {kind: npy, path: x.npy}\n"
                                     "sensitivity: {pin_int8: true}\nbackend: {kind: tensorrt}\n")
    np.save(tmp_path / "x.npy", x)
    mem = Memory()
    trt = make_trt("8.6.0", mem)
    trt.simulate_int8, trt.prelu_reads_int8 = True, prelu_reads_int8
    e = engine_search(scorer, ranking, 200.0, p, amax, load_recipe(tmp_path / "r.yaml"), trt=trt, cuda=mem)
    by_k = {r["float_layers"]: r for r in e["variants"]}
    for row in e["variants"]:
        assert row["engine_score"] == pytest.approx(row["as_built_score"], abs=1e-3), row
    assert by_k[0]["engine_precisions"]["prelu1"] != "int8"
    if prelu_reads_int8:
        for row in e["variants"]:
            assert row["engine_score"] == pytest.approx(row["sim_score"], abs=1e-3), row
        assert by_k[0]["placement_score"] > by_k[0]["sim_score"] + 1  # the rounding into the PRelu costs the engine
    else:  # the prediction guessed the rounding; the engine as built did not round, as the placement
        assert by_k[0]["engine_score"] > by_k[0]["sim_score"] + 1
        assert by_k[0]["engine_score"] == pytest.approx(by_k[0]["placement_score"], abs=1e-3)


def test_engine_scorer_drops_a_pin_that_matches_no_layer(tmp_path):
    from calib.runners.tensorrt.builder import BuildSpec
    from calib.search.engines import EngineScorer
    from standin.tensorrt import Memory, make_trt

    p = sensitive_model(tmp_path / "s.onnx")
    x = np.random.default_rng(0).uniform(0.1, 1.0, (8, 2, 4, 4)).astype(np.float32)
    amax = calibrate(p, x, ["minmax"]).amax["minmax"]
    scorer = Scorer(onnx.load(str(p)), amax, [({"input": x}, None)], "output_sqnr")
    mem = Memory()
    trt = make_trt("8.6.0", mem)
    trt.simulate_int8 = True
    e = EngineScorer(scorer, p, amax, BuildSpec(precisions=("int8", "fp16"), batch_size=8), "fp16",
                     ("op:Conv=int8", "op:Softmax=int8"), trt=trt, cuda=mem)
    assert e.score(("convB",)) == pytest.approx(scorer.score(("convB",)), abs=1e-3)
    assert e.pin == ("op:Conv=int8",)


def test_sensitivity_reuses_its_search_only_for_the_same_scales_data_and_settings(tmp_path, monkeypatch):
    import json

    from calib.cli import main
    import calib.search.sensitivity as sens

    sensitive_model(tmp_path / "s.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0.1, 1, (8, 2, 4, 4)).astype(np.float32))
    recipe = """
name: s
model: s.onnx
calibration_data: {kind: npy, path: x.npy}
sensitivity: {metric: output_sqnr, min_sqnr_db: %s, samples: 8}
output: out
"""
    (tmp_path / "r.yaml").write_text(recipe % 30)
    calls = []
    real_rank = sens.rank
    monkeypatch.setattr(sens, "rank", lambda *a, **k: calls.append(1) or real_rank(*a, **k))
    run = lambda: CliRunner().invoke(main, ["--quiet", "sensitivity", str(tmp_path / "r.yaml")])  # noqa: E731
    out = tmp_path / "out" / "sensitivity"
    assert run().exit_code == 0 and len(calls) == 1
    first = json.loads((out / "sensitivity.json").read_text())
    r = run()
    assert r.exit_code == 0, r.output
    assert len(calls) == 1  # the ranking and search came from search-cache.json
    again = json.loads((out / "sensitivity.json").read_text())
    assert again["float_layers"] == first["float_layers"] == ["convB"] and again["ranking"] == first["ranking"]
    (tmp_path / "r.yaml").write_text(recipe % 31)  # another budget: search again
    assert run().exit_code == 0 and len(calls) == 2
    (out / "search-cache.json").write_text("{not json")  # a damaged cache is not trusted ...
    r = run()  # ... nor replaced: no longer the file calib wrote, it is the user's to remove
    assert r.exit_code == 2 and "search-cache.json" in r.output and r.output.count("error:") == 1, r.output
    assert (out / "search-cache.json").read_text() == "{not json" and len(calls) == 3
    (out / "search-cache.json").unlink()
    assert run().exit_code == 0 and len(calls) == 4
    assert json.loads((out / "search-cache.json").read_text())["ranking"] == again["ranking"]


class _Needs:
    """A scorer whose target is met exactly when every layer of `needed` is in float; counts what it measures."""

    def __init__(self, needed, late_after=None):
        self.needed, self.late_after, self.calls, self.seen = set(needed), late_after, 0, {}

    def score(self, layers, overrides=None):
        from calib.search.fallback import OutOfTime

        key = frozenset(layers)
        if key not in self.seen:
            if self.late_after is not None and self.calls >= self.late_after:
                raise OutOfTime()
            self.calls += 1
            self.seen[key] = 1.0 if self.needed <= key else 0.0
        return self.seen[key]


def test_prune_gives_back_every_layer_the_target_does_not_need():
    from calib.search.fallback import prune

    layers = [f"L{i}" for i in range(40)]
    s = _Needs({"L3", "L17"})
    got = prune(s, layers, 1.0)
    assert sorted(got["float_layers"]) == ["L17", "L3"] and got["pruned"] == 38 and not got["out_of_time"]
    assert s.calls < 40  # blocks, not one layer at a time
    assert prune(_Needs(layers), layers, 1.0)["float_layers"] == layers  # each one needed: all kept


def test_prune_out_of_time_answers_with_a_measured_set_that_meets():
    from calib.search.fallback import prune

    layers = [f"L{i}" for i in range(16)]
    s = _Needs({"L0", "L9"}, late_after=0)
    s.seen[frozenset(layers)] = 1.0  # the search measured the whole prefix
    s.late_after = 3
    got = prune(s, layers, 1.0)
    assert got["out_of_time"] and got["score"] == 1.0
    assert {"L0", "L9"} <= set(got["float_layers"]) and len(got["float_layers"]) < 16


class _Noisy:
    """A scorer where each layer in INT8 adds its own output noise: the SQNR is that of the noises added up."""

    def __init__(self, noise: dict):
        self.noise, self.fp32_score, self.runs = noise, float("inf"), 0

    def _db(self, float_layers):
        import math

        total = sum(v for n, v in self.noise.items() if n not in set(float_layers))
        return math.inf if total == 0 else -10 * math.log10(total)

    def score(self, layers, overrides=None):
        return self._db(layers)

    def sqnr(self, layers, overrides=None):
        return self._db(layers)


def test_rank_by_noise_gives_back_the_noisiest_layers_first():
    from calib.search.fallback import rank_by_noise, search

    noise = {"a": 1e-4, "b": 3e-2, "c": 1e-5, "d": 2e-3, "e": 5e-2}
    ranking = rank_by_noise(_Noisy(noise), list(noise))
    assert [r["layer"] for r in ranking] == ["e", "b", "d", "a", "c"]
    found = search(_Noisy(noise), ranking, 25.0, chart=False)  # 25 dB: noise at most 3.2e-3 in all
    assert found["float_layers"] == ["e", "b"]


def test_search_past_the_deadline_before_its_first_variant_answers_unmet():
    from calib.search.fallback import search

    s = _Needs({"L0"}, late_after=0)
    s.fp32_score, s.runs = 1.0, 0
    found = search(s, [{"layer": "L0"}, {"layer": "L1"}], 1.0, overrides={"t": 1.0}, chart=False)
    assert found["out_of_time"] and not found["met"] and found["float_layers"] == []


def test_rank_by_noise_stops_at_its_time_and_keeps_the_rest_unranked():
    import time

    from calib.search.fallback import rank_by_noise

    noise = {"a": 1e-4, "b": 3e-2}
    ranking = rank_by_noise(_Noisy(noise), list(noise), stop_by=time.monotonic() - 1)
    assert ranking == [{"layer": "a", "ranked": False}, {"layer": "b", "ranked": False}]
