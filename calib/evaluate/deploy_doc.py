"""The report's Deploy commands, one section per TensorRT version range.

TensorRT 8.6 to 10.x builds implicit INT8 from the calibration cache and the Q/DQ model weakly typed
(`--int8 --fp16`: the float layers in FP16); TensorRT 10.x can build, and 11.x only builds, strongly typed networks,
whose layers run in the types the ONNX model gives them: there the FP16+INT8 model (float layers FP16, quantized
layers INT8) is the one to build, and trtexec has no --int8, --fp16, --best, --calib, --precisionConstraints,
--layerPrecisions or --layerOutputTypes. Each section's first comment line names the TensorRT versions its trtexec
lines are for (tests/test_deploy_commands.py checks them against each version's option list).
"""
from __future__ import annotations

import shlex
from pathlib import Path

from calib.evaluate.deploy_choice import Fp16Worse, fp16_worse
from calib.evaluate.report_doc import shown_path

IMPLICIT = "# TensorRT 8.6 to 10.x, implicit INT8: the calibration cache (deprecated in 10.1, removed in 11)"
WEAK = ("# TensorRT 8.6 to 10.x, explicit INT8 weakly typed: the Q/DQ model (float layers FP32 in the model, "
        "FP16 by --fp16)")
STRONG = "# TensorRT 10.x strongly typed and 11.x: the FP16+INT8 model (float layers FP16, quantized layers INT8)"
WEAK_FP32 = ("# TensorRT 8.6 to 10.x, explicit INT8 weakly typed: the Q/DQ model (float layers FP32: no --fp16, "
             "FP16 float layers measured worse below)")
STRONG_QDQ = ("# TensorRT 10.x strongly typed and 11.x: the Q/DQ model as written (float layers FP32, quantized "
              "layers INT8)")
STRONG_10 = "# TensorRT 10.x: strongly typed when asked"
STRONG_11 = "# TensorRT 11.x: every network strongly typed (no --int8, --fp16, --best or --calib)"


def quoted(path: str) -> str:
    """Shell-quoted, leaving a leading ~/ unquoted so that the shell still expands it."""
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


def _excludes(patterns) -> str:
    return "".join(f" --exclude {quoted(p)}" for p in patterns)


def implicit_lines(model: str, cache: str, patterns, nodes, writers=()) -> list[str]:
    """trtexec and calib build from the cache, the layers kept in float asked in FP16 (precision constraints), the
    layers writing their inputs writing FP16 (else TensorRT may write INT8 into them; calib build does this)."""
    trt_float = (" --precisionConstraints=prefer --layerPrecisions=" + quoted(",".join(f"{n}:fp16" for n in nodes))
                 if nodes else "")
    if nodes and writers:
        trt_float += " --layerOutputTypes=" + quoted(",".join(f"{w}:fp16" for w in writers))
    build_float = "".join(f" --layer-precision {quoted(p + '=fp16')}" for p in patterns)
    return [IMPLICIT,
            f"trtexec --onnx={quoted(model)} --int8 --fp16 --calib={quoted(cache)}{trt_float}"
            " --saveEngine=model.int8.engine",
            f"calib build {quoted(model)} --cache {quoted(cache)} --precision int8,fp16{build_float} "
            "-o model.int8.engine"]


def _qdq_file(report: dict, out: str, model: str, ship: str) -> str:
    return f"{out}/{report['qdq_model']}" if report.get("qdq_model") else f"{Path(model).stem}.{ship}.qdq.onnx"


