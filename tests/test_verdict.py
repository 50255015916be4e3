"""The absolute verdict beside the relative one (close to FP32 or not, the thresholds, the next command), and the
proxy caveat where no task metric decided."""
import json
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from calib.cli import main
from calib.evaluate.decision import decide
from calib.evaluate.report import report_json, ship_line
from calib.evaluate.verdict import PROXY, THRESHOLDS_TEXT, verdict, verdict_line


def _report(task, metric, value, ci=None, **extra):
    layers = [{"tensor": "sig", "op_type": "Sigmoid", "sqnr_db": 3.0}, {"tensor": "conv2", "op_type": "Conv",
                                                                        "sqnr_db": 9.5}]
    s = {"task": task, "decision": {"ship": "mse", "metric": metric, "status": "best"},
         "rows": {"mse": {metric: value}}, "intervals": {"mse": {metric: {"value": value, "ci95": ci, "n": 100}}},
         "worst_layers": {"mse": layers}}
    return {"summary": s, "caches": {"mse": "c/mse.cache"}, **extra}


def test_close_states_the_threshold_and_a_low_interval():
    v = verdict(_report("classification", "agreement_top1", 0.995, [0.985, 1.0]))
    assert v["close"] is True and v["next"] is None and v["threshold"] == 0.99
    assert v["text"].startswith("**Close to FP32**: top-1 agreement with FP32 99.5 % for mse, at or above the "
                                "99.0 % calib calls close")
    assert THRESHOLDS_TEXT in v["text"]
    assert "Its 95 % interval reaches down to 98.5 %, below the threshold." in v["text"]
    assert verdict(_report("classification", "agreement_top1", 0.989))["close"] is False  # the boundary


def test_not_close_after_calib_run_names_the_sensitivity_command():
    v = verdict(_report("classification", "agreement_top1", 0.90, recipe_file="recipes/my model.yaml"))
    assert v["close"] is False and v["text"].startswith("**Not close to FP32**: top-1 agreement with FP32 90.0 %")
    assert ("`calib sensitivity 'recipes/my model.yaml' --set sensitivity.algorithm=mse --set "
            "sensitivity.metric=top1_agreement --set sensitivity.max_drop=0.01`") in v["next"]
    d = verdict(_report("detection", "map50_95_vs_fp32", 0.78, recipe_file="r.yaml"))
    assert d["close"] is False and "--set sensitivity.metric=map50 --set sensitivity.max_drop=0.05`" in d["next"]
    line = verdict_line({"summary": _report("detection", "map50_95_vs_fp32", 0.78)["summary"], "verdict": d})
    assert line == ("NOT close to FP32: mAP50:95 vs FP32 0.780 (threshold 0.950); next: calib recover r.yaml "
                    "--target 'map50_95_vs_fp32>=0.95' --out recover")


def test_not_close_after_calib_evaluate_names_the_exclusion_of_the_worst_weighted_layer():
    rep = _report("outputs", "out_sqnr_db", 12.0, rerun="calib evaluate m.onnx --data x.npy", exclude=["head*"])
    v = verdict(rep)
    assert v["close"] is False and v["proxy"] is True
    assert ("`calib evaluate m.onnx --data x.npy --cache c/mse.cache --exclude 'head*' --exclude conv2 --out "
            "mse-exclude`: the same evaluation with the worst layer (Conv `conv2`, 9.5 dB)") in v["next"]
    assert "calib sensitivity RECIPE --set sensitivity.algorithm=mse --set sensitivity.metric=output_sqnr --set " \
           "sensitivity.min_sqnr_db=20" in v["next"]
    assert "a proxy, not the task's accuracy" in v["text"]


def test_a_proxy_difference_is_never_worded_as_the_better_model():
    ev = {"task": "outputs", "primary_metric": "out_sqnr_db", "samples": 200,
          "configs": {n: {"intervals": {"out_sqnr_db": {"value": v, "ci95": [v - 1, v + 1], "n": 200}}}
                      for n, v in (("mse", 30.0), ("minmax", 27.4))},
          "paired": [{"a": "mse", "b": "minmax", "diff": 2.6, "ci95": [1.9, 3.3], "n": 200,
                      "method": "paired bootstrap", "p_value": 0.001, "significant": True}]}
    d = decide(ev, ["mse", "minmax"])
    assert d["status"] == "best" and "is better than" not in d["reason"]
    assert d["reason"].startswith("mse's outputs are closer to FP32 than the runner-up's beyond noise")
    assert "output SQNR is a proxy that can disagree with the model's task" in d["reason"]
    assert "outputs closer to FP32 than minmax's beyond noise (output SQNR, a proxy for the task)" in \
        ship_line({"summary": {"decision": d}, "caches": {}})
    ev["task"], ev["primary_metric"] = "classification", "agreement_top1"  # a task metric keeps its wording
    for c in ev["configs"].values():
        c["intervals"]["agreement_top1"] = c["intervals"].pop("out_sqnr_db")
    ev["paired"][0]["metric"] = "agreement_top1"
    ev["paired"][0]["method"] = "McNemar"
    assert "mse is better than the runner-up beyond noise" in decide(ev, ["mse", "minmax"])["reason"]


