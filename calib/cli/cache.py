"""`calib cache ...`: inspect, compare and convert calibration caches."""
from __future__ import annotations

import json
from pathlib import Path

import click

from calib.cli.common import cache_checks as _cache_checks
from calib.cli.common import handled as _handled
from calib.errors import CalibError


@click.group()
def cache():
    """Inspect, compare and convert calibration caches."""


@cache.command("inspect")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--model", type=click.Path(dir_okay=False),
              help="Check the cache against this model: its tensors, and the model hash in the sidecar.")
@click.option("--ignore-hash", is_flag=True, help="With --model: accept a sidecar that names another model.")
@click.option("--allow-unknown", is_flag=True, help="With --model: accept tensors the model lacks.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_cache_checks
@_handled
def cache_inspect(file, model, ignore_hash, allow_unknown, as_json, ignore_sidecar, allow_partial):
    """Print a cache's header and per-tensor scale and amax."""
    from calib.quantize.cache import is_trt_internal
    from calib.quantize.cachecheck import CacheChecks, load_checked

    info = None
    if model:
        from calib.quantize.derived import model_for_cache
        from calib.quantize.model import inspect_model

        info = inspect_model(model if ignore_hash else model_for_cache(file, model))
    c, side = load_checked(file, info, CacheChecks(ignore_hash, allow_unknown, ignore_sidecar, allow_partial))
    if model:
        internal = [n for n in c.scales if n not in set(info.activations) and is_trt_internal(n)]
        if internal:
            click.echo(f"{len(internal)} TensorRT-internal tensors (not in the ONNX model)", err=True)
    if as_json:
        click.echo(json.dumps({"header": c.header, "scales": c.scales, "amax": c.amaxes(),
                               "sidecar": side}, indent=2))
        return
    click.echo(f"{c.header}  ({len(c.scales)} tensors)")
    if side:
        params = ", ".join(f"{k}={v}" for k, v in sorted((side.get("params") or {}).items()))
        click.echo(f"algorithm {side['algorithm']}" + (f" ({params})" if params else "")
                   + f", samples {side.get('samples')}, model sha256 {side['model_sha256'][:12]}")
    click.echo(f"{'scale':12s}  {'amax':>11s}  tensor")
    for name, s in c.scales.items():
        click.echo(f"{s:.6e}  {s * 127:11.6g}  {name}")


@cache.command("diff")
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
@click.option("--top", default=20, show_default=True, help="Rows of the largest differences.")
@click.option("--ignore-sidecar", is_flag=True, help="Compare calib caches whose sidecars are missing or disagree.")
@_handled
def cache_diff(a, b, top, ignore_sidecar):
    """Compare two caches tensor by tensor (ratio of amax B / A)."""
    import numpy as np

    from calib.quantize.cache import read_cache
    from calib.quantize.cachecheck import checked_sidecar, recover_cache_pair

    recover_cache_pair(a)
    recover_cache_pair(b)
    ca, cb = read_cache(a), read_cache(b)
    checked_sidecar(a, ca, ignore_sidecar)
    checked_sidecar(b, cb, ignore_sidecar)
    common = [n for n in ca.scales if n in cb.scales]
    only_a = [n for n in ca.scales if n not in cb.scales]
    only_b = [n for n in cb.scales if n not in ca.scales]
    click.echo(f"A {ca.header} ({len(ca.scales)}), B {cb.header} ({len(cb.scales)}): {len(common)} in both, "
               f"{len(only_a)} only in A, {len(only_b)} only in B")
    if not common:
        return
    ratio = np.array([cb.scales[n] / ca.scales[n] if ca.scales[n] else np.inf for n in common])
    dev = np.abs(np.log(np.where(ratio > 0, ratio, 1e-30)))
    click.echo(f"B/A ratio: median {np.median(ratio):.4f}, min {ratio.min():.4f}, max {ratio.max():.4f}; "
               f"identical {int((ratio == 1).sum())}")
    for i in np.argsort(-dev)[:top]:
        click.echo(f"{ratio[i]:9.4f}  {common[i]}")


@cache.command("convert")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--model", required=True, type=click.Path(dir_okay=False), help="The ONNX model the cache is for.")
@click.option("--to", "fmt", required=True, type=click.Choice(["qdq", "cache"]),
              help="qdq: a Q/DQ ONNX model; cache: rewrite the cache under another header.")
@click.option("--carrier", default="EntropyCalibration2", show_default=True,
              help="--to cache: the calibrator class named in the header (the class that will read it).")
@click.option("--trt-version", default=None, help="--to cache: header digits (default: keep).")
@click.option("--exclude", multiple=True,
              help="Q/DQ: keep in float (node/output name glob or op:<OpType>); repeatable.")
@click.option("--ignore-hash", is_flag=True, help="Use a cache whose sidecar names another model.")
@click.option("--allow-unknown", is_flag=True, help="Use a cache naming tensors the model lacks (ignored).")
@click.option("--int8-weights", is_flag=True, help="Q/DQ: store weights as INT8 initializers (4x smaller file).")
@click.option("--quantize-stem-output/--keep-stem-output-float", default=True, show_default=True,
              help="Q/DQ: quantize the output of a stem Conv (<= 4 input channels) before its LeakyRelu, which "
                   "TensorRT 8.6 leaves unfused (YOLOv3-tiny's layer0): the Q/DQ engine then runs as fast as the "
                   "implicit one, at its accuracy; --keep-stem-output-float: one rounding fewer, slower engine.")
@click.option("--residual-branch", type=click.Choice(["conv", "act", "float"]), default="conv", show_default=True,
              help="Q/DQ: a residual Add whose Conv reaches it through an activation (Conv -> SiLU -> Add), which "
                   "TensorRT 8.6 does not fuse: conv quantizes the Conv's output (activation + Add then run as one "
                   "INT8 layer, as in the implicit engine), act the activation's output (as ModelOpt places it), "
                   "float leaves it float (activation + Add in FP16: a slower engine).")
@click.option("--allow-float-weights", is_flag=True,
              help="Q/DQ: write the model even where a layer's input gets Q/DQ but its weight stays float "
                   "(refused by default: TensorRT cannot run that layer in INT8).")
@click.option("--like-engine", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Q/DQ: no Q/DQ on the layers this engine (built by calib build: its .json sidecar) ran in "
                   "FP16/FP32, e.g. an implicit INT8 engine's choices carried to an explicit one.")
@click.option("--allow-qdq", is_flag=True, help="Q/DQ: quantize a model that holds Q/DQ nodes already (default: refused).")
@click.option("--float-type", type=click.Choice(["fp32", "fp16"]), default="fp32", show_default=True,
              help="Q/DQ: the type of the layers that are not INT8. fp16: the FP16+INT8 model for a strongly typed "
                   "build (TensorRT 10 --stronglyTyped, TensorRT 11), FP32 kept where FP16 would not hold.")
@click.option("--io-type", type=click.Choice(["fp32", "fp16"]), default="fp32", show_default=True,
              help="--float-type fp16: the type of the model's inputs and outputs.")
@click.option("--ranges", type=click.Path(dir_okay=False), default=None,
              help="--float-type fp16: ranges.json from calib run (every tensor's maximum over the pass); without "
                   "it the cache's amax, clipped by its calibrator, stands in.")
@_cache_checks
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False))
@_handled
def cache_convert(file, model, fmt, carrier, trt_version, exclude, ignore_hash, allow_unknown, int8_weights,
                  quantize_stem_output, residual_branch, allow_float_weights, like_engine, allow_qdq, float_type,
                  io_type, ranges, ignore_sidecar, allow_partial, out):
    """Turn a cache into a Q/DQ ONNX model (TensorRT explicit quantization) or relabel its header (+ sidecar)."""
    from calib.cli.common import given_path
    from calib.io.files import atomic_write_bytes
    from calib.io.inputs import refuse_overwrite
    from calib.quantize.cache import sidecar_path
    from calib.quantize.cachecheck import CacheChecks, load_checked, write_converted
    from calib.quantize.coverage import check_float_weights, weight_coverage
    from calib.quantize.model import check_fp32, inspect_model, load_model
    from calib.quantize.opset import at_qdq_opset, describe_opset
    from calib.quantize.patterns import check_exclusions
    from calib.quantize.qdq import Exclusions, count_qdq, excluded_from, insert_qdq

    if fmt != "qdq" and (float_type != "fp32" or io_type != "fp32" or ranges):
        raise CalibError("--float-type, --io-type and --ranges apply to --to qdq only")
    if float_type == "fp32" and (io_type != "fp32" or ranges):
        raise CalibError("--io-type and --ranges apply to --float-type fp16 only")
    inputs = [(file, "the cache"), (sidecar_path(file), "the cache's sidecar"), (model, "--model")]
    if ranges:
        inputs.append((ranges, "--ranges"))
    if like_engine:
        inputs += [(like_engine, "--like-engine"), (f"{like_engine}.json", "--like-engine's sidecar")]
    given_path(out)
    outputs = [(out, "-o")] + ([(sidecar_path(out), "the sidecar of -o")] if fmt == "cache" else [])
    refuse_overwrite(outputs, inputs)  # before anything is read or written
    if fmt == "cache" and sidecar_path(out) == Path(out):
        raise CalibError(f"{out}: -o: a cache named .json would be its own sidecar; name it .cache")
    from calib.quantize.derived import model_for_cache

    if not ignore_hash:
        model = str(model_for_cache(file, model))  # calib's reshaped or folded copy, where the cache is for it
    proto = load_model(model)
    if fmt == "qdq":
        check_fp32(proto, model, allow_qdq)
    qproto = at_qdq_opset(proto, model) if fmt == "qdq" else proto  # below opset 13: converted, names kept
    ex = check_exclusions(proto, exclude, model) if fmt == "qdq" else excluded_from(())
    if like_engine and fmt != "qdq":
        raise CalibError("--like-engine applies to --to qdq only")
    like = []
    if like_engine:
        from calib.deploy.like import exclusions_like

        like = exclusions_like(proto, like_engine)
        ex = Exclusions(ex.names + tuple(like), ex.op_types)
    info = inspect_model(model, proto)
    c, side = load_checked(file, info, CacheChecks(ignore_hash, allow_unknown, ignore_sidecar, allow_partial), ex,
                           proto)
    if fmt == "cache":
        write_converted(out, c, side, info, carrier, trt_version or c.version, source=file)
        click.echo(f"wrote {out} and its sidecar")
        return
    if float_type == "fp16":
        _write_fp16(proto, c, ex, int8_weights, io_type, ranges, quantize_stem_output, model, allow_float_weights,
                    out, f"; {len(like)} layers left in float as in {like_engine}" if like_engine else "",
                    residual_branch)
        return
    q = insert_qdq(qproto, c.amaxes(), ex, int8_weights=int8_weights,
                   stem_output=quantize_stem_output, residual_branch=residual_branch)
    _say_stem(qproto, ex, quantize_stem_output)
    _say_residual(qproto, ex, residual_branch)
    cov = weight_coverage(q)
    check_float_weights(cov, model, allow_float_weights, "--allow-float-weights")
    atomic_write_bytes(out, q.SerializeToString())
    kept = f"; {len(like)} layers left in float as in {like_engine}" if like_engine else ""
    click.echo(f"wrote {out} ({count_qdq(q)} Q/DQ pairs; {cov.describe()}; {describe_opset(q)}{kept})")


