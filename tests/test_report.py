"""The report: what to ship and how sure on the first screen, named columns, no empty sections, strict JSON."""
import json
import math
import re

import pytest
from click.testing import CliRunner

from calib.cli import main
from calib.evaluate.report import _columns, report_json


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_report_json_is_strict():
    text = report_json({"a": math.inf, "b": [1.0, -math.inf, math.nan], "c": {"d": 2}})
    with pytest.raises(ValueError):
        _strict('{"x": Infinity}')
    got = _strict(text)
    assert got["a"] is None and got["b"] == [1.0, None, None] and got["c"] == {"d": 2}


def test_columns_primary_first_and_constant_last():
    rows = {"a": {"out_cosine": 1.0, "agreement_top1": 0.9, "out_sqnr_db": 30.0, "agreement_top5": 1.0},
            "b": {"out_cosine": 1.0, "agreement_top1": 0.8, "out_sqnr_db": 31.0, "agreement_top5": 1.0}}
    assert _columns(rows, "classification", "agreement_top1") == ["agreement_top1", "out_sqnr_db", "agreement_top5",
                                                                  "out_cosine"]


def _evaluate(tmp_path, tiny_model, tiny_data, *extra):
    r = CliRunner().invoke(main, ["calibrate", str(tiny_model), "--data", str(tiny_data), "--algo", "minmax,mse",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["evaluate", str(tiny_model), "--cache", str(tmp_path / "c" / "minmax.cache"),
                                  "--cache", str(tmp_path / "c" / "mse.cache"), "--data", str(tiny_data),
                                  "--task", "classification", "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("layerwise", [True, False])
def test_report_first_screen(tmp_path, tiny_model, tiny_data, layerwise):
    out = _evaluate(tmp_path, tiny_model, tiny_data, *([] if layerwise else ["--no-layerwise"]))
    rep = _strict((out / "report.json").read_text())
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    s = rep["summary"]
    # every figure has an interval and its sample count; the decision has its reason
    for name in ("minmax", "mse"):
        for key in ("agreement_top1", "logits_sqnr_db", "logits_cosine", "drop"):
            f = s["intervals"][name][key]
            assert f["n"] == 20 and len(f["ci95"]) == 2 and f["ci95"][0] <= f["ci95"][1]
        assert set(s["rows"][name]) <= set(s["intervals"][name])  # no figure without its interval
        assert s["intervals"][name]["drop"]["value"] == pytest.approx(1 - s["rows"][name]["agreement_top1"])
        for layer in rep["evaluation"]["configs"][name]["layers"] if layerwise else ():
            assert layer["n"] == 20 and len(layer["sqnr_ci95"]) == 2 and len(layer["cosine_ci95"]) == 2
    table = md.split("## Deploy")[0].split("\n| algorithm")[1].split("\n\n")[0]
    for row in table.splitlines()[2:]:  # every cell of the results table: value (low to high)
        assert all(re.fullmatch(r"-?[\d.]+ \(-?[\d.]+ to -?[\d.]+\)|inf.*", c) for c in row.strip("| ").split(" | ")[1:])
    d = s["decision"]
    assert d["status"] == "too_small" and d["ship"] == s["best"] and "only 20 evaluation samples" in d["reason"]
    first = md.split("## Deploy")[0]
    assert f"**Ship `{d['ship']}.cache`**" in first and "Warning: too small an evaluation" in first
    assert "top-1 agreement with FP32 (95 % CI, n=20 samples)" in first and "| drop |" not in md
    deploy = md.split("## Deploy")[1].split("## ")[0]
    cache = str(tmp_path / "c" / f"{d['ship']}.cache")
    assert f"trtexec --onnx={tiny_model} --int8 --fp16 --calib={cache}" in deploy
    assert f"calib build {tiny_model} --cache {cache}" in deploy
    assert "calib sensitivity" in md and "equaliz" in md
    assert "{'" not in md and "{'" not in page  # no raw Python dicts
    for head in re.findall(r"^\| (.+) \|$", md, re.M)[:1]:
        for cell in head.split(" | "):
            assert cell.replace("%", "%") in page.replace("&#x27;", "'")
    assert ("## Worst layers" in md) == layerwise and ("Per-layer SQNR" in page) == layerwise
    assert "<table><tr></tr></table>" not in page and not re.search(r"## [^\n]+\n\n## ", md)  # no empty sections


def test_deploy_paths_are_shown_as_a_user_types_them(tmp_path, monkeypatch):
    from pathlib import Path

    from calib.evaluate.report_doc import deploy_commands, shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "recipes" / ".." / "runs" / "yolo" / "mse.cache") == "runs/yolo/mse.cache"
    home_file = Path.home() / ".cache" / "calib" / "zoo" / "m.onnx"
    assert shown_path(home_file) == "~/.cache/calib/zoo/m.onnx"
    report = {"out_dir": str(tmp_path / "runs" / "x"), "model_file": str(home_file),
              "caches": {"mse": str(tmp_path / "runs" / "x" / "mse.cache")}, "qdq_model": "m.mse.qdq.onnx"}
    text = deploy_commands(report, "mse")
    assert "trtexec --onnx=~/.cache/calib/zoo/m.onnx --int8 --fp16 --calib=runs/x/mse.cache" in text
    assert "trtexec --onnx=runs/x/m.mse.qdq.onnx" in text