@pytest.fixture
def caches(tmp_path, tiny_model, tiny_data):
    r = CliRunner().invoke(main, ["calibrate", str(tiny_model), "--data", str(tiny_data), "--algo", "minmax",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    from calib.quantize.cache import read_cache, write_cache

    amax = read_cache(tmp_path / "c" / "minmax.cache").amaxes()
    write_cache(tmp_path / "bad.cache", {k: v / 50 for k, v in amax.items()})  # clips nearly everything
    return tmp_path / "c" / "minmax.cache", tmp_path / "bad.cache"


def _first_screen(out):
    return (out / "report.md").read_text().split("## Deploy")[0]


def test_cli_report_first_screen_close_and_caveat(caches, tiny_model, tiny_data, tmp_path):
    good, _ = caches
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["evaluate", str(tiny_model), "--cache", str(good), "--data", str(tiny_data),
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    v = rep["verdict"]
    assert v["metric"] == "logits_sqnr_db" and v["close"] is True and v["value"] > 20  # a clean 8-bit simulation
    first = _first_screen(out)
    assert "**Close to FP32**: logits SQNR vs FP32" in first and PROXY in first
    assert f"close to FP32: logits SQNR vs FP32 {v['value']:.1f} dB (threshold 20.0 dB), output SQNR is a proxy " \
           "for the task" in r.output
    r = CliRunner().invoke(main, ["evaluate", str(tiny_model), "--cache", str(good), "--data", str(tiny_data),
                                  "--task", "classification", "--out", str(tmp_path / "cls")])
    assert r.exit_code == 0, r.output
    first = _first_screen(tmp_path / "cls")
    assert PROXY not in first and "to FP32**: top-1 agreement with FP32" in first


def test_cli_not_close_names_a_command_that_runs(caches, tiny_model, tiny_data, tmp_path, monkeypatch):
    _, bad = caches
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["evaluate", str(tiny_model), "--cache", str(bad), "--data", str(tiny_data),
                                  "--ignore-sidecar", "--out", "rep"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    v = rep["verdict"]
    assert v["close"] is False and v["value"] < 20
    first = _first_screen(tmp_path / "rep")
    assert "**Not close to FP32**" in first and "Next step: `calib recover " in first
    assert "NOT close to FP32: logits SQNR vs FP32" in r.output and "; next: calib recover " in r.output
    recover = shlex.split(v["next"].split("`")[1])  # the user's own model, data and flags, the threshold as target
    assert recover[:3] == ["calib", "recover", str(tiny_model)] and "--data" in recover
    assert recover[recover.index("--target") + 1] == "logits_sqnr_db>=20"
    r = CliRunner().invoke(main, ["-q", *recover[1:], "--calib-samples", "8"])  # 20 samples: 12 held out
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "recover" / "recover.json").read_text())["met"]
    command = next(c for c in v["next"].split("`") if c.startswith("calib evaluate"))
    args = shlex.split(command)
    assert args[:3] == ["calib", "evaluate", str(tiny_model)] and "--ignore-sidecar" in args
    layer = args[args.index("--exclude") + 1]
    assert layer in {"conv1", "conv2", "logits"}  # a weighted layer's output
    r = CliRunner().invoke(main, args[1:])
    assert r.exit_code == 0, r.output
    after = json.loads((tmp_path / "bad-exclude" / "report.json").read_text())
    assert after["exclude"] == [layer] and np.isfinite(after["verdict"]["value"])


def test_no_verdict_without_a_value():
    v = verdict(_report("detection", "map50_95_vs_fp32", None))
    assert v["close"] is None and v["text"] == "calib cannot say whether mse is close to FP32: no value of mAP50:95 " \
                                               "vs FP32 for mse."
    assert verdict_line({"verdict": v}) == v["text"]


def test_an_infinite_sqnr_read_back_from_report_json():
    v = verdict(_report("outputs", "out_sqnr_db", float("inf")))
    assert v["close"] is True
    back = json.loads(report_json({"verdict": v}))["verdict"]  # strict JSON: inf is null
    assert back["value"] is None and verdict_line({"verdict": back}).startswith(
        "close to FP32: out SQNR vs FP32 inf (threshold 20.0 dB)")