def _say_residual(proto, ex, where: str) -> None:
    """Which placement the Conv branches of residual Adds behind an activation got, where the model has any."""
    from calib.quantize.placement import RESIDUAL_BRANCH, residual_adds

    adds = residual_adds(proto, ex.excludes)
    if not adds:
        return
    names = ", ".join(adds[:3]) + (f" and {len(adds) - 3} more" if len(adds) > 3 else "")
    head = f"{len(adds)} residual Add{'s' if len(adds) != 1 else ''} behind an activation ({names}): Conv branch"
    if where == "float":
        click.echo(f"{head} kept float (--residual-branch float); TensorRT 8.6 then runs activation + Add in FP16, "
                   "a slower engine. The default, --residual-branch conv, quantizes the Conv's output (as the "
                   "implicit engine runs it)")
    else:
        at = "the Conv's output" if where == "conv" else "the activation's output"
        default = " (the default)" if where == RESIDUAL_BRANCH else ""
        click.echo(f"{head} quantized at {at} (--residual-branch {where}{default}); --residual-branch float keeps "
                   "it float: one rounding fewer, a slower engine")


def _say_stem(proto, ex, quantized: bool) -> None:
    """Which placement the stem Conv's output got, where the choice exists."""
    from calib.quantize.placement import stem_outputs

    stems = stem_outputs(proto, ex.excludes)
    if not stems:
        return
    names = ", ".join(stems)
    if quantized:
        click.echo(f"stem Conv output {names}: quantized (TensorRT 8.6 leaves its LeakyRelu unfused; this runs it "
                   "in INT8, as fast as the implicit engine, at its accuracy); --keep-stem-output-float keeps it "
                   "float: one rounding fewer, a slower engine")
    else:
        click.echo(f"stem Conv output {names}: kept float (--keep-stem-output-float): its Conv writes FP16 and the "
                   "LeakyRelu runs in FP16 on TensorRT 8.6 (slower than the implicit engine)")


