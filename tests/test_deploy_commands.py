"""Every trtexec command calib prints (the report's Deploy section) or documents (README.md, docs/*.md) uses only
options that the TensorRT versions it is given for have: each command is assigned to the versions its section names
("# TensorRT 8.6 to 10.x, ...", "### TensorRT 11.x: ...") and each of its options is looked up in those versions'
option lists, read from NVIDIA's trtexec source (tests/data/trtexec/<version>.txt, each naming its tag and files)."""
from __future__ import annotations

import re
import shlex

import pytest

from calib.evaluate.deploy_doc import deploy_commands
from conftest import ROOT

LISTS = ROOT / "tests" / "data" / "trtexec"
REMOVED_IN_11 = {"--int8", "--fp16", "--best", "--calib", "--precisionConstraints", "--layerPrecisions",
                 "--layerOutputTypes"}
VERSION = re.compile(r"\b(\d+)\.(\d+|x)\b")


def _key(text: str) -> tuple[int, float]:
    major, minor = VERSION.fullmatch(text).groups()
    return int(major), float("inf") if minor == "x" else int(minor)


def option_lists() -> dict[tuple[int, int], set[str]]:
    out = {}
    for f in sorted(LISTS.glob("*.txt")):
        names = [ln.strip() for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        out[_key(f.stem)] = set(names)
    return out


OPTIONS = option_lists()


def versions_named(title: str) -> list[tuple[int, int]]:
    """The versions with an option list that a section title names between "TensorRT" and its first colon:
    "8.6 to 10.x" (a range), "10.x" (every 10 release), "11.0" (one); [] when it names none."""
    m = re.search(r"\bTensorRT ([^:]*)", title)
    if not m:
        return []
    phrase, found = m.group(1), set()
    for lo, hi in re.findall(r"(\d+\.(?:\d+|x)) to (\d+\.(?:\d+|x))", phrase):
        low = _key(lo.replace(".x", ".0"))
        found |= {v for v in OPTIONS if low <= v <= _key(hi)}
        phrase = phrase.replace(f"{lo} to {hi}", "")
    for token in (t.group(0) for t in VERSION.finditer(phrase)):
        major, minor = _key(token)
        got = {v for v in OPTIONS if v[0] == major and minor in (v[1], float("inf"))}
        if not got:
            raise AssertionError(f"{title!r}: no option list for TensorRT {token} in {LISTS.name}/")
        found |= got
    return sorted(found)


def trtexec_problems(line: str, versions: list[tuple[int, int]]) -> list[str]:
    """What is wrong with one trtexec command for these versions: an option one of them lacks, a TensorRT 11
    command with a flag 11 removed, an argument that is no option, or no version at all."""
    if not versions:
        return [f"{line}: under no TensorRT version"]
    args = shlex.split(line)
    assert args[0] == "trtexec", line
    problems = []
    for a in args[1:]:
        if not a.startswith("--"):
            problems.append(f"{line}: {a!r} is not an option")
            continue
        name = a.split("=", 1)[0]
        for v in versions:
            if name not in OPTIONS[v]:
                problems.append(f"{line}: TensorRT {v[0]}.{v[1]} has no {name}")
            if v[0] >= 11 and name in REMOVED_IN_11:
                problems.append(f"{line}: TensorRT 11 removed {name}")
    return problems


def commands_by_version(text: str, markdown: bool = True) -> list[tuple[str, list]]:
    """(trtexec command, versions) for every trtexec command of a text: the lines of its indented or plain command
    blocks and `trtexec --onnx=...` spans inline. A Markdown heading (#, ## or ###) or a comment line naming
    TensorRT versions sets them; a heading naming none clears them."""
    out, versions = [], []
    for raw in text.splitlines():
        line = raw.strip()
        if markdown and re.match(r"#{1,3} ", raw):
            versions = versions_named(raw)
        elif line.startswith("#") and versions_named(line):
            versions = versions_named(line)
        elif line.startswith("trtexec "):
            out.append((line.split("  #")[0], versions))
        else:
            out += [(span, versions) for span in re.findall(r"`(trtexec --onnx=[^`]*)`", raw)]
    return out


def _report(**extra) -> dict:
    return {"out_dir": "runs/x", "model_file": "m.onnx", "caches": {"mse": "runs/x/mse.cache"}, **extra}


VARIANTS = {
    "as calib evaluate writes it": _report(),
    "a run's Q/DQ models and ranges": _report(qdq_model="m.mse.qdq.onnx", fp16_model="m.mse.fp16.qdq.onnx",
                                              ranges="ranges.json"),
    "ranges, no FP16+INT8 model": _report(qdq_model="m.mse.qdq.onnx", ranges="ranges.json"),
    "with layers kept in float": _report(exclude=["conv*"], float_layers=["conv1", "conv2"]),
    "kept in float, with ranges": _report(exclude=["conv2"], float_layers=["conv2"], ranges="ranges.json"),
    "kept in float, writers typed": _report(exclude=["conv2"], float_layers=["conv2"], float_writers=["relu1"]),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_every_printed_trtexec_command_exists_in_its_versions(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    text = deploy_commands(VARIANTS[name], "mse")
    found = commands_by_version(text, markdown=False)
    problems = [p for line, versions in found for p in trtexec_problems(line, versions)]
    assert not problems, "\n".join(problems)
    majors = {v[0] for _, versions in found for v in versions}
    assert majors == {8, 10, 11}, found
    eleven = [(line, versions) for line, versions in found if any(v[0] >= 11 for v in versions)]
    assert eleven and all(v[0] >= 11 for _, versions in eleven for v in versions)  # 10.x needs --stronglyTyped
    assert not [line for line, _ in eleven if set(re.findall(r"--\w+", line)) & REMOVED_IN_11]


def test_the_deploy_commands_per_version():
    """Known answers: the cache for 8.6 to 10.x (the layers kept in float asked in FP16 there), the Q/DQ model
    weakly typed, the FP16+INT8 model strongly typed (10.x with --stronglyTyped, 11.x without flags), each model
    the run wrote or the command that makes it."""
    lines = deploy_commands(VARIANTS["ranges, no FP16+INT8 model"], "mse").splitlines()
    assert lines == [
        "# TensorRT 8.6 to 10.x, implicit INT8: the calibration cache (deprecated in 10.1, removed in 11)",
        "trtexec --onnx=m.onnx --int8 --fp16 --calib=runs/x/mse.cache --saveEngine=model.int8.engine",
        "calib build m.onnx --cache runs/x/mse.cache --precision int8,fp16 -o model.int8.engine",
        "# TensorRT 8.6 to 10.x, explicit INT8 weakly typed: the Q/DQ model (float layers FP32 in the model, FP16 by "
        "--fp16)",
        "trtexec --onnx=runs/x/m.mse.qdq.onnx --int8 --fp16 --saveEngine=model.qdq.engine",
        "calib build runs/x/m.mse.qdq.onnx --precision int8,fp16 -o model.qdq.engine",
        "# TensorRT 10.x strongly typed and 11.x: the FP16+INT8 model (float layers FP16, quantized layers INT8)",
        "calib cache migrate runs/x/mse.cache --model m.onnx -o m.mse.fp16.qdq.onnx --ranges runs/x/ranges.json",
        "calib build m.mse.fp16.qdq.onnx --strongly-typed -o model.fp16.qdq.engine",
        "# TensorRT 10.x: strongly typed when asked",
        "trtexec --onnx=m.mse.fp16.qdq.onnx --stronglyTyped --saveEngine=model.fp16.qdq.engine",
        "# TensorRT 11.x: every network strongly typed (no --int8, --fp16, --best or --calib)",
        "trtexec --onnx=m.mse.fp16.qdq.onnx --saveEngine=model.fp16.qdq.engine"]
    text = deploy_commands(VARIANTS["as calib evaluate writes it"], "mse")
    assert "calib cache migrate runs/x/mse.cache --model m.onnx -o m.mse.fp16.qdq.onnx\n" in text  # no ranges
    assert "calib cache convert runs/x/mse.cache --model m.onnx --to qdq -o m.mse.qdq.onnx\n" in text
    text = deploy_commands(VARIANTS["a run's Q/DQ models and ranges"], "mse")
    assert "cache convert" not in text and "cache migrate" not in text  # the run wrote both models
    assert "trtexec --onnx=runs/x/m.mse.fp16.qdq.onnx --saveEngine=model.fp16.qdq.engine" in text
    text = deploy_commands(VARIANTS["kept in float, with ranges"], "mse")
    assert "--precisionConstraints=prefer --layerPrecisions=conv2:fp16 --saveEngine" in text
    assert "calib build m.onnx --cache runs/x/mse.cache --precision int8,fp16 --layer-precision conv2=fp16 " in text
    assert "calib cache convert runs/x/mse.cache --model m.onnx --to qdq -o m.mse.qdq.onnx --exclude conv2\n" in text
    assert ("calib cache convert runs/x/mse.cache --model m.onnx --to qdq --float-type fp16 --ranges "
            "runs/x/ranges.json -o m.mse.fp16.qdq.onnx --exclude conv2\n") in text  # migrate has no --exclude
    assert "cache migrate" not in text
    text = deploy_commands(VARIANTS["kept in float, writers typed"], "mse")
    assert ("--precisionConstraints=prefer --layerPrecisions=conv2:fp16 --layerOutputTypes=relu1:fp16 "
            "--saveEngine") in text


def test_the_writers_of_a_float_layer_are_the_nodes_feeding_it():
    """conv1 -> relu1 -> conv2 (float) and relu1 -> add <- conv2: conv2's writer is relu1; add (float too) reads
    relu1 and conv2, a float writer is left alone; weights and graph inputs have no writer."""
    from onnx import TensorProto, helper

    from calib.deploy.precision import float_input_writers

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["r1", "c2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g)
    assert float_input_writers(m, ["conv2"]) == ["relu1"]
    assert float_input_writers(m, ["conv2", "y"]) == ["relu1"]  # the unnamed Add is named after its output
    assert float_input_writers(m, ["conv1"]) == []  # it reads the graph input
    assert float_input_writers(m, ["relu1"]) == ["conv1"]


@pytest.mark.parametrize("section, line, wrong", [
    ("# TensorRT 11.x: strongly typed", "trtexec --onnx=m.onnx --int8 --saveEngine=e", "TensorRT 11.1 has no --int8"),
    ("# TensorRT 11.x: strongly typed", "trtexec --onnx=m.onnx --best", "TensorRT 11 removed --best"),
    ("# TensorRT 8.6 to 10.x: cache", "trtexec --onnx=m.onnx --stronglyTyped", "TensorRT 8.6 has no --stronglyTyped"),
    ("# TensorRT 10.x: typed", "trtexec --onnx=m.onnx --int9", "TensorRT 10.13 has no --int9"),
    ("# TensorRT 10.x: typed", "trtexec --onnx=m.onnx model.engine", "'model.engine' is not an option"),
    ("# the same, elsewhere", "trtexec --onnx=m.onnx", "under no TensorRT version"),
])
def test_a_wrong_command_is_caught(section, line, wrong):
    (got, versions), = commands_by_version(f"{section}\n{line}\n", markdown=False)
    assert any(wrong in p for p in trtexec_problems(got, versions)), trtexec_problems(got, versions)


def test_section_titles_name_the_versions_of_the_lists():
    assert versions_named("# TensorRT 8.6 to 10.x, implicit INT8: (deprecated in 10.1, removed in 11)") == [
        (8, 6), (10, 0), (10, 13), (10, 16)]
    assert versions_named("### TensorRT 10.x strongly typed and 11.x: the FP16+INT8 model") == [
        (10, 0), (10, 13), (10, 16), (11, 0), (11, 1)]
    assert versions_named("## TensorRT engines (`pip install -e '.[trt]'`)") == []
    with pytest.raises(AssertionError, match="no option list for TensorRT 9.2"):
        versions_named("# TensorRT 9.2: none kept")


def test_option_lists_come_from_nvidia_source_and_hold_what_is_known():
    """Each list names the TensorRT tag and files it was read from; the flags every version is known to have or
    lack are where they should be (11 removed the precision flags and calibration; --stronglyTyped came in 10)."""
    assert set(OPTIONS) == {(8, 6), (10, 0), (10, 13), (10, 16), (11, 0), (11, 1)}
    for f in LISTS.glob("*.txt"):
        head = f.read_text().splitlines()[0]
        assert head.startswith(f"# trtexec options of TensorRT {f.stem}: NVIDIA/TensorRT v") and "(commit " in head
        assert "samples/common/sampleOptions.cpp" in f.read_text()
    for v, names in OPTIONS.items():
        assert {"--onnx", "--saveEngine", "--shapes", "--memPoolSize"} <= names, v
        if v[0] < 11:
            assert REMOVED_IN_11 <= names, v
        else:
            assert not REMOVED_IN_11 & names and "--stronglyTyped" in names, v  # a no-op kept for old scripts
    assert "--stronglyTyped" not in OPTIONS[(8, 6)] and all("--stronglyTyped" in OPTIONS[v] for v in OPTIONS
                                                           if v[0] == 10)


def test_documented_trtexec_commands_exist_in_their_versions():
    """Every trtexec command in README.md and docs/*.md sits under a heading of its page naming its TensorRT
    versions and uses only their options; docs/tensorrt-versions.md gives commands for 8.6, 10.x and 11.x, and its
    TensorRT 11 section has its own commands and none of the flags 11 removed."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = [p for page in pages for line, versions in commands_by_version(page.read_text())
                for p in trtexec_problems(line, versions)]
    assert not problems, "\n".join(problems)
    found = commands_by_version((ROOT / "docs" / "tensorrt-versions.md").read_text())
    eleven = [line for line, versions in found if versions and all(v[0] == 11 for v in versions)]
    assert eleven and all("--onnx=" in line and "--saveEngine=" in line for line in eleven)
    assert {v[0] for _, versions in found for v in versions} == {8, 10, 11}
