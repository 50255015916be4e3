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


def _evaluate(tmp_path, tiny_model, tiny_data, *extra, console=None):
    r = CliRunner().invoke(main, ["calibrate", str(tiny_model), "--data", str(tiny_data), "--algo", "minmax,mse",
                                  "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["evaluate", str(tiny_model), "--cache", str(tmp_path / "c" / "minmax.cache"),
                                  "--cache", str(tmp_path / "c" / "mse.cache"), "--data", str(tiny_data),
                                  "--task", "classification", "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    if console is not None:
        console.append(r.output)
    return out


@pytest.mark.parametrize("layerwise", [True, False])
def test_report_first_screen(tmp_path, tiny_model, tiny_data, layerwise):
    console = []
    out = _evaluate(tmp_path, tiny_model, tiny_data, *([] if layerwise else ["--no-layerwise"]), console=console)
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
    assert "Evaluate on more samples (a --data with more samples or a larger --limit" in first  # no recipe here
    assert "calibrated on 20 samples" in first  # from the caches' sidecars
    assert f"ship {tmp_path / 'c' / (d['ship'] + '.cache')} ({d['ship']}): provisionally" in console[0]
    assert ("Per-layer figures below" in first) == layerwise
    assert "top-1 agreement with FP32 (95 % CI, n=20 samples)" in first and "| drop |" not in md
    deploy = md.split("## Deploy")[1].split("## ")[0]
    cache = str(tmp_path / "c" / f"{d['ship']}.cache")
    assert f"trtexec --onnx={tiny_model} --int8 --fp16 --calib={cache}" in deploy
    assert f"calib build {tiny_model} --cache {cache}" in deploy
    qdq = f"tiny.{d['ship']}.qdq.onnx"  # the Q/DQ path: the command that makes the model, then its engine
    assert f"calib cache convert {cache} --model {tiny_model} --to qdq -o {qdq}\ntrtexec --onnx={qdq} " in deploy
    assert "calib sensitivity" in md and "equaliz" in md and "`recipes/mobilenet_v2.yaml`" in md  # a classifier
    assert "{'" not in md and "{'" not in page  # no raw Python dicts
    for head in re.findall(r"^\| (.+) \|$", md, re.M)[:1]:
        for cell in head.split(" | "):
            assert cell.replace("%", "%") in page.replace("&#x27;", "'")
    assert ("## Worst layers" in md) == layerwise and ("Per-layer SQNR" in page) == layerwise
    assert "<table><tr></tr></table>" not in page and not re.search(r"## [^\n]+\n\n## ", md)  # no empty sections


def test_deploy_paths_are_shown_as_a_user_types_them(tmp_path, monkeypatch):
    from pathlib import Path

    from calib.evaluate.deploy_doc import deploy_commands
    from calib.evaluate.report_doc import shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "recipes" / ".." / "runs" / "yolo" / "mse.cache") == "runs/yolo/mse.cache"
    home_file = Path.home() / ".cache" / "calib" / "zoo" / "m.onnx"
    assert shown_path(home_file) == "~/.cache/calib/zoo/m.onnx"
    report = {"out_dir": str(tmp_path / "runs" / "x"), "model_file": str(home_file),
              "caches": {"mse": str(tmp_path / "runs" / "x" / "mse.cache")}, "qdq_model": "m.mse.qdq.onnx"}
    text = deploy_commands(report, "mse")
    assert "trtexec --onnx=~/.cache/calib/zoo/m.onnx --int8 --fp16 --calib=runs/x/mse.cache" in text
    assert "trtexec --onnx=runs/x/m.mse.qdq.onnx" in text


def _deploy_lines(md: str) -> list[str]:
    block = md.split("## Deploy")[1].split("```sh\n")[1].split("```")[0]
    return [ln for ln in block.splitlines() if ln and not ln.startswith("#")]


def test_printed_commands_are_right(tmp_path, tiny_model, tiny_data, monkeypatch):
    """As a user runs them from where they ran calib: every file the Deploy commands read exists, and the Q/DQ
    model command (which runs without a GPU) writes the model the next lines build, with the layers kept in float
    (--exclude) left without Q/DQ there as in the evaluation, and asked in FP16 of TensorRT. The FP16+INT8 model
    is made with the same exclusions and built by the strongly typed lines (tests/test_deploy_commands.py checks
    every trtexec line against its TensorRT versions)."""
    import shlex

    from calib.quantize.qdq import count_qdq

    monkeypatch.chdir(tmp_path)
    out = _evaluate(tmp_path, tiny_model, tiny_data, "--exclude", "conv2")
    lines = _deploy_lines((out / "report.md").read_text())
    trt, build, convert, trt_qdq, build_qdq, convert_fp16, build_fp16, trt10, trt11 = lines
    assert trt.startswith("trtexec --onnx=tiny.onnx --int8 --fp16 --calib=c/") and \
        " --precisionConstraints=prefer --layerPrecisions=conv2:fp16 " in trt
    assert build.startswith("calib build tiny.onnx --cache c/") and " --layer-precision conv2=fp16 " in build
    for line in (trt, build):
        for arg in shlex.split(line):
            value = arg.split("=", 1)[1] if arg.startswith(("--onnx=", "--calib=")) else arg
            if value.endswith((".onnx", ".cache")):
                assert (tmp_path / value).is_file(), (line, value)
    args = shlex.split(convert)
    assert args[:3] == ["calib", "cache", "convert"] and args[-2:] == ["--exclude", "conv2"]
    r = CliRunner().invoke(main, args[1:])
    assert r.exit_code == 0, r.output
    qdq = tmp_path / shlex.split(trt_qdq)[1].removeprefix("--onnx=")
    assert qdq.is_file() and shlex.split(build_qdq)[:3] == ["calib", "build", str(qdq.relative_to(tmp_path))]
    fp16 = shlex.split(convert_fp16)
    assert fp16[:3] == ["calib", "cache", "convert"] and fp16[3] == args[3] and fp16[-2:] == ["--exclude", "conv2"]
    assert "--float-type fp16" in convert_fp16
    assert fp16[fp16.index("-o") + 1] == qdq.name.replace(".qdq.", ".fp16.qdq.")
    for line in (build_fp16, trt10, trt11):
        assert "tiny." in line and ".fp16.qdq.onnx" in line and "--int8" not in line and "--fp16" not in line
    assert "--stronglyTyped" in trt10 and "--stronglyTyped" not in trt11 and "--strongly-typed" in build_fp16
    import onnx

    def producers_of_conv2(model):
        made = {o: n.op_type for n in model.graph.node for o in n.output}
        conv2 = next(n for n in model.graph.node if n.name == "conv2")
        return {made.get(i) for i in conv2.input}

    assert "DequantizeLinear" not in producers_of_conv2(onnx.load(str(qdq)))  # kept in float, as evaluated
    full = tmp_path / "full.qdq.onnx"
    r = CliRunner().invoke(main, ["cache", "convert", args[3], "--model", "tiny.onnx", "--to", "qdq", "-o", str(full)])
    assert r.exit_code == 0, r.output
    assert "DequantizeLinear" in producers_of_conv2(onnx.load(str(full)))
    assert count_qdq(onnx.load(str(qdq))) < count_qdq(onnx.load(str(full)))


def test_ship_sentence_reads_as_a_sentence():
    from calib.evaluate.report_doc import num, ship_sentence

    s = {"task": "detection", "decision": {"status": "best", "ship": "mse", "reason": "mse is better than the "
                                           "runner-up beyond noise, mAP50:95 vs FP32 +0.044 over minmax"}}
    (kind, text), = ship_sentence(s, {"mse": "runs/x/mse.cache"})
    assert text == ("**Ship `mse.cache`**: mse is better than the runner-up beyond noise, mAP50:95 vs FP32 +0.044 "
                    "over minmax.")
    s["decision"] = {"status": "too_small", "ship": "mse", "reason": "r"}
    assert "(the recipe's evaluation_data)" in ship_sentence(s, {}, from_recipe=True)[1][1]
    assert "(a --data with more images or a larger --limit" in ship_sentence(s, {})[1][1]
    assert num(-1e-9) == "0.000" and num(-0.0004) == "0.000" and num(-0.0006) == "-0.001" and num(-1e-3, "x_db") == "0.0"


def test_no_chart_text_below_9_points():
    """Every size calib sets on a chart (report, histograms, the sensitivity curve) is at least 9 pt."""
    from conftest import ROOT

    sizes = {}
    for f in (ROOT / "calib").rglob("*.py"):
        for m in re.finditer(r"(?:fontsize|labelsize)=(\d+(?:\.\d+)?)", f.read_text()):
            sizes[f"{f.name}:{m.start()}"] = float(m.group(1))
    assert sizes and min(sizes.values()) >= 9, {k: v for k, v in sizes.items() if v < 9}


def test_method_and_reference_text():
    from calib.evaluate.report_doc import fp32_blocks, method_text

    b = {"level": 0.95, "unit": "image", "resamples": 1000, "seed": 0, "resampled": "groups", "groups": 18}
    det = method_text({"task": "detection", "bootstrap": b, "worst_layers": {}})
    assert "over source photos (18 groups of dependent images, e.g. crops of one photo, resampled whole; 1000 " \
           "resamples, seed 0)" in det and "McNemar" not in det and "Per-layer" not in det
    cls = method_text({"task": "classification", "bootstrap": dict(b, unit="sample"), "worst_layers": {"a": [1]}})
    assert "resampled whole; top-1 agreement compared with the clustered McNemar test; 1000 resamples" in cls
    assert "Per-layer figures below" in cls
    assert "over samples (1000 resamples, seed 0)" in method_text({"task": "classification", "worst_layers": {},
                                                                   "bootstrap": dict(b, unit="sample", resampled=None)})
    (_, items), = fp32_blocks({"fp32_task": {"vs_fp32": {"map50_95": 1.0}}},
                              {"task": "detection", "fp32_boxes": 66, "conf_threshold": 0.25})
    assert "its 66 boxes of confidence 0.25 or more are the reference of every 'vs FP32' figure" in items[0]


def test_per_layer_chart_by_tensor_name_without_infinite_points():
    import matplotlib.pyplot as plt

    from calib.evaluate.report import layer_figure

    def layer(t, db):
        return {"tensor": t, "op_type": "Conv", "sqnr_db": db}

    ev = {"configs": {"minmax": {"layers": [layer("input", math.inf), layer("conv1", 30.0), layer("head", 12.5)]},
                      "mse": {"layers": [layer("input", math.inf), layer("conv1", 33.0), layer("head", 15.0)]},
                      "fp16": {"layers": []}}}
    fig = layer_figure(ev, "mse")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["input", "conv1", "head"]  # names, not numbers
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"minmax", "mse"}
    assert list(lines["mse"].get_xdata()) == [33.0, 15.0] and list(lines["mse"].get_ydata()) == [1, 2]  # inf left out
    assert ax.get_xlim()[1] < 40  # no point capped at a made-up ceiling
    assert min(t.get_fontsize() for t in ax.get_legend().get_texts()) >= 9
    plt.close(fig)
    assert layer_figure({"configs": {"a": {"layers": []}}}) is None  # --no-layerwise: no chart
    assert layer_figure({"configs": {"a": {"layers": [layer("x", math.nan), layer("y", math.inf)]}}}) is None