def _write_fp16(proto, c, ex, int8_weights, io_type, ranges, stem_output, model, allow_float_weights, out,
                kept_text="", residual_branch="conv") -> None:
    """Write the FP16+INT8 model of `proto` with the cache `c` to `out` and say which layers stay FP32."""
    from calib.io.files import atomic_write_bytes
    from calib.quantize.coverage import check_float_weights, weight_coverage
    from calib.quantize.fp16_model import make_fp16_model, read_ranges
    from calib.quantize.opset import describe_opset
    from calib.quantize.qdq import count_qdq

    table = read_ranges(ranges, proto, model) if ranges else None
    f = make_fp16_model(proto, c.amaxes(), table, f"{ranges} (at least the cache's amax)" if ranges else None, ex,
                        int8_weights, io_type, stem_output, label=model, residual_branch=residual_branch)
    cov = weight_coverage(f.model)
    check_float_weights(cov, model, allow_float_weights, "--allow-float-weights")
    atomic_write_bytes(out, f.model.SerializeToString())
    click.echo(f"wrote {out} ({count_qdq(f.model)} Q/DQ pairs; {cov.describe()}; {describe_opset(f.model)}; "
               f"{f.describe()}; inputs/outputs {io_type}{kept_text})")
    if not ranges:
        click.echo("FP32 by range judged on the cache's amax (clipped by its calibrator); give --ranges "
                   "(calib run's ranges.json) for the pass's own maxima", err=True)
    for r in f.fp32_table():
        click.echo(f"  FP32  {r['node']}  ({r['op'] or 'node'}; {r['rule']}: {r['reason']})")