def weak_lines(report: dict, out: str, model: str, cache: str, ship: str, patterns,
               worse: Fp16Worse | None = None) -> list[str]:
    """The Q/DQ model with FP32 float layers (the run's, or the command that makes it), built with --int8 --fp16
    (--int8 alone where the evaluation found FP16 float layers significantly worse)."""
    lines = [WEAK_FP32 if worse else WEAK]
    q = _qdq_file(report, out, model, ship)
    if not report.get("qdq_model"):
        lines.append(f"calib cache convert {quoted(cache)} --model {quoted(model)} --to qdq -o {quoted(q)}"
                     + _excludes(patterns))
    flags, precision = ("--int8", "int8") if worse else ("--int8 --fp16", "int8,fp16")
    lines += [f"trtexec --onnx={quoted(q)} {flags} --saveEngine=model.qdq.engine",
              f"calib build {quoted(q)} --precision {precision} -o model.qdq.engine"]
    return lines


def strong_qdq_lines(report: dict, out: str, model: str, ship: str, worse: Fp16Worse) -> list[str]:
    """The Q/DQ model as written, strongly typed (its float layers FP32), where the FP16+INT8 model lost."""
    q = quoted(_qdq_file(report, out, model, ship))
    return [STRONG_QDQ, worse.comment(),
            f"calib build {q} --strongly-typed -o model.qdq.engine",
            STRONG_10, f"trtexec --onnx={q} --stronglyTyped --saveEngine=model.qdq.engine",
            STRONG_11, f"trtexec --onnx={q} --saveEngine=model.qdq.engine"]


def strong_lines(report: dict, out: str, model: str, cache: str, ship: str, patterns) -> list[str]:
    """The FP16+INT8 model (the run's, or the command that makes it from the cache), built strongly typed."""
    lines = [STRONG]
    if report.get("fp16_model"):
        f = f"{out}/{report['fp16_model']}"
    else:
        f = f"{Path(model).stem}.{ship}.fp16.qdq.onnx"
        ranges = f" --ranges {quoted(out + '/' + report['ranges'])}" if report.get("ranges") else ""
        if patterns:  # the layers the evaluation kept in float: left without Q/DQ, so FP16 in the model
            lines.append(f"calib cache convert {quoted(cache)} --model {quoted(model)} --to qdq --float-type fp16"
                         f"{ranges} -o {quoted(f)}" + _excludes(patterns))
        else:
            lines.append(f"calib cache migrate {quoted(cache)} --model {quoted(model)} -o {quoted(f)}{ranges}")
    lines += [f"calib build {quoted(f)} --strongly-typed -o model.fp16.qdq.engine",
              STRONG_10, f"trtexec --onnx={quoted(f)} --stronglyTyped --saveEngine=model.fp16.qdq.engine",
              STRONG_11, f"trtexec --onnx={quoted(f)} --saveEngine=model.fp16.qdq.engine"]
    return lines


def deploy_commands(report: dict, ship: str) -> str:
    """The commands that build what the report evaluated, per TensorRT version: implicit INT8 from the cache
    (trtexec, calib build), the Q/DQ model weakly typed, and the FP16+INT8 model strongly typed (TensorRT 10.x
    on request, 11.x always), each model the run wrote or the command that makes it from the cache. The layers
    the evaluation kept in float (`exclude`: its patterns; `float_layers`: the nodes they matched) stay there.
    Where the evaluation found the FP16+INT8 model significantly worse than the Q/DQ model as written, the strongly
    typed section builds the Q/DQ model instead and says why, and the weakly typed one leaves out --fp16."""
    out = shown_path(report.get("out_dir", "."))
    cache = shown_path(report.get("caches", {}).get(ship, f"{out}/{ship}.cache"))
    model = shown_path(report.get("model_file") or report.get("model"))
    patterns, nodes = report.get("exclude") or [], report.get("float_layers") or []
    worse = fp16_worse(report, ship)
    strong = (strong_qdq_lines(report, out, model, ship, worse) if worse
              else strong_lines(report, out, model, cache, ship, patterns))
    lines = (implicit_lines(model, cache, patterns, nodes, report.get("float_writers") or ())
             + weak_lines(report, out, model, cache, ship, patterns, worse) + strong)
    return "\n".join(lines)