@cache.command("migrate")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--model", required=True, type=click.Path(dir_okay=False), help="The ONNX model the cache is for.")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="The TensorRT 11 model to write.")
@click.option("--ranges", type=click.Path(dir_okay=False), default=None,
              help="ranges.json from calib run (every tensor's maximum over the pass) for the FP32/FP16 choice.")
@click.option("--io-type", type=click.Choice(["fp32", "fp16"]), default="fp32", show_default=True,
              help="The type of the model's inputs and outputs.")
@click.option("--exclude", multiple=True,
              help="Keep in float, without Q/DQ (node/output name glob or op:<OpType>); repeatable.")
@click.option("--int8-weights", is_flag=True, help="Store weights as INT8 initializers (4x smaller file).")
@click.option("--ignore-hash", is_flag=True, help="Use a cache whose sidecar names another model.")
@click.option("--allow-unknown", is_flag=True, help="Use a cache naming tensors the model lacks (ignored).")
@_cache_checks
@_handled
@click.pass_context
def cache_migrate(ctx, file, model, out, ranges, io_type, exclude, int8_weights, ignore_hash, allow_unknown,
                  ignore_sidecar, allow_partial):
    """A TensorRT <= 10 calibration cache (TensorRT's own or calib's) + MODEL -> the model TensorRT 11 builds.

    TensorRT 11 has no calibrators: the cache's scales become Q/DQ nodes (INT8) and the other layers FP16, FP32
    where FP16 would not hold, the FP16+INT8 model of `calib cache convert --to qdq --float-type fp16`. Build it
    with `trtexec --onnx=OUT` (TensorRT 11, strongly typed) or `trtexec --onnx=OUT --stronglyTyped` (10.x)."""
    ctx.invoke(cache_convert, file=file, model=model, fmt="qdq", carrier="EntropyCalibration2", trt_version=None,
               exclude=exclude, ignore_hash=ignore_hash, allow_unknown=allow_unknown, int8_weights=int8_weights,
               quantize_stem_output=True, residual_branch="conv", allow_float_weights=False, like_engine=None,
               allow_qdq=False, float_type="fp16", io_type=io_type, ranges=ranges, ignore_sidecar=ignore_sidecar,
               allow_partial=allow_partial, out=out)
